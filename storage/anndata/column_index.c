#include "storage/anndata/column_index.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CIX_MAGIC "CELLCIX1"
#define CIX_VERSION 1u
#define CIX_HEADER 64

typedef struct cix_layout {
    size_t row_width, value_width;
    size_t colptr_off, rows_off, values_off, total;
} cix_layout;

static int add_size(size_t a, size_t b, size_t *out)
{
    if (a > SIZE_MAX - b)
        return -1;
    *out = a + b;
    return 0;
}

static int mul_size(size_t a, size_t b, size_t *out)
{
    if (b && a > SIZE_MAX / b)
        return -1;
    *out = a * b;
    return 0;
}

/* Offsets of the parts of an index of this shape; -1 on overflow. */
static int layout_of(int64_t n_rows, int64_t n_cols, int64_t nnz, dtype_kind dt,
                     cix_layout *l)
{
    if (n_rows < 0 || n_cols < 0 || nnz < 0 || !dtype_size(dt))
        return -1;
    l->row_width = (uint64_t)n_rows <= UINT32_MAX ? 4 : 8;
    l->value_width = dtype_size(dt);
    size_t colptr_bytes, rows_bytes, values_bytes;
    l->colptr_off = CIX_HEADER;
    if (mul_size((size_t)n_cols + 1, 8, &colptr_bytes) ||
        mul_size((size_t)nnz, l->row_width, &rows_bytes) ||
        mul_size((size_t)nnz, l->value_width, &values_bytes) ||
        add_size(l->colptr_off, colptr_bytes, &l->rows_off) ||
        add_size(l->rows_off, rows_bytes, &l->values_off) ||
        add_size(l->values_off, 7, &l->values_off))
        return -1;
    l->values_off &= ~(size_t)7;
    return add_size(l->values_off, values_bytes, &l->total);
}

static void set_views(column_index *ci, const cix_layout *l)
{
    char *base = ci->map;
    ci->csc.colptr = (const int64_t *)(void *)(base + l->colptr_off);
    ci->csc.rows32 = l->row_width == 4 ? (const uint32_t *)(void *)(base + l->rows_off) : NULL;
    ci->csc.rows64 = l->row_width == 8 ? (const int64_t *)(void *)(base + l->rows_off) : NULL;
    ci->csc.values = base + l->values_off;
}

void column_index_free(column_index *ci)
{
    if (!ci)
        return;
    if (ci->map && ci->map != MAP_FAILED)
        munmap(ci->map, ci->map_bytes ? ci->map_bytes : 1);
    free(ci);
}

/* ---- building ---- */

typedef struct fill_ctx {
    int64_t *cursor;
    char *rows, *values;
    size_t row_width, value_width;
} fill_ctx;

static int fill_entry(void *vctx, int64_t row, int64_t col, const void *value)
{
    fill_ctx *f = vctx;
    int64_t k = f->cursor[col]++;
    if (f->row_width == 4) {
        uint32_t r = (uint32_t)row;
        memcpy(f->rows + (size_t)k * 4, &r, 4);
    } else {
        memcpy(f->rows + (size_t)k * 8, &row, 8);
    }
    memcpy(f->values + (size_t)k * f->value_width, value, f->value_width);
    return 0;
}

/* Pass 1: entries per column into colptr[1..n_cols], then prefix sums. */
static int count_columns(const matrix *m, int64_t *colptr, cellar_error *err)
{
    int64_t *idx = malloc((size_t)MATRIX_BLOCK_ENTRIES * sizeof *idx);
    if (!idx)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory building a column index");
    dtype_kind dt = node_get_info(m->indices)->dtype;
    int rc = 0;
    for (int64_t s = 0; s < m->nnz && !rc; s += MATRIX_BLOCK_ENTRIES) {
        int64_t n = m->nnz - s > MATRIX_BLOCK_ENTRIES ? MATRIX_BLOCK_ENTRIES : m->nnz - s;
        dim_sel r = dim_sel_range(s, n);
        rc = node_read(m->indices, &r, idx, (size_t)n * dtype_size(dt), err);
        for (int64_t i = n - 1; i >= 0 && !rc; i--) {
            /* Widen back to front (in place), then count. */
            int64_t v;
            switch (dt) {
            case DT_INT8: v = ((const int8_t *)idx)[i]; break;
            case DT_INT16: v = ((const int16_t *)idx)[i]; break;
            case DT_INT32: v = ((const int32_t *)idx)[i]; break;
            case DT_UINT8: v = ((const uint8_t *)idx)[i]; break;
            case DT_UINT16: v = ((const uint16_t *)idx)[i]; break;
            case DT_UINT32: v = ((const uint32_t *)idx)[i]; break;
            case DT_UINT64: {
                uint64_t u = ((const uint64_t *)(void *)idx)[i];
                v = u > INT64_MAX ? -1 : (int64_t)u;
                break;
            }
            default: v = idx[i]; break;
            }
            if (v < 0 || v >= m->shape[1])
                rc = cellar_fail(err, CELLAR_EFORMAT,
                                 "indices of '%s' hold %lld, outside %lld columns",
                                 node_path(m->element), (long long)v, (long long)m->shape[1]);
            else
                colptr[v + 1]++;
        }
    }
    free(idx);
    for (int64_t c = 0; c < m->shape[1] && !rc; c++)
        colptr[c + 1] += colptr[c];
    return rc;
}

