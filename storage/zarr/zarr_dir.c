/* The files of a zarr store version: opened beneath the version's own
 * directory descriptor, never outside the store, never blocking, and each
 * one checked for changes made after the version opened (zarr_dir in
 * storage/zarr/zarr_impl.h says why ctime). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "storage/zarr/zarr.h"
#include "storage/zarr/zarr_impl.h"

/* The canonical path of the directory open as dir (where it is now, even
 * when renamed since), else of store_dir when /proc is not mounted. */
static char *canonical_dir(int dir, const char *store_dir)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dir);
    char *real = realpath(link, NULL);
    return real ? real : realpath(store_dir, NULL);
}

/* The fallback of openat2 when it cannot judge a path (an absolute
 * symlink, which RESOLVE_BENEATH refuses even when it points inside; a
 * kernel or seccomp filter without openat2): the canonical path, opened
 * only when it lies inside the canonical store directory.  Returns the
 * descriptor or -1 with errno (EXDEV when it leads outside). */
static int open_canonical_inside(int dir, const char *store_dir, const char *rel, int flags)
{
    char path[PATH_MAX], *real = NULL;
    char *real_dir = canonical_dir(dir, store_dir);
    int f = -1;
    if (!real_dir)
        return -1;
    if (!strcmp(rel, ".")) {
        real = real_dir;
        real_dir = NULL;
        goto open_it;
    }
    int n = snprintf(path, sizeof path, "%s/%s", real_dir, rel);
    if (n < 0 || (size_t)n >= sizeof path) {
        errno = ENAMETOOLONG;
        goto done;
    }
    real = realpath(path, NULL);
    if (!real)
        goto done;
    size_t dl = strlen(real_dir);
    if (strncmp(real, real_dir, dl) != 0 || real[dl] != '/') {
        errno = EXDEV;
        goto done;
    }
open_it:
    f = open(real, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC | flags);
done:
    free(real_dir);
    free(real);
    return f;
}

/* The store-relative path rel opened beneath the store directory (dir
 * open on it, store_dir its path) with O_RDONLY and flags, or -1 with
 * errno. */
