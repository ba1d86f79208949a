#include "storage/ext_targets.h"

#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/hash.h"

/* Files a version may reach, and how many files away from the store. */
#define EXT_TARGETS_MAX 64
#define EXT_DEPTH_MAX 4

struct ext_targets {
    char *root;
    char *store_dir; /* the real directory holding the store file */
    int links_in_root;
    ext_target items[EXT_TARGETS_MAX];
    size_t n;
};

ext_targets *ext_targets_new(const char *root, const char *store_path, int links_in_root)
{
    ext_targets *t = calloc(1, sizeof *t);
    char dir[PATH_MAX];
    if (!t || ext_targets_dir_of(store_path, dir, sizeof dir) ||
        !(t->root = strdup(root)) || !(t->store_dir = strdup(dir))) {
        ext_targets_free(t);
        return NULL;
    }
    t->links_in_root = links_in_root;
    return t;
}

void ext_targets_free(ext_targets *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++) {
        free(t->items[i].base);
        free(t->items[i].name);
        free(t->items[i].path);
        free(t->items[i].why);
    }
    free(t->root);
    free(t->store_dir);
    free(t);
}

int ext_targets_dir_of(const char *path, char *out, size_t size)
{
    const char *slash = strrchr(path, '/');
    size_t len = slash ? (size_t)(slash - path) : 0;
    if (!slash || len + 1 > size)
        return -1;
    memcpy(out, path, len);
    out[len] = '\0';
    if (len == 0 && size > 1)
        strcpy(out, "/");
    return 0;
}

/* Whether the real path real lies beneath the real directory dir. */
static int beneath(const char *real, const char *dir)
{
    size_t dl = strlen(dir);
    if (dl == 1 && dir[0] == '/')
        return 1;
    return strncmp(real, dir, dl) == 0 && real[dl] == '/';
}

static void id_of(const struct stat *st, probe_file_id *id)
{
    *id = (probe_file_id){(uint64_t)st->st_dev,     (uint64_t)st->st_ino,
                          (uint64_t)st->st_size,    (int64_t)st->st_mtim.tv_sec,
                          st->st_mtim.tv_nsec,      (int64_t)st->st_ctim.tv_sec,
                          st->st_ctim.tv_nsec};
}

static int id_same(const probe_file_id *a, const probe_file_id *b)
{
    return !memcmp(a, b, sizeof *a);
}

static int refuse(ext_target *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int refuse(ext_target *e, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    free(e->why);
    e->why = strdup(why);
    return e->why ? 0 : CELLAR_ENOMEM;
}

/* Where libhdf5 opens e's name (storage/hdf5/h5.c sets it up so): an
 * absolute name as it is when it exists (external raw storage: always),
 * else its last component in base; a relative one in base. */
static char *where_opened(const ext_target *e)
{
    const char *name = e->name;
    struct stat st;
    if (name[0] == '/' && (e->kind == EXT_RAW || stat(name, &st) == 0))
        return strdup(name);
    if (name[0] == '/')
        name = strrchr(name, '/') + 1;
    size_t bl = strcmp(e->base, "/") ? strlen(e->base) : 0, nl = strlen(name);
    char *p = bl + 1 + nl + 1 <= PATH_MAX ? malloc(bl + 1 + nl + 1) : NULL;
    if (p) {
        memcpy(p, e->base, bl);
        p[bl] = '/';
        memcpy(p + bl + 1, name, nl + 1);
    }
    return p;
}

/* Resolves and checks e (its kind, base, name and depth set). */
static int resolve(ext_targets *t, ext_target *e)
{
    if (e->depth > EXT_DEPTH_MAX)
        return refuse(e, "%s", "it is reached through too many other files");
    if (!e->name[0])
        return refuse(e, "%s", "its name is empty");
    if (e->kind == EXT_VIRTUAL && strchr(e->name, '%'))
        return refuse(e, "%s", "printf-style source file names are not followed");
    e->path = where_opened(e);
    if (!e->path)
        return refuse(e, "%s", "its name is too long");
    struct stat st;
    if (stat(e->path, &st) != 0)
        return refuse(e, "'%s' does not exist", e->name);
    e->exists = 1;
    id_of(&st, &e->id);
    char *real = realpath(e->path, NULL);
    if (!real)
        return refuse(e, "'%s' cannot be resolved", e->name);
    int rc = 0;
    if (!beneath(real, t->root))
        rc = refuse(e, "'%s' resolves outside the data root", e->name);
    else if (e->kind == EXT_LINK && !t->links_in_root && !beneath(real, t->store_dir))
        rc = refuse(e,
                    "'%s' is outside the store's folder (--external-links-in-root 1 allows it)",
                    e->name);
    else if (!S_ISREG(st.st_mode))
        rc = refuse(e, "'%s' is not a regular file", e->name);
    else if (e->kind == EXT_RAW)
        e->probed = 1; /* plain bytes: nothing for libhdf5 to parse */
    free(real);
    return rc;
}

static int unescape(const char *s, size_t n, char **out)
{
    char *d = malloc(n + 1);
    if (!d)
        return CELLAR_ENOMEM;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' && i + 2 < n && isxdigit((unsigned char)s[i + 1]) &&
            isxdigit((unsigned char)s[i + 2])) {
            char hex[3] = {s[i + 1], s[i + 2], '\0'};
            d[o++] = (char)strtoul(hex, NULL, 16);
            i += 2;
        } else {
            d[o++] = s[i];
        }
    }
    d[o] = '\0';
    *out = d;
    return 0;
}