/* An unnamed file for an index that is not kept (no cache directory): its
 * pages live in the page cache, which the kernel writes back and evicts
 * under memory pressure, instead of anonymous memory that only swap can
 * take.  $TMPDIR, then /var/tmp (on disk by convention), then /tmp; -1 when
 * none takes an O_TMPFILE. */
static int unnamed_file(void)
{
    const char *dirs[3] = {getenv("TMPDIR"), "/var/tmp", "/tmp"};
    for (int i = 0; i < 3; i++) {
        if (!dirs[i] || !*dirs[i])
            continue;
        int fd = open(dirs[i], O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd >= 0)
            return fd;
    }
    return -1;
}

static int map_file(int fd, size_t total, void **map)
{
    if (ftruncate(fd, (off_t)total) != 0)
        return -1;
    *map = mmap(NULL, total ? total : 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return *map == MAP_FAILED ? -1 : 0;
}

static int map_output(const char *path, size_t total, char **tmp_path, int *fd_out, void **map,
                      cellar_error *err)
{
    *fd_out = -1;
    *tmp_path = NULL;
    if (!path) {
        int fd = unnamed_file();
        if (fd >= 0 && map_file(fd, total, map) == 0) {
            *fd_out = fd;
            return 0;
        }
        if (fd >= 0)
            close(fd);
        *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (*map == MAP_FAILED)
            return cellar_fail(err, CELLAR_ENOMEM, "cannot map %zu bytes for a column index",
                               total);
        return 0;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    size_t n = strlen(path) + 64;
    char *tmp = malloc(n);
    if (!tmp)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    snprintf(tmp, n, "%s.tmp.%ld.%ld", path, (long)getpid(), (long)now.tv_nsec);
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(tmp);
        return cellar_fail(err, CELLAR_EIO, "cannot create a column index file: %s",
                           strerror(errno));
    }
    if (map_file(fd, total, map) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        free(tmp);
        return cellar_fail(err, CELLAR_EIO, "cannot size a column index file: %s", strerror(e));
    }
    *fd_out = fd;
    *tmp_path = tmp;
    return 0;
}

/* A finished index in a file is mapped again read-only: the pages the
 * build wrote stay in the page cache (written back in time), and the
 * process maps only what queries then touch, so its resident memory is the
 * columns in use, not the whole index.  On failure the build's mapping
 * stays (it is as valid, only writable). */
static void remap_readonly(column_index *ci, int fd, const cix_layout *l)
{
    void *ro = mmap(NULL, ci->map_bytes ? ci->map_bytes : 1, PROT_READ, MAP_SHARED, fd, 0);
    if (ro == MAP_FAILED)
        return;
    munmap(ci->map, ci->map_bytes ? ci->map_bytes : 1);
    ci->map = ro;
    ci->file_backed = 1;
    set_views(ci, l);
}

static void write_header(char *base, const matrix *m, const cix_layout *l)
{
    memset(base, 0, CIX_HEADER);
    memcpy(base, CIX_MAGIC, 8);
    uint32_t u32 = CIX_VERSION;
    memcpy(base + 8, &u32, 4);
    u32 = (uint32_t)l->row_width;
    memcpy(base + 12, &u32, 4);
    memcpy(base + 16, &m->shape[0], 8);
    memcpy(base + 24, &m->shape[1], 8);
    memcpy(base + 32, &m->nnz, 8);
    u32 = (uint32_t)m->dtype;
    memcpy(base + 40, &u32, 4);
    u32 = (uint32_t)l->value_width;
    memcpy(base + 44, &u32, 4);
}

int column_index_build(const matrix *m, const char *path, column_index **out,
                       cellar_error *err)
{
    *out = NULL;
    if (m->layout != MATRIX_CSR)
        return cellar_fail(err, CELLAR_EINVAL, "column indexes are built for CSR matrices only");
    cix_layout l;
    if (layout_of(m->shape[0], m->shape[1], m->nnz, m->dtype, &l))
        return cellar_fail(err, CELLAR_ETOOBIG, "a column index of '%s' would be too large",
                           node_path(m->element));
    column_index *ci = calloc(1, sizeof *ci);
    char *tmp = NULL;
    int fd = -1;
    int64_t *cursor = NULL;
    if (!ci)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    int rc = map_output(path, l.total, &tmp, &fd, &ci->map, err);
    if (rc) {
        ci->map = NULL;
        goto done;
    }
    ci->map_bytes = l.total;
    ci->csc.n_rows = m->shape[0];
    ci->csc.n_cols = m->shape[1];
    ci->csc.nnz = m->nnz;
    ci->csc.dtype = m->dtype;
    set_views(ci, &l);
    int64_t *colptr = (int64_t *)(void *)((char *)ci->map + l.colptr_off);
    memset(colptr, 0, ((size_t)m->shape[1] + 1) * 8);
    rc = count_columns(m, colptr, err);
    if (rc)
        goto done;
    if (colptr[m->shape[1]] != m->nnz) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "'%s': counted entries differ from nnz",
                         node_path(m->element));
        goto done;
    }
    cursor = malloc(((size_t)m->shape[1] + 1) * sizeof *cursor);
    if (!cursor) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory building a column index");
        goto done;
    }
    memcpy(cursor, colptr, ((size_t)m->shape[1] + 1) * sizeof *cursor);
    fill_ctx f = {cursor, (char *)ci->map + l.rows_off, (char *)ci->map + l.values_off,
                  l.row_width, l.value_width};
    rc = matrix_for_each(m, fill_entry, &f, err);
    if (rc)
        goto done;
    write_header(ci->map, m, &l);
    if (tmp && rename(tmp, path) == 0) {
        free(tmp);
        tmp = NULL;
    }
    if (fd >= 0)
        remap_readonly(ci, fd, &l);