static int open_beneath_flags(int dir, const char *store_dir, const char *rel, int flags)
{
    struct open_how how = {
        .flags = (uint64_t)(O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | flags),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    int f = (int)syscall(SYS_openat2, dir, rel, &how, sizeof how);
    if (f < 0 && (errno == EXDEV || errno == ENOSYS || errno == EPERM))
        return open_canonical_inside(dir, store_dir, rel, flags);
    return f;
}

int zarr_open_file_at(int store_fd, const char *store_dir, const char *rel, int *fd,
                      struct stat *st, cellar_error *err)
{
    *fd = -1;
    int f = open_beneath_flags(store_fd, store_dir, rel, 0);
    if (f < 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            return 0;
        if (e == EXDEV)
            return cellar_fail(err, CELLAR_EFORMAT,
                               "'%s' is a link that leads outside the store", rel);
        if (e == ELOOP)
            return cellar_fail(err, CELLAR_EFORMAT, "'%s' is a link that loops", rel);
        if (e == EISDIR)
            return cellar_fail(err, CELLAR_EFORMAT, "'%s' is a directory, not a file", rel);
        if (e == EMFILE || e == ENFILE || e == ENOMEM)
            return cellar_fail(err, CELLAR_EIO, "cannot open '%s' now: %s", rel, strerror(e));
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' cannot be opened: %s", rel, strerror(e));
    }
    if (fstat(f, st) != 0 || !S_ISREG(st->st_mode)) {
        close(f);
        return cellar_fail(err, CELLAR_EFORMAT,
                           "'%s' is not a regular file (a FIFO, device, socket or directory)",
                           rel);
    }
    *fd = f;
    return 0;
}



/* ---- the version's directory ------------------------------------------- */

static int64_t ns_of(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static const zarr_source_ops dir_ops;

int zarr_dir_open(zarr_dir *d, const char *path)
{
    memset(d, 0, sizeof *d);
    d->src.ops = &dir_ops;
    d->fd = -1;
    /* Taken before anything is read: a change after it has a ctime at or
     * past it (the kernel stamps ctime from the same coarse clock). */
    clock_gettime(CLOCK_REALTIME_COARSE, &d->born);
    d->path = strdup(path);
    if (!d->path)
        return ENOMEM;
    d->fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    return d->fd < 0 ? errno : 0;
}

void zarr_dir_close(zarr_dir *d)
{
    if (d->fd >= 0)
        close(d->fd);
    free(d->path);
    d->fd = -1;
    d->path = NULL;
}

/* Keeps ctime as the newest change when it is after born less
 * ZARR_SETTLE_NS: a file changed that recently may belong to a rewrite
 * still under way when the version opened (the version may hold part of
 * the old and part of the new store). */
static void note_ctime(zarr_dir *d, struct timespec ctime)
{
    int64_t t = ns_of(ctime);
    if (t < ns_of(d->born) - ZARR_SETTLE_NS)
        return;
    int64_t seen = atomic_load(&d->changed);
    while (t > seen && !atomic_compare_exchange_weak(&d->changed, &seen, t))
        ;
}

void zarr_dir_note_fd(zarr_dir *d, int fd)
{
    struct stat st;
    if (fstat(fd, &st) == 0)
        note_ctime(d, st.st_ctim);
}

/* The last change of the place of a missing file rel: its nearest existing
 * directory (rel's parent, else the parent's parent, ..., else the store's
 * own); now for a store directory that is gone altogether (no links left).
 * 0 when it cannot be told. */
static int64_t missing_place_changed(zarr_dir *d, const char *rel)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", rel);
    struct stat st;
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (!slash)
            break;
        *slash = '\0';
        if (dir[0] && fstatat(d->fd, dir, &st, 0) == 0)
            return ns_of(st.st_ctim);
    }
    if (fstatat(d->fd, "", &st, AT_EMPTY_PATH) != 0)
        return 0;
    if (st.st_nlink == 0) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME_COARSE, &now);
        return ns_of(now);
    }
    return ns_of(st.st_ctim);
}

/* A file that is missing: whether it was just removed. */
static void note_missing(zarr_dir *d, const char *rel)
{
    int64_t t = missing_place_changed(d, rel);
    if (t)
        note_ctime(d, (struct timespec){t / 1000000000, t % 1000000000});
}

static int open_file_st(zarr_dir *d, const char *rel, int *fd, struct stat *st,
                        cellar_error *err)
{
    *fd = -1;
    if (d->fd < 0)
        return 0;
    int rc = zarr_open_file_at(d->fd, d->path, rel, fd, st, err);
    if (rc)
        return rc;
    if (*fd < 0) {
        note_missing(d, rel);
        return 0;
    }
    note_ctime(d, st->st_ctim);
    return 0;
}

int zarr_dir_open_file(zarr_dir *d, const char *rel, int *fd, uint64_t *size,
                       cellar_error *err)
{
    struct stat st;
    int rc = open_file_st(d, rel, fd, &st, err);
    if (!rc && *fd >= 0)
        *size = (uint64_t)st.st_size;
    return rc;
}

DIR *zarr_dir_list(zarr_dir *d, const char *rel)
{
    if (d->fd < 0) {
        errno = ENOENT;
        return NULL;
    }
    int f = open_beneath_flags(d->fd, d->path, rel[0] ? rel : ".", O_DIRECTORY);
    if (f < 0)
        return NULL;
    DIR *dir = fdopendir(f);
    if (!dir) {
        int e = errno;
        close(f);
        errno = e;
    }
    return dir;
}

/* ---- the bytes a version holds ----------------------------------------- */

typedef struct bytes_walk {
    uint64_t bytes, entries, max_entries;
    struct timespec deadline;
} bytes_walk;