const ext_target *ext_targets_find(const ext_targets *t, const char *base, char kind,
                                   const char *name)
{
    for (size_t i = 0; t && i < t->n; i++) {
        const ext_target *e = &t->items[i];
        if (e->kind == kind && !strcmp(e->name, name) && !strcmp(e->base, base))
            return e;
    }
    return NULL;
}

int ext_targets_add(ext_targets *t, const char *opened_as, const char *refs, int depth)
{
    char base[PATH_MAX];
    if (!refs || ext_targets_dir_of(opened_as, base, sizeof base))
        return 0;
    for (const char *line = refs; *line;) {
        size_t len = strcspn(line, "\n");
        const char *next = line[len] ? line + len + 1 : line + len;
        char kind = line[0];
        if (len < 3 || line[1] != ' ' ||
            (kind != EXT_LINK && kind != EXT_RAW && kind != EXT_VIRTUAL)) {
            line = next;
            continue;
        }
        char *name = NULL;
        if (unescape(line + 2, len - 2, &name))
            return CELLAR_ENOMEM;
        line = next;
        if ((kind == EXT_VIRTUAL && !strcmp(name, ".")) || ext_targets_find(t, base, kind, name) ||
            t->n == EXT_TARGETS_MAX) {
            free(name); /* the file itself, known already, or past the bound: refused */
            continue;
        }
        ext_target *e = &t->items[t->n++];
        memset(e, 0, sizeof *e);
        e->kind = kind;
        e->name = name;
        e->depth = depth;
        e->base = strdup(base);
        if (!e->base || resolve(t, e))
            return CELLAR_ENOMEM;
    }
    return 0;
}

ext_target *ext_targets_next_unprobed(ext_targets *t)
{
    for (size_t i = 0; i < t->n; i++)
        if (!t->items[i].why && !t->items[i].probed)
            return &t->items[i];
    return NULL;
}

int ext_targets_probed(ext_targets *t, ext_target *e, int rc, const char *detail,
                       const char *refs)
{
    e->probed = 1;
    if (rc)
        return refuse(e, "%s", detail);
    e->names_files = refs && refs[0];
    return ext_targets_add(t, e->path, refs, e->depth + 1);
}

int ext_target_unchanged(const ext_target *e)
{
    struct stat st;
    if (!e->path || stat(e->path, &st) != 0)
        return !e->exists;
    probe_file_id now;
    id_of(&st, &now);
    return e->exists && id_same(&now, &e->id);
}

int ext_targets_changed(const ext_targets *t, int64_t *at)
{
    for (size_t i = 0; t && i < t->n; i++) {
        const ext_target *e = &t->items[i];
        if (ext_target_unchanged(e))
            continue;
        struct stat st;
        struct timespec now;
        if (e->path && stat(e->path, &st) == 0)
            now = st.st_ctim;
        else
            clock_gettime(CLOCK_REALTIME, &now);
        *at = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
        return 1;
    }
    return 0;
}

int ext_targets_stale_for(const ext_targets *old, const ext_targets *now)
{
    for (size_t i = 0; old && now && i < old->n; i++) {
        const ext_target *a = &old->items[i];
        for (size_t j = 0; a->exists && !a->why && j < now->n; j++) {
            const ext_target *b = &now->items[j];
            if (b->exists && !b->why && a->id.dev == b->id.dev && a->id.ino == b->id.ino &&
                !id_same(&a->id, &b->id))
                return 1;
        }
    }
    return 0;
}

uint64_t ext_targets_hash(const ext_targets *t)
{
    uint64_t h = 0;
    for (size_t i = 0; t && i < t->n; i++) {
        const ext_target *e = &t->items[i];
        char buf[PATH_MAX + 128];
        int n = snprintf(buf, sizeof buf, "%c %s %d %llu %lld.%09ld", e->kind, e->name, e->exists,
                         (unsigned long long)e->id.size, (long long)e->id.mtime_sec,
                         e->id.mtime_nsec);
        if (n > 0)
            h = h * 31 + hash64(buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    }
    return h;
}