done:
    free(cursor);
    if (fd >= 0)
        close(fd);
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    if (rc) {
        column_index_free(ci);
        return rc;
    }
    *out = ci;
    return 0;
}

/* ---- loading ---- */

static int header_matches(const char *base, const matrix *m, const cix_layout *l)
{
    uint32_t version, row_width, dt, value_width;
    int64_t n_rows, n_cols, nnz;
    memcpy(&version, base + 8, 4);
    memcpy(&row_width, base + 12, 4);
    memcpy(&n_rows, base + 16, 8);
    memcpy(&n_cols, base + 24, 8);
    memcpy(&nnz, base + 32, 8);
    memcpy(&dt, base + 40, 4);
    memcpy(&value_width, base + 44, 4);
    return memcmp(base, CIX_MAGIC, 8) == 0 && version == CIX_VERSION &&
           row_width == l->row_width && n_rows == m->shape[0] && n_cols == m->shape[1] &&
           nnz == m->nnz && dt == (uint32_t)m->dtype && value_width == l->value_width;
}

int column_index_load(const char *path, const matrix *m, column_index **out,
                      cellar_error *err)
{
    *out = NULL;
    cix_layout l;
    if (m->layout != MATRIX_CSR || layout_of(m->shape[0], m->shape[1], m->nnz, m->dtype, &l))
        return cellar_fail(err, CELLAR_EFORMAT, "no column index for this matrix");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cellar_fail(err, errno == ENOENT ? CELLAR_ENOTFOUND : CELLAR_EIO,
                           "cannot open the column index file: %s", strerror(errno));
    struct stat st;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size == (uint64_t)l.total)
        map = mmap(NULL, l.total, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return cellar_fail(err, CELLAR_EFORMAT, "the column index file does not fit the matrix");
    column_index *ci = calloc(1, sizeof *ci);
    if (!ci) {
        munmap(map, l.total);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    }
    ci->map = map;
    ci->map_bytes = l.total;
    ci->file_backed = 1;
    ci->csc.n_rows = m->shape[0];
    ci->csc.n_cols = m->shape[1];
    ci->csc.nnz = m->nnz;
    ci->csc.dtype = m->dtype;
    set_views(ci, &l);
    int ok = header_matches(map, m, &l) && ci->csc.colptr[0] == 0 && ci->csc.colptr[ci->csc.n_cols] == ci->csc.nnz;
    for (int64_t c = 0; c < ci->csc.n_cols && ok; c++)
        ok = ci->csc.colptr[c] <= ci->csc.colptr[c + 1];
    if (!ok) {
        column_index_free(ci);
        return cellar_fail(err, CELLAR_EFORMAT, "the column index file does not fit the matrix");
    }
    *out = ci;
    return 0;
}