static int past(const struct timespec *deadline)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > deadline->tv_sec ||
           (now.tv_sec == deadline->tv_sec && now.tv_nsec > deadline->tv_nsec);
}

/* Adds the regular files below the directory open as dir (taken over and
 * closed); symlinks are not followed.  -1 when a bound was reached. */
static int add_tree_bytes(int dir, bytes_walk *w, int depth)
{
    DIR *d = fdopendir(dir);
    if (!d) {
        close(dir);
        return 0;
    }
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (++w->entries > w->max_entries || ((w->entries & 255) == 0 && past(&w->deadline))) {
            rc = -1;
            break;
        }
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (S_ISREG(st.st_mode)) {
            w->bytes += (uint64_t)st.st_size;
        } else if (S_ISDIR(st.st_mode) && depth < 64) {
            int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                rc = add_tree_bytes(sub, w, depth + 1);
        }
    }
    closedir(d);
    return rc;
}

int zarr_dir_bytes(zarr_dir *d, uint64_t max_entries, double max_seconds, uint64_t *bytes)
{
    *bytes = 0;
    if (d->fd < 0)
        return -1;
    int dir = openat(d->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -1;
    bytes_walk w = {.max_entries = max_entries};
    clock_gettime(CLOCK_MONOTONIC, &w.deadline);
    w.deadline.tv_sec += (time_t)max_seconds;
    w.deadline.tv_nsec += (long)((max_seconds - (double)(time_t)max_seconds) * 1e9);
    if (w.deadline.tv_nsec >= 1000000000L) {
        w.deadline.tv_sec++;
        w.deadline.tv_nsec -= 1000000000L;
    }
    if (add_tree_bytes(dir, &w, 0) != 0)
        return -1;
    *bytes = w.bytes;
    return 0;
}

/* ---- the directory as a key source ------------------------------------- */

static int dir_open_key(zarr_source *s, const char *rel, zarr_key *k, cellar_error *err)
{
    memset(k, 0, sizeof *k);
    struct stat st;
    int rc = open_file_st((zarr_dir *)s, rel, &k->fd, &st, err);
    if (rc || k->fd < 0)
        return rc;
    k->found = 1;
    k->size = (uint64_t)st.st_size;
    k->mtime = st.st_mtim;
    return 0;
}

static int dir_read_key(zarr_source *s, zarr_key *k, uint64_t off, size_t n, void *buf,
                        const char *what, cellar_error *err)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t got = pread(k->fd, p, n, (off_t)(k->offset + off));
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return cellar_fail(err, CELLAR_EIO, "reading %s failed: %s", what, strerror(errno));
        if (got == 0)
            return cellar_fail(err, CELLAR_EFORMAT, "%s ends early", what);
        p += got;
        n -= (size_t)got;
        off += (uint64_t)got;
    }
    zarr_dir_note_fd((zarr_dir *)s, k->fd); /* a rewrite that began while it was read */
    return 0;
}

static void dir_close_key(zarr_source *s, zarr_key *k)
{
    (void)s;
    if (k->fd >= 0)
        close(k->fd);
    k->fd = -1;
}

/* The code of a directory that cannot be listed: gone, not a directory or
 * leading outside is CELLAR_ENOTFOUND; the system short of descriptors or
 * memory CELLAR_EIO; anything else (not readable) CELLAR_EFORMAT. */
static int list_failure(int e, const char *rel, cellar_error *err)
{
    int code = e == ENOENT || e == ENOTDIR || e == EXDEV || e == ELOOP ? CELLAR_ENOTFOUND
               : e == EMFILE || e == ENFILE || e == ENOMEM          ? CELLAR_EIO
                                                                     : CELLAR_EFORMAT;
    return cellar_fail(err, code, "cannot list '/%s': %s", rel, strerror(e));
}

/* Whether directory `target` is dir itself or one of its parents up to the
 * store's directory (store_fd): a symlink there makes a cycle. */