char *column_index_path(const char *dir, const char *version_tag, const char *element_path)
{
    if (!dir)
        return NULL;
    size_t n = strlen(dir) + strlen(version_tag) + strlen(element_path) + 8;
    char *out = malloc(n);
    if (!out)
        return NULL;
    size_t d = strlen(dir);
    memcpy(out, dir, d);
    size_t o = d;
    if (!d || out[d - 1] != '/')
        out[o++] = '/';
    const char *parts[2] = {version_tag, element_path};
    for (int p = 0; p < 2; p++) {
        if (p)
            out[o++] = '-';
        for (const char *s = parts[p]; *s; s++) {
            char c = *s;
            int keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
            out[o++] = keep ? c : '_';
        }
    }
    memcpy(out + o, ".cix", 5);
    return out;
}

/* ---- per store version ---- */

const char *column_index_state_name(column_index_state s)
{
    switch (s) {
    case COLUMN_INDEX_BUILDING: return "building";
    case COLUMN_INDEX_READY: return "ready";
    case COLUMN_INDEX_FAILED: return "failed";
    case COLUMN_INDEX_OVER_LIMIT: return "over_limit";
    default: return "absent";
    }
}

typedef struct ci_slot {
    pthread_mutex_t lock;
    column_index_state state;
    int load_tried;
    column_index *ci;
} ci_slot;

static int slot_new(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    (void)ctx;
    ci_slot *s = calloc(1, sizeof *s);
    if (!s)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    pthread_mutex_init(&s->lock, NULL);
    *value = s;
    *bytes = sizeof *s;
    return 0;
}