static int is_dir_or_parent(int store_fd, int dir, const struct stat *target)
{
    struct stat top, cur;
    if (fstat(store_fd, &top) != 0)
        return 0;
    int fd = openat(dir, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    int found = 0;
    for (int up = 0; fd >= 0 && up < 256 && !found; up++) {
        if (fstat(fd, &cur) != 0)
            break;
        found = cur.st_dev == target->st_dev && cur.st_ino == target->st_ino;
        if (found || (cur.st_dev == top.st_dev && cur.st_ino == top.st_ino))
            break;
        int parent = openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
        close(fd);
        fd = parent;
    }
    if (fd >= 0)
        close(fd);
    return found;
}

/* What a directory entry is, symlinks followed (beneath the store: a link
 * that leads out lists as what it points to but is never opened).  A
 * symlink to the directory listed or to a parent of it lists as neither
 * file nor directory: followed, every walk of the store would go round it
 * to its depth limit. */
static zarr_entry_type entry_type(const zarr_dir *zd, DIR *d, const struct dirent *e)
{
    unsigned char type = e->d_type;
    if (type == DT_UNKNOWN || type == DT_LNK) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0) != 0)
            return ZARR_ENTRY_OTHER;
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
        if (type == DT_DIR && e->d_type != DT_DIR && is_dir_or_parent(zd->fd, dirfd(d), &st))
            return ZARR_ENTRY_OTHER;
    }
    return type == DT_DIR ? ZARR_ENTRY_DIR : type == DT_REG ? ZARR_ENTRY_FILE : ZARR_ENTRY_OTHER;
}

static int dir_list(zarr_source *s, const char *rel, zarr_list_fn fn, void *ctx,
                    cellar_error *err)
{
    zarr_dir *zd = (zarr_dir *)s;
    DIR *d = zarr_dir_list(zd, rel);
    if (!d)
        return list_failure(errno, rel, err);
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        rc = fn(ctx, e->d_name, entry_type(zd, d, e));
    }
    zarr_dir_note_fd(zd, dirfd(d)); /* an entry added or removed meanwhile */
    closedir(d);
    return rc;
}

static int dir_total_bytes(zarr_source *s, uint64_t *bytes)
{
    /* A store of a million chunk files is walked in about a second. */
    return zarr_dir_bytes((zarr_dir *)s, 2000000, 2.0, bytes);
}

static int64_t dir_changed(zarr_source *s)
{
    return atomic_load(&((zarr_dir *)s)->changed);
}

static void dir_destroy(zarr_source *s)
{
    zarr_dir_close((zarr_dir *)s);
    free(s);
}

static void dir_missing_chunk(zarr_source *s, const char *rel)
{
    zarr_dir *d = (zarr_dir *)s;
    if (d->fd < 0)
        return;
    int64_t t = missing_place_changed(d, rel);
    if (!t)
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t until = t + ZARR_MISSING_SETTLE_NS;
    if (until <= ns_of(now))
        return;
    int64_t seen = atomic_load(&d->unsettled_until);
    while (until > seen && !atomic_compare_exchange_weak(&d->unsettled_until, &seen, until))
        ;
}

static int64_t dir_unsettled_until(zarr_source *s)
{
    return atomic_load(&((zarr_dir *)s)->unsettled_until);
}

static const zarr_source_ops dir_ops = {
    .open_key = dir_open_key,
    .read_key = dir_read_key,
    .close_key = dir_close_key,
    .list = dir_list,
    .total_bytes = dir_total_bytes,
    .changed = dir_changed,
    .missing_chunk = dir_missing_chunk,
    .unsettled_until = dir_unsettled_until,
    .destroy = dir_destroy,
};

int zarr_dir_source_new(const char *path, zarr_dir **out)
{
    *out = NULL;
    zarr_dir *d = malloc(sizeof *d);
    if (!d)
        return ENOMEM;
    int e = zarr_dir_open(d, path);
    if (e) {
        zarr_dir_close(d);
        free(d);
        return e;
    }
    *out = d;
    return 0;
}