static void slot_free(void *value)
{
    ci_slot *s = value;
    column_index_free(s->ci);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static int get_slot(store *s, const matrix *m, ci_slot **out, cellar_error *err)
{
    char key[1024];
    snprintf(key, sizeof key, "colidx:%s", node_path(m->element));
    void *v;
    int rc = store_derived(s, key, slot_new, NULL, slot_free, &v, err);
    *out = v;
    return rc;
}

/* Column pointers take 8 bytes a column whatever is stored: a shape that
 * claims far more columns than the matrix stores values (a lying header:
 * 80 x 1e9 with a few hundred values made an 8 GB index) gets no index.
 * A real matrix is never that sparse and large at once; its columns are
 * answered by scanning, which costs what is stored. */
#define COLPTR_FREE_BYTES ((uint64_t)64 << 20)
#define COLPTR_BYTES_PER_VALUE 64

static int out_of_proportion(const matrix *m)
{
    if (m->shape[1] < 0 || m->nnz < 0 || (uint64_t)m->shape[1] > UINT64_MAX / 16)
        return 1;
    uint64_t colptr = ((uint64_t)m->shape[1] + 1) * 8;
    uint64_t allowed = COLPTR_FREE_BYTES + (uint64_t)m->nnz * COLPTR_BYTES_PER_VALUE;
    return colptr > allowed;
}

uint64_t column_index_bytes(const matrix *m)
{
    cix_layout l;
    if (m->layout != MATRIX_CSR || layout_of(m->shape[0], m->shape[1], m->nnz, m->dtype, &l))
        return 0;
    return (uint64_t)l.total;
}

/* Accounts a ready index's mapping in the version's derived bytes (what
 * /metrics reports as cache bytes); the slot keeps owning it. */
static int account_bytes(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    (void)err;
    const column_index *ci = ctx;
    *value = (void *)ci;
    *bytes = ci->map_bytes;
    return 0;
}

typedef struct build_job {
    store *s;
    matrix m;
    ci_slot *slot;
    char *path;
} build_job;

static void build_run(void *arg)
{
    build_job *job = arg;
    column_index *ci = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = column_index_build(&job->m, job->path, &ci, &err);
    if (rc && job->path) {
        /* The cache directory may be unwritable: an index in memory still helps. */
        fprintf(stderr, "cellar: column index of %s in %s not saved: %s\n",
                node_path(job->m.element), store_name(job->s), err.detail);
        cellar_error_clear(&err);
        rc = column_index_build(&job->m, NULL, &ci, &err);
    }
    if (rc)
        fprintf(stderr, "cellar: column index of %s in %s failed: %s\n",
                node_path(job->m.element), store_name(job->s), err.detail);
    pthread_mutex_lock(&job->slot->lock);
    job->slot->ci = ci;
    job->slot->state = rc ? COLUMN_INDEX_FAILED : COLUMN_INDEX_READY;
    pthread_mutex_unlock(&job->slot->lock);
    if (!rc) {
        char key[1024];
        void *v;
        snprintf(key, sizeof key, "colidx-bytes:%s", node_path(job->m.element));
        store_derived(job->s, key, account_bytes, ci, NULL, &v, &err);
    }
    store_release(job->s);
    free(job->path);
    free(job);
}

int column_index_get(store *s, const matrix *m, const column_index_options *opts,
                     const column_index **out, column_index_state *state, size_t *bytes,
                     cellar_error *err)
{
    *out = NULL;
    *state = COLUMN_INDEX_ABSENT;
    *bytes = 0;
    if (m->layout != MATRIX_CSR)
        return 0;
    ci_slot *slot;
    int rc = get_slot(s, m, &slot, err);
    if (rc)
        return rc;
    char *path = opts ? column_index_path(opts->cache_dir, store_cache_tag(s),
                                          node_path(m->element))
                      : NULL;
    build_job *job = NULL;
    uint64_t need = column_index_bytes(m);
    pthread_mutex_lock(&slot->lock);
    if (slot->state == COLUMN_INDEX_ABSENT && out_of_proportion(m)) {
        slot->state = COLUMN_INDEX_OVER_LIMIT;
        fprintf(stderr, "cellar: column index of %s in %s not built: %lld columns for %lld "
                "stored values (its column pointers alone would take %llu bytes); its "
                "columns are answered by scanning\n", node_path(m->element), store_name(s),
                (long long)m->shape[1], (long long)m->nnz,
                (unsigned long long)((uint64_t)m->shape[1] * 8));
    }
    if (slot->state == COLUMN_INDEX_ABSENT && opts && opts->max_bytes &&
        (!need || need > opts->max_bytes)) {
        slot->state = COLUMN_INDEX_OVER_LIMIT;
        fprintf(stderr, "cellar: column index of %s in %s would take %llu bytes, over the "
                "limit of %llu: its columns are answered by scanning\n", node_path(m->element),
                store_name(s), (unsigned long long)need, (unsigned long long)opts->max_bytes);
    }
    if (slot->state == COLUMN_INDEX_ABSENT && !slot->load_tried && path) {
        slot->load_tried = 1;
        cellar_error lerr;
        cellar_error_clear(&lerr);
        if (column_index_load(path, m, &slot->ci, &lerr) == 0) {
            slot->state = COLUMN_INDEX_READY;
            char key[1024];
            void *v;
            snprintf(key, sizeof key, "colidx-bytes:%s", node_path(m->element));
            store_derived(s, key, account_bytes, slot->ci, NULL, &v, &lerr);
        }
    }
    if (slot->state == COLUMN_INDEX_ABSENT && opts && opts->submit) {
        job = calloc(1, sizeof *job);
        if (job) {
            job->s = store_ref(s);
            job->m = *m;
            job->slot = slot;
            job->path = path;
            path = NULL;
            slot->state = COLUMN_INDEX_BUILDING;
        }
    }
    pthread_mutex_unlock(&slot->lock);
    free(path);
    if (job && opts->submit(opts->submit_ctx, build_run, job) != 0) {
        pthread_mutex_lock(&slot->lock);
        slot->state = COLUMN_INDEX_ABSENT;
        pthread_mutex_unlock(&slot->lock);
        store_release(job->s);
        free(job->path);
        free(job);
    }
    pthread_mutex_lock(&slot->lock);
    *state = slot->state;
    if (slot->state == COLUMN_INDEX_READY) {
        *out = slot->ci;
        *bytes = slot->ci->map_bytes;
    } else if (slot->state == COLUMN_INDEX_OVER_LIMIT) {
        *bytes = (size_t)need;
    }
    pthread_mutex_unlock(&slot->lock);
    return 0;
}

column_index_state column_index_peek(store *s, const matrix *m, size_t *bytes)
{
    *bytes = 0;
    if (m->layout != MATRIX_CSR)
        return COLUMN_INDEX_ABSENT;
    ci_slot *slot;
    cellar_error err;
    cellar_error_clear(&err);
    if (get_slot(s, m, &slot, &err))
        return COLUMN_INDEX_ABSENT;
    pthread_mutex_lock(&slot->lock);
    column_index_state st = slot->state;
    if (st == COLUMN_INDEX_READY)
        *bytes = slot->ci->map_bytes;
    pthread_mutex_unlock(&slot->lock);
    if (st == COLUMN_INDEX_OVER_LIMIT)
        *bytes = (size_t)column_index_bytes(m);
    return st;
}
