/* The HDF5 backend of storage/node.h.  The only file that includes hdf5.h.
 *
 * Every node keeps its HDF5 object (group or dataset) open for the life of
 * the tree; the root also holds the file, opened with H5F_CLOSE_STRONG, and
 * closes it last, so freeing the tree really closes the file.  Calls into
 * libhdf5 are serialized by its global lock (thread-safe build); nothing
 * here is shared between calls except immutable per-node ids.
 *
 * Direct reads: the root also keeps its own descriptor of the file, and a
 * numeric dataset gets, on its first read, a plan of where its bytes are
 * (storage/hdf5/h5_direct.h); reads through a plan pread and decode outside
 * libhdf5, so they run in parallel.  Datasets that do not qualify (other
 * filters, compact or virtual layout, external storage, unusual types)
 * keep the libhdf5 path below. */
#include "storage/hdf5/h5.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/utf8.h"
#include "storage/chunk_cache.h"
#include "storage/ext_targets.h"
#include "storage/hdf5/h5_access.h"
#include "storage/hdf5/h5_direct.h"
#include "storage/hdf5/h5_heap.h"
#include "storage/hdf5/h5_impl.h"
#include "storage/hdf5/h5_stream.h"
#include "storage/hdf5/h5_vfd.h"
#include "storage/node_impl.h"

/* Attributes bigger than this are skipped rather than read at open. */
#define H5_ATTR_MAX_BYTES ((size_t)64 << 20)
/* Hyperslab blocks OR-ed into one file selection per H5Dread: libhdf5's
 * cost of OR-ing grows with the selection already built (measured: 100k
 * scattered rows take 0.15 s in batches of 64, 12 s in batches of 8192). */
#define H5_READ_BLOCK_BUDGET 64
/* Short runs are read as a point selection instead (about 0.1 us a point,
 * against 1.5 us a hyperslab block), when the coordinates stay this small. */
#define H5_POINTS_MAX_BYTES ((size_t)64 << 20)
/* Chunked datasets with at most this many allocated chunks get a table of
 * chunk addresses (listing them costs libhdf5 1.10 time quadratic in their
 * number); others get their stored chunk bytes through libhdf5, one chunk
 * at a time, and decode them outside it. */
#define H5_DIRECT_TABLE_MAX 2048
/* Up to this many chunks in the grid, a table is made by looking each chunk
 * up by its coordinates (logarithmic in the index) instead: 28 bytes a chunk,
 * so chunks come without libhdf5 for datasets of small chunks too (a 64 MiB
 * array in chunks of 1 KiB). */
#define H5_DIRECT_COORD_TABLE_MAX 65536
/* Compound types with more members than this are not split into fields. */
#define H5_FIELDS_MAX 65536

/* Direct reads (storage/hdf5/h5_direct.c): 0 off, 1 on, 2 on without chunk
 * tables.  A setting, not shared state: h5_set_direct_reads. */
static atomic_int h5_direct_mode = 1;

enum { DIRECT_UNPLANNED = 0, DIRECT_READY = 1, DIRECT_NONE = -1 };

typedef struct h5_node {
    hid_t obj;       /* group or dataset */
    hid_t file;      /* root only: the file */
    hid_t ftype;     /* datasets: the stored type */
    hid_t memtype;   /* datasets: what reads convert to (numeric and strings) */
    int own_memtype; /* memtype was made here and must be closed */
    int vlen;        /* strings: variable length */
    H5T_str_t strpad;
    /* datasets: bytes per element of libhdf5's type-conversion buffer when
     * reads convert (strings, enums, byte order), 0 when they do not */
    size_t conv_size;
    /* root only: the file for direct reads (-1 when there is none), its
     * size, and what libhdf5 adds to chunk addresses it reports */
    int fd;
    h5d_file_reader reader; /* root only: a reader's file (read NULL: none) */
    char *file_path;   /* root only: the path it was opened by (malloc'd) */
    /* root only: where heap ids are checked from (h5_heap.h); fd -1 and rd
     * NULL until the file's bytes are at hand */
    h5_heap_file heap;
    uint64_t file_size;
    uint64_t chunk_base;
    /* root only: this file version's entries in the HDF5 chunk cache
     * (storage/chunk_cache.h), given with the first plan; 0 until then */
    _Atomic uint64_t cache_id;
    /* fields of a compound dataset (node_child of an array of records):
     * obj is the dataset's, memtype a compound of the one member; for a
     * member that is an array, its values per record (else 0) */
    int field;
    size_t field_inner;
    /* the object lives in another file than the root's, reached through an
     * external link: no direct reads, strings or heap checks from the
     * root's descriptor (that file was probed whole: libhdf5 reads it) */
    int foreign;
    /* root only: the files this version may reach (borrowed: the store's,
     * NULL when none), and the root file's number (H5O_info_t.fileno) */
    const ext_targets *targets;
    unsigned long fileno;
    /* datasets: the direct-read plan, made on first read under dlock */
    pthread_mutex_t dlock;
    int dlock_init;
    atomic_int dstate; /* DIRECT_*; READY is published after plan */
    h5d_plan *plan;
    /* datasets: whether reads check scale-offset chunks (scaleoffset_check):
     * 0 not known yet, SO_NONE, or SO_CHECK (the pipeline asked each time) */
    atomic_int so_state;
} h5_node;

static int h5_open_child(node *parent, const char *name, node **out, cellar_error *err);
static int h5_list_children(node *n, arena *a, const char ***names, size_t *count,
                            cellar_error *err);
static int h5_read(node *n, const dim_sel *sel, void *out, size_t out_bytes, cellar_error *err);
static int h5_read_strings(node *n, const dim_sel *sel, arena *a, char **out,
                           cellar_error *err);
static void h5_destroy(node *n);

static int h5_file_extent(node *n, int *fd, uint64_t *offset, uint64_t *length);
static int h5_stream_string(node *n, size_t piece, node_string_sink sink, void *ctx,
                            cellar_error *err);

static const node_ops h5_ops = {
    .open_child = h5_open_child,
    .list_children = h5_list_children,
    .read = h5_read,
    .read_strings = h5_read_strings,
    .file_extent = h5_file_extent,
    .stream_string = h5_stream_string,
    .destroy = h5_destroy,
    .process_lock = 1,
    .children_by_listing = 1,
};

/* ---------------------------------------------------------------- errors */

/* libhdf5 keeps its automatic error printing per thread (thread-safe
 * build), so each thread that calls in switches it off once. */
static _Thread_local int h5_thread_quiet;

void h5_quiet(void)
{
    h5_vfd_clear_error();
    if (!h5_thread_quiet) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        h5_thread_quiet = 1;
    }
}

typedef struct h5_err_walk {
    int found;
    char desc[200];
} h5_err_walk;

static herr_t h5_err_walk_cb(unsigned n, const H5E_error2_t *e, void *data)
{
    (void)n;
    h5_err_walk *w = data;
    if (!w->found && e->desc && e->desc[0]) {
        snprintf(w->desc, sizeof w->desc, "%s", e->desc);
        w->found = 1;
    }
    return 0;
}

/* Like cellar_fail, adding the most specific message on this thread's HDF5
 * error stack.  Call it right after the failing HDF5 call: any later API
 * call clears the stack.  A libhdf5 failure on a file that is there is
 * CELLAR_EFORMAT (422): the library reports damaged bytes ("incorrect cache
 * entry type", "address past end of allocation") as read errors, and the
 * operating system's own I/O errors come from our preads, not from here. */
int h5_fail(cellar_error *err, int code, const char *fmt, ...)
{
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* A reader's failure under libhdf5 (a remote that is down, slow or
     * changed) is that failure, not a damaged file. */
    cellar_error vfd;
    cellar_error_clear(&vfd);
    int vrc = h5_vfd_take_error(&vfd);
    if (vrc)
        return cellar_fail(err, vrc, "%s: %s", msg, vfd.detail);
    h5_err_walk w = {0};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_err_walk_cb, &w);
    if (w.found)
        return cellar_fail(err, code, "%s (HDF5: %s)", msg, w.desc);
    return cellar_fail(err, code, "%s", msg);
}

/* ----------------------------------------------------------------- UTF-8 */

/* A malloc'd copy of s[0..n) with every invalid UTF-8 byte replaced by
 * U+FFFD, or NULL when s is already valid (*out_n untouched) or on OOM
 * (*oom set). */
static char *utf8_fix(const char *s, size_t n, size_t *out_n, int *oom)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, l;
    while (i < n && (l = utf8_seq_len(u + i, n - i)))
        i += l;
    if (i == n)
        return NULL;
    if (n > SIZE_MAX / 3) {
        *oom = 1;
        return NULL;
    }
    char *fixed = malloc(n * 3);
    if (!fixed) {
        *oom = 1;
        return NULL;
    }
    size_t o = 0;
    for (i = 0; i < n;) {
        l = utf8_seq_len(u + i, n - i);
        if (l) {
            memcpy(fixed + o, s + i, l);
            o += l;
            i += l;
        } else {
            memcpy(fixed + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    *out_n = o;
    return fixed;
}

/* A NUL-terminated valid UTF-8 copy of s[0..n) in the arena. */
static char *arena_utf8(arena *a, const char *s, size_t n)
{
    int oom = 0;
    size_t fn = 0;
    char *fixed = utf8_fix(s, n, &fn, &oom);
    if (oom)
        return NULL;
    if (!fixed)
        return arena_strndup(a, s, n);
    char *r = arena_strndup(a, fixed, fn);
    free(fixed);
    return r;
}

/* A JSON string from s[0..n), invalid UTF-8 replaced. */
static json_t *json_utf8(const char *s, size_t n)
{
    int oom = 0;
    size_t fn = 0;
    char *fixed = utf8_fix(s, n, &fn, &oom);
    if (oom)
        return NULL;
    if (!fixed)
        return json_stringn(s, n);
    json_t *j = json_stringn(fixed, fn);
    free(fixed);
    return j;
}

/* Bytes of a fixed-length string item that hold text: NULLTERM and NULLPAD
 * end at the first NUL; SPACEPAD loses its trailing spaces. */
static size_t fixed_str_len(const char *s, size_t size, H5T_str_t pad)
{
    const char *nul = memchr(s, '\0', size);
    size_t len = nul ? (size_t)(nul - s) : size;
    if (pad == H5T_STR_SPACEPAD)
        while (len && s[len - 1] == ' ')
            len--;
    return len;
}

/* ----------------------------------------------------------------- types */

static int mul_size(size_t a, size_t b, size_t *out)
{
    if (a && b > SIZE_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

/* h5py's bool: an enum over a 1-byte integer with exactly FALSE=0, TRUE=1. */
static int type_is_bool_enum(hid_t t)
{
    if (H5Tget_class(t) != H5T_ENUM || H5Tget_nmembers(t) != 2 || H5Tget_size(t) != 1)
        return 0;
    int seen = 0;
    for (unsigned i = 0; i < 2; i++) {
        char *name = H5Tget_member_name(t, i);
        signed char v = -1;
        if (!name)
            return 0;
        if (H5Tget_member_value(t, i, &v) >= 0) {
            if (strcmp(name, "FALSE") == 0 && v == 0)
                seen |= 1;
            else if (strcmp(name, "TRUE") == 0 && v == 1)
                seen |= 2;
        }
        H5free_memory(name);
    }
    return seen == 3;
}

static dtype_kind int_dtype(size_t size, int is_signed)
{
    switch (size) {
    case 1: return is_signed ? DT_INT8 : DT_UINT8;
    case 2: return is_signed ? DT_INT16 : DT_UINT16;
    case 4: return is_signed ? DT_INT32 : DT_UINT32;
    case 8: return is_signed ? DT_INT64 : DT_UINT64;
    default: return DT_NONE;
    }
}

static hid_t native_type(dtype_kind k)
{
    switch (k) {
    case DT_INT8: return H5T_NATIVE_INT8;
    case DT_INT16: return H5T_NATIVE_INT16;
    case DT_INT32: return H5T_NATIVE_INT32;
    case DT_INT64: return H5T_NATIVE_INT64;
    case DT_UINT8: return H5T_NATIVE_UINT8;
    case DT_UINT16: return H5T_NATIVE_UINT16;
    case DT_UINT32: return H5T_NATIVE_UINT32;
    case DT_UINT64: return H5T_NATIVE_UINT64;
    case DT_FLOAT32: return H5T_NATIVE_FLOAT;
    case DT_FLOAT64: return H5T_NATIVE_DOUBLE;
    default: return H5I_INVALID_HID;
    }
}

/* IEEE 754 binary16 in native byte order (libhdf5 has no predefined one);
 * the caller closes it. */
static hid_t make_float16(void)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    if (t < 0)
        return t;
    if (H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_size(t, 2) < 0 ||
        H5Tset_ebias(t, 15) < 0 || H5Tset_order(t, H5Tget_order(H5T_NATIVE_FLOAT)) < 0) {
        H5Tclose(t);
        return H5I_INVALID_HID;
    }
    return t;
}

/* Fills info->dtype, stored_big_endian, string_size and the memory type of
 * a dataset whose stored type is ftype.  Types we do not read get DT_NONE
 * (not an error).  Returns 0, or -1 when libhdf5 fails to make a type. */
static int classify_type(hid_t ftype, node_info *info, h5_node *h)
{
    H5T_class_t cls = H5Tget_class(ftype);
    size_t size = H5Tget_size(ftype);
    info->dtype = DT_NONE;
    h->memtype = H5I_INVALID_HID;
    h->own_memtype = 0;
    if (cls == H5T_INTEGER || cls == H5T_FLOAT || cls == H5T_ENUM)
        info->stored_big_endian = H5Tget_order(ftype) == H5T_ORDER_BE;
    if (cls == H5T_INTEGER) {
        info->dtype = int_dtype(size, H5Tget_sign(ftype) == H5T_SGN_2);
        h->memtype = native_type(info->dtype);
    } else if (cls == H5T_FLOAT) {
        if (size == 2) {
            h->memtype = make_float16();
            if (h->memtype < 0)
                return -1;
            h->own_memtype = 1;
            info->dtype = DT_FLOAT16;
        } else if (size == 4 || size == 8) {
            info->dtype = size == 4 ? DT_FLOAT32 : DT_FLOAT64;
            h->memtype = native_type(info->dtype);
        }
    } else if (cls == H5T_ENUM) {
        /* libhdf5 converts enums only to enums: read into the native enum
         * and take its bytes as the base integer. */
        hid_t native = H5Tget_native_type(ftype, H5T_DIR_DEFAULT);
        hid_t base = native >= 0 ? H5Tget_super(native) : H5I_INVALID_HID;
        if (base >= 0 && H5Tget_class(base) == H5T_INTEGER) {
            dtype_kind k = type_is_bool_enum(ftype)
                               ? DT_BOOL
                               : int_dtype(H5Tget_size(base), H5Tget_sign(base) == H5T_SGN_2);
            if (k != DT_NONE && dtype_size(k) == H5Tget_size(native)) {
                info->dtype = k;
                h->memtype = native;
                h->own_memtype = 1;
                native = H5I_INVALID_HID;
            }
        }
        if (base >= 0)
            H5Tclose(base);
        if (native >= 0)
            H5Tclose(native);
    } else if (cls == H5T_STRING) {
        htri_t is_vlen = H5Tis_variable_str(ftype);
        if (is_vlen < 0)
            return 0;
        h->vlen = is_vlen > 0;
        h->strpad = H5Tget_strpad(ftype);
        if (h->vlen) {
            h->memtype = H5Tcopy(H5T_C_S1);
            if (h->memtype < 0)
                return -1;
            h->own_memtype = 1;
            H5T_cset_t cset = H5Tget_cset(ftype);
            if (H5Tset_size(h->memtype, H5T_VARIABLE) < 0 ||
                H5Tset_cset(h->memtype, cset == H5T_CSET_UTF8 ? cset : H5T_CSET_ASCII) < 0)
                return -1;
            info->dtype = DT_STRING;
        } else if (size > 0) {
            h->memtype = H5Tcopy(ftype);
            if (h->memtype < 0)
                return -1;
            h->own_memtype = 1;
            info->dtype = DT_STRING;
            info->string_size = size;
        }
    }
    return 0;
}

/* Integer of `size` bytes (native order) at p. */
static json_t *json_int_at(const unsigned char *p, size_t size, int is_signed)
{
    if (is_signed) {
        int64_t v;
        switch (size) {
        case 1: { int8_t x; memcpy(&x, p, 1); v = x; break; }
        case 2: { int16_t x; memcpy(&x, p, 2); v = x; break; }
        case 4: { int32_t x; memcpy(&x, p, 4); v = x; break; }
        default: memcpy(&v, p, 8); break;
        }
        return json_integer((json_int_t)v);
    }
    uint64_t v;
    switch (size) {
    case 1: { uint8_t x; memcpy(&x, p, 1); v = x; break; }
    case 2: { uint16_t x; memcpy(&x, p, 2); v = x; break; }
    case 4: { uint32_t x; memcpy(&x, p, 4); v = x; break; }
    default: memcpy(&v, p, 8); break;
    }
    if (v > (uint64_t)INT64_MAX)
        return json_real((double)v);
    return json_integer((json_int_t)v);
}

/* ------------------------------------------------------------ attributes */

/* Appends n JSON values of the attribute's items to flat; returns 0, or -1
 * when the type is not mapped or a read fails (the attribute is skipped). */
static int attr_values(hid_t attr, hid_t obj, const h5_heap_file *heap, hid_t ftype,
                       hid_t space, size_t n, json_t *flat)
{
    H5T_class_t cls = H5Tget_class(ftype);
    int rc = -1;
    hid_t mt = H5I_INVALID_HID;
    void *buf = NULL;
    size_t bytes;
    if (cls == H5T_STRING) {
        htri_t vl = H5Tis_variable_str(ftype);
        if (vl < 0)
            goto done;
        if (vl) {
            /* The heap ids first: libhdf5 follows them unchecked. */
            cellar_error local;
            cellar_error_clear(&local);
            if ((heap->fd >= 0 || heap->rd) && h5_heap_check_attr(attr, n, heap, &local))
                goto done;
            mt = H5Tcopy(H5T_C_S1);
            H5T_cset_t cset = H5Tget_cset(ftype);
            if (mt < 0 || H5Tset_size(mt, H5T_VARIABLE) < 0 ||
                H5Tset_cset(mt, cset == H5T_CSET_UTF8 ? cset : H5T_CSET_ASCII) < 0)
                goto done;
            char **s = NULL;
            if (mul_size(n, sizeof *s, &bytes) || bytes > H5_ATTR_MAX_BYTES ||
                !(s = calloc(n, sizeof *s)))
                goto done;
            buf = s;
            rc = H5Aread(attr, mt, s) < 0 ? -1 : 0;
            for (size_t i = 0; i < n && !rc; i++)
                rc = json_array_append_new(flat, json_utf8(s[i] ? s[i] : "",
                                                           s[i] ? strlen(s[i]) : 0));
            /* s was zeroed, so this is safe after a failed read too. */
            H5Dvlen_reclaim(mt, space, H5P_DEFAULT, s);
            goto done;
        }
        size_t size = H5Tget_size(ftype);
        H5T_str_t pad = H5Tget_strpad(ftype);
        if (!size || mul_size(n, size, &bytes) || bytes > H5_ATTR_MAX_BYTES)
            goto done;
        mt = H5Tcopy(ftype);
        if (mt < 0 || !(buf = malloc(bytes)) || H5Aread(attr, mt, buf) < 0)
            goto done;
        rc = 0;
        for (size_t i = 0; i < n && !rc; i++) {
            const char *item = (const char *)buf + i * size;
            rc = json_array_append_new(flat, json_utf8(item, fixed_str_len(item, size, pad)));
        }
    } else if (cls == H5T_INTEGER || cls == H5T_ENUM) {
        int is_bool = cls == H5T_ENUM && type_is_bool_enum(ftype);
        int is_signed;
        size_t size;
        if (cls == H5T_INTEGER) {
            if (H5Tget_size(ftype) > 8)
                goto done;
            is_signed = H5Tget_sign(ftype) == H5T_SGN_2;
            size = 8;
            mt = H5Tcopy(is_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64);
        } else {
            mt = H5Tget_native_type(ftype, H5T_DIR_DEFAULT);
            hid_t base = mt >= 0 ? H5Tget_super(mt) : H5I_INVALID_HID;
            if (base < 0)
                goto done;
            is_signed = H5Tget_sign(base) == H5T_SGN_2;
            size = H5Tget_size(base);
            H5Tclose(base);
            if (size != 1 && size != 2 && size != 4 && size != 8)
                goto done;
        }
        if (mt < 0 || mul_size(n, size, &bytes) || bytes > H5_ATTR_MAX_BYTES ||
            !(buf = malloc(bytes)) || H5Aread(attr, mt, buf) < 0)
            goto done;
        rc = 0;
        for (size_t i = 0; i < n && !rc; i++) {
            const unsigned char *p = (const unsigned char *)buf + i * size;
            rc = json_array_append_new(flat, is_bool ? json_boolean(p[0] != 0)
                                                     : json_int_at(p, size, is_signed));
        }
    } else if (cls == H5T_FLOAT) {
        if (mul_size(n, sizeof(double), &bytes) || bytes > H5_ATTR_MAX_BYTES ||
            !(buf = malloc(bytes)) || H5Aread(attr, H5T_NATIVE_DOUBLE, buf) < 0)
            goto done;
        rc = 0;
        const double *d = buf;
        /* JSON has no NaN or infinities. */
        for (size_t i = 0; i < n && !rc; i++)
            rc = json_array_append_new(flat, isfinite(d[i]) ? json_real(d[i]) : json_null());
    } else if (cls == H5T_REFERENCE && H5Tequal(ftype, H5T_STD_REF_OBJ) > 0) {
        if (mul_size(n, sizeof(hobj_ref_t), &bytes) || bytes > H5_ATTR_MAX_BYTES ||
            !(buf = malloc(bytes)) || H5Aread(attr, H5T_STD_REF_OBJ, buf) < 0)
            goto done;
        rc = 0;
        hobj_ref_t *refs = buf;
        for (size_t i = 0; i < n && !rc; i++) {
            json_t *v = NULL;
            /* our access properties: libhdf5 refuses a second open of a
             * dataset with other prefixes than the first's */
            hid_t target = H5Rdereference2(obj, h5_link_access(), H5R_OBJECT, &refs[i]);
            if (target >= 0) {
                ssize_t len = H5Iget_name(target, NULL, 0);
                char *name = len > 0 ? malloc((size_t)len + 1) : NULL;
                if (name && H5Iget_name(target, name, (size_t)len + 1) == len)
                    v = json_utf8(name, (size_t)len);
                free(name);
                H5Oclose(target);
            }
            rc = json_array_append_new(flat, v ? v : json_null());
        }
    }
done:
    free(buf);
    if (mt >= 0)
        H5Tclose(mt);
    return rc;
}

/* Nests flat[*pos...] into arrays following dims[d..ndims). */
static json_t *attr_nest(json_t *flat, const hsize_t *dims, int ndims, int d, size_t *pos)
{
    if (d == ndims) {
        json_t *v = json_array_get(flat, (*pos)++);
        return json_incref(v);
    }
    json_t *arr = json_array();
    for (hsize_t i = 0; arr && i < dims[d]; i++) {
        json_t *v = attr_nest(flat, dims, ndims, d + 1, pos);
        if (!v || json_array_append_new(arr, v)) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* The JSON value of one attribute, or NULL to skip it. */
static json_t *attr_to_json(hid_t attr, hid_t obj, const h5_heap_file *heap)
{
    json_t *result = NULL, *flat = NULL;
    hid_t space = H5Aget_space(attr), ftype = H5I_INVALID_HID;
    if (space < 0)
        goto done;
    H5S_class_t scls = H5Sget_simple_extent_type(space);
    if (scls == H5S_NULL) {
        result = json_null();
        goto done;
    }
    int ndims = H5Sget_simple_extent_ndims(space);
    hsize_t dims[NODE_MAX_DIMS];
    if (ndims < 0 || ndims > NODE_MAX_DIMS || H5Sget_simple_extent_dims(space, dims, NULL) < 0)
        goto done;
    hssize_t npoints = H5Sget_simple_extent_npoints(space);
    if (npoints < 0)
        goto done;
    if (npoints == 0) {
        /* h5py writes an empty list as a 0-length float64: any empty array. */
        result = json_array();
        goto done;
    }
    ftype = H5Aget_type(attr);
    flat = json_array();
    if (ftype < 0 || !flat || attr_values(attr, obj, heap, ftype, space, (size_t)npoints, flat))
        goto done;
    if (json_array_size(flat) != (size_t)npoints)
        goto done;
    size_t pos = 0;
    result = ndims == 0 ? json_incref(json_array_get(flat, 0))
                        : attr_nest(flat, dims, ndims, 0, &pos);
done:
    json_decref(flat);
    if (ftype >= 0)
        H5Tclose(ftype);
    if (space >= 0)
        H5Sclose(space);
    return result;
}

typedef struct attr_walk {
    hid_t obj;
    const h5_heap_file *heap;
    json_t *attrs;
    int oom;
} attr_walk;

static herr_t attr_walk_cb(hid_t loc, const char *name, const H5A_info_t *ainfo, void *data)
{
    (void)ainfo;
    attr_walk *w = data;
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    if (attr < 0)
        return 0;
    json_t *v = attr_to_json(attr, w->obj, w->heap);
    H5Aclose(attr);
    if (!v)
        return 0;
    /* Names that are not valid UTF-8 cannot be JSON keys: skip them. */
    size_t fixed_n = 0;
    char *fixed = utf8_fix(name, strlen(name), &fixed_n, &w->oom);
    if (fixed || w->oom) {
        free(fixed);
        json_decref(v);
        return w->oom ? -1 : 0;
    }
    if (json_object_set_new(w->attrs, name, v)) {
        w->oom = 1;
        return -1;
    }
    return 0;
}

/* Reads every mappable attribute of obj into attrs; unreadable ones are
 * skipped.  -1 only when out of memory. */
static int attrs_load(hid_t obj, const h5_heap_file *heap, json_t *attrs)
{
    attr_walk w = {.obj = obj, .heap = heap, .attrs = attrs};
    hsize_t idx = 0;
    H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, attr_walk_cb, &w);
    return w.oom ? -1 : 0;
}

/* ----------------------------------------------------------------- nodes */

static int array_info_load(node *n, h5_node *h, cellar_error *err)
{
    int rc = 0;
    hid_t space = H5Dget_space(h->obj);
    if (space < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read the dataspace of '%s'", n->path);
    n->info.type = NODE_ARRAY;
    H5S_class_t cls = H5Sget_simple_extent_type(space);
    if (cls == H5S_SCALAR) {
        n->info.ndim = 0;
    } else if (cls == H5S_NULL) {
        n->info.ndim = -1;
    } else if (cls == H5S_SIMPLE) {
        int nd = H5Sget_simple_extent_ndims(space);
        hsize_t dims[NODE_MAX_DIMS];
        if (nd < 0 || nd > NODE_MAX_DIMS) {
            rc = cellar_fail(err, CELLAR_EFORMAT, "'%s' has %d dimensions; at most %d are supported",
                             n->path, nd, NODE_MAX_DIMS);
            goto done;
        }
        if (H5Sget_simple_extent_dims(space, dims, NULL) < 0) {
            rc = h5_fail(err, CELLAR_EFORMAT, "cannot read the shape of '%s'", n->path);
            goto done;
        }
        n->info.ndim = nd;
        int64_t total = 1;
        for (int d = 0; d < nd; d++) {
            if (dims[d] > (hsize_t)INT64_MAX ||
                (dims[d] && total > INT64_MAX / (int64_t)dims[d])) {
                rc = cellar_fail(err, CELLAR_EFORMAT, "'%s' has an impossible shape", n->path);
                goto done;
            }
            n->info.shape[d] = (int64_t)dims[d];
            total *= (int64_t)dims[d];
        }
    } else {
        rc = cellar_fail(err, CELLAR_EFORMAT, "'%s' has an unknown dataspace", n->path);
        goto done;
    }
    h->ftype = H5Dget_type(h->obj);
    if (h->ftype < 0) {
        rc = h5_fail(err, CELLAR_EFORMAT, "cannot read the type of '%s'", n->path);
        goto done;
    }
    if (classify_type(h->ftype, &n->info, h)) {
        rc = h5_fail(err, CELLAR_EFORMAT, "cannot map the type of '%s'", n->path);
        goto done;
    }
    if (H5Tget_class(h->ftype) == H5T_COMPOUND) {
        int members = H5Tget_nmembers(h->ftype);
        n->info.n_fields = members > 0 && members <= H5_FIELDS_MAX ? members : 0;
    }
    if (h->memtype >= 0 && (h->vlen || H5Tequal(h->ftype, h->memtype) <= 0)) {
        size_t fs = H5Tget_size(h->ftype), ms = H5Tget_size(h->memtype);
        /* a vlen element takes 16 bytes on disk whatever its memory size */
        h->conv_size = fs > ms ? fs : ms;
        if (h->conv_size < 32)
            h->conv_size = 32;
    }
done:
    H5Sclose(space);
    return rc;
}

/* ------------------------------------------------- other files' values */

/* The probe's sink of the names of other files (h5_set_reference_sink):
 * set before any thread runs, then only read. */
static h5_reference_sink reference_sink;
static void *reference_sink_ctx;

void h5_set_reference_sink(h5_reference_sink sink, void *ctx)
{
    reference_sink = sink;
    reference_sink_ctx = ctx;
}

/* The directory libhdf5 resolves the names in obj's file against (the
 * directory of the name the file was opened by, as "${ORIGIN}" and
 * external links take it), in base; 0 or -1. */
static int file_base(hid_t obj, char *base, size_t size)
{
    char name[PATH_MAX];
    ssize_t len = H5Fget_name(obj, name, sizeof name);
    if (len <= 0 || (size_t)len >= sizeof name)
        return -1;
    return ext_targets_dir_of(name, base, size);
}

/* Whether the dataset dname of the file holding obj keeps its values in
 * that file: reached by hard links only (a path through a soft or
 * external link would be traversed by libhdf5 unchecked while it reads),
 * neither virtual nor with external storage. */
static int plain_source(hid_t obj, const char *dname)
{
    hid_t lapl = h5_link_access();
    hid_t cur = H5Gopen2(obj, "/", H5P_DEFAULT);
    int ok = cur >= 0;
    const char *s = dname;
    while (ok && *s) {
        while (*s == '/')
            s++;
        size_t len = strcspn(s, "/");
        if (!len)
            break;
        char comp[1024];
        H5L_info_t li;
        if (len >= sizeof comp) {
            ok = 0;
            break;
        }
        memcpy(comp, s, len);
        comp[len] = '\0';
        s += len;
        hid_t next = H5I_INVALID_HID;
        ok = strcmp(comp, ".") && H5Lget_info(cur, comp, &li, lapl) >= 0 &&
             li.type == H5L_TYPE_HARD && (next = h5_object_open(cur, comp, NULL)) >= 0;
        H5Oclose(cur);
        cur = next;
    }
    if (ok && H5Iget_type(cur) == H5I_DATASET) {
        hid_t dcpl = H5Dget_create_plist(cur);
        ok = dcpl >= 0 && H5Pget_external_count(dcpl) == 0 && H5Pget_layout(dcpl) != H5D_VIRTUAL &&
             H5Pget_layout(dcpl) >= 0;
        if (dcpl >= 0)
            H5Pclose(dcpl);
    } else {
        ok = 0;
    }
    if (cur >= 0)
        H5Oclose(cur);
    return ok;
}

/* Why the file `fname` a dataset names (kind EXT_RAW or EXT_VIRTUAL) is
 * not followed, or NULL when it is. */
static const char *target_refused(const ext_targets *t, const char *base, char kind,
                                  const char *fname)
{
    const ext_target *e = ext_targets_find(t, base, kind, fname);
    if (!e)
        return "the store's probe did not report it";
    if (e->why)
        return e->why;
    if (!e->probed)
        return "it was not checked";
    if (kind == EXT_VIRTUAL && e->names_files)
        return "it names other files itself";
    if (!ext_target_unchanged(e))
        return "it changed since the store was opened";
    return NULL;
}

int h5_values_followed(hid_t dset, const char *path, const ext_targets *targets,
                       cellar_error *err)
{
    hid_t dcpl = H5Dget_create_plist(dset);
    if (dcpl < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read the layout of '%s'", path);
    int external = H5Pget_external_count(dcpl);
    H5D_layout_t layout = H5Pget_layout(dcpl);
    int rc = 0;
    char base[PATH_MAX], fname[PATH_MAX], dname[1024];
    if (external < 0 || layout < 0) {
        rc = h5_fail(err, CELLAR_EFORMAT, "cannot read the layout of '%s'", path);
        goto done;
    }
    if (external == 0 && layout != H5D_VIRTUAL)
        goto done;
    const char *what = external ? "keeps its values in other files (HDF5 external storage)"
                                : "is a virtual dataset over other files";
    if (!reference_sink && file_base(dset, base, sizeof base)) {
        rc = cellar_fail(err, CELLAR_EFORMAT, "'%s' %s, whose directory is unknown", path, what);
        goto done;
    }
    size_t n = external ? (size_t)external : 0;
    if (layout == H5D_VIRTUAL && H5Pget_virtual_count(dcpl, &n) < 0) {
        rc = h5_fail(err, CELLAR_EFORMAT, "cannot read the mappings of '%s'", path);
        goto done;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        off_t off = 0;
        hsize_t size = 0;
        const char *why = NULL;
        ssize_t fl = external ? (H5Pget_external(dcpl, (unsigned)i, sizeof fname, fname, &off,
                                                 &size) < 0 ? -1 : (ssize_t)strlen(fname))
                              : H5Pget_virtual_filename(dcpl, i, fname, sizeof fname);
        ssize_t dl = external ? 0 : H5Pget_virtual_dsetname(dcpl, i, dname, sizeof dname);
        if (fl <= 0 || (size_t)fl >= sizeof fname - 1 || dl < 0 || (size_t)dl >= sizeof dname) {
            rc = h5_fail(err, CELLAR_EFORMAT, "'%s' %s, whose names cannot be read", path, what);
            break;
        }
        if (reference_sink) {
            reference_sink(reference_sink_ctx, external ? EXT_RAW : EXT_VIRTUAL, fname);
            continue;
        }
        if (!external && (strchr(fname, '%') || strchr(dname, '%')))
            why = "printf-style source names are not followed";
        else if (!external && !strcmp(fname, "."))
            why = plain_source(dset, dname) ? NULL
                                            : "its source in this file is not a plain dataset "
                                              "reached by hard links";
        else
            why = target_refused(targets, base, external ? EXT_RAW : EXT_VIRTUAL, fname);
        if (why)
            rc = cellar_fail(err, CELLAR_EFORMAT, "'%s' %s: '%s' is not followed: %s", path, what,
                             fname, why);
    }
    if (!rc && reference_sink) /* the probe reads no other file */
        rc = cellar_fail(err, CELLAR_EFORMAT, "'%s' %s, which the probe does not read", path,
                         what);
done:
    H5Pclose(dcpl);
    return rc;
}

/* Where heap ids of n's file are checked from: the root's file, or none
 * (fd -1: not checked) for an object of another file. */
static const h5_heap_file no_heap = {.fd = -1};

static const h5_heap_file *file_heap(const node *n)
{
    const h5_node *h = n->impl;
    return h && h->foreign ? &no_heap : &((const h5_node *)n->root->impl)->heap;
}

/* A new node holding the open object obj (and, for the root, file),
 * taking ownership of both whatever happens; NULL when out of memory. */
static node *h5_node_alloc(node *parent, const char *name, hid_t obj, hid_t file)
{
    node *n = node_new(&h5_ops, parent, name);
    h5_node *h = n ? calloc(1, sizeof *h) : NULL;
    if (!h) {
        node_tree_free(n);
        H5Oclose(obj);
        if (file >= 0)
            H5Fclose(file);
        return NULL;
    }
    h->obj = obj;
    h->file = file;
    h->ftype = H5I_INVALID_HID;
    h->memtype = H5I_INVALID_HID;
    h->fd = -1;
    h->heap.fd = -1;
    atomic_init(&h->dstate, DIRECT_UNPLANNED);
    h->dlock_init = pthread_mutex_init(&h->dlock, NULL) == 0;
    n->impl = h;
    return n;
}

/* Makes the node for the open object obj (a group or dataset), taking
 * ownership of obj whatever happens. */
static void direct_file_open(h5_node *h);
static void direct_reader_open(h5_node *h, const h5_reader *rd);
/* The reader of the file h5_open_reader is opening on this thread, or NULL. */
static _Thread_local const h5_reader *opening_reader;

static int h5_node_wrap(node *parent, const char *name, hid_t obj, hid_t file, int foreign,
                        const ext_targets *targets, node **out, cellar_error *err)
{
    *out = NULL;
    node *n = h5_node_alloc(parent, name, obj, file);
    if (!n)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", name);
    h5_node *h = n->impl;
    h->foreign = foreign;
    if (foreign)
        atomic_store(&h->dstate, DIRECT_NONE);
    if (!parent)
        h->targets = targets;
    int rc = 0;
    H5I_type_t it = H5Iget_type(obj);
    if (it == H5I_GROUP) {
        n->info.type = NODE_GROUP;
    } else if (it == H5I_DATASET) {
        rc = h5_values_followed(obj, n->path, ((const h5_node *)n->root->impl)->targets, err);
        if (!rc)
            rc = array_info_load(n, h, err);
    } else {
        rc = cellar_fail(err, CELLAR_EFORMAT, "'%s' is neither a group nor a dataset", n->path);
    }
    if (!parent) { /* the file's bytes at hand before its first attribute */
        if (opening_reader)
            direct_reader_open(h, opening_reader);
        else
            direct_file_open(h);
    }
    if (!rc && attrs_load(obj, file_heap(n), n->attrs))
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading attributes of '%s'",
                         n->path);
    if (rc) {
        node_tree_free(n);
        return rc;
    }
    *out = n;
    return 0;
}

/* ---------------------------------------------------- compound fields */

/* Makes memtype of a field node: a compound of the one member `name`, of
 * member (or, when adims is not NULL, of an array of member over adims),
 * so that H5Dread picks that member out of each record. */
static int field_memtype(h5_node *h, const char *name, int andims, const hsize_t *adims)
{
    hid_t member = h->memtype, arr = H5I_INVALID_HID;
    if (andims) {
        arr = H5Tarray_create2(h->memtype, (unsigned)andims, adims);
        if (arr < 0)
            return -1;
        member = arr;
    }
    size_t msize = H5Tget_size(member);
    hid_t cmp = msize ? H5Tcreate(H5T_COMPOUND, msize) : H5I_INVALID_HID;
    int rc = cmp >= 0 && H5Tinsert(cmp, name, 0, member) >= 0 ? 0 : -1;
    if (arr >= 0)
        H5Tclose(arr);
    if (rc) {
        if (cmp >= 0)
            H5Tclose(cmp);
        return -1;
    }
    if (h->own_memtype)
        H5Tclose(h->memtype);
    h->memtype = cmp;
    h->own_memtype = 1;
    size_t rec = H5Tget_size(h->ftype);
    h->conv_size = rec > msize ? rec : msize;
    if (h->conv_size < 32)
        h->conv_size = 32;
    return 0;
}

/* Forgets a field's type: it is listed but not readable (DT_NONE). */
static void field_unreadable(node *n, h5_node *h)
{
    if (h->own_memtype && h->memtype >= 0)
        H5Tclose(h->memtype);
    h->memtype = H5I_INVALID_HID;
    h->own_memtype = 0;
    n->info.dtype = DT_NONE;
    n->info.string_size = 0;
}

/* Shape, dtype and memory type of the field node n whose member type is
 * mt, in the records of parent.  A member that is an array adds its
 * dimensions (1-D records only); members of other classes, and arrays of
 * strings, are DT_NONE. */
static int field_info_load(node *n, h5_node *h, const node *parent, hid_t mt,
                           cellar_error *err)
{
    n->info.type = NODE_ARRAY;
    n->info.ndim = parent->info.ndim;
    for (int d = 0; d < parent->info.ndim && d < NODE_MAX_DIMS; d++)
        n->info.shape[d] = parent->info.shape[d];
    hid_t base = mt, super = H5I_INVALID_HID;
    hsize_t adims[NODE_MAX_DIMS];
    int andims = 0;
    int rc = 0;
    if (H5Tget_class(mt) == H5T_ARRAY) {
        andims = H5Tget_array_ndims(mt);
        if (parent->info.ndim != 1 || andims < 1 || andims > NODE_MAX_DIMS - 1 ||
            H5Tget_array_dims2(mt, adims) != andims)
            return 0; /* listed, unreadable */
        int64_t total = 1;
        for (int d = 0; d < andims; d++) {
            if (adims[d] == 0 || adims[d] > (hsize_t)INT64_MAX ||
                total > INT64_MAX / (int64_t)adims[d])
                return 0;
            total *= (int64_t)adims[d];
            n->info.shape[1 + d] = (int64_t)adims[d];
        }
        super = H5Tget_super(mt);
        if (super < 0)
            return h5_fail(err, CELLAR_EFORMAT, "cannot read the type of '%s'", n->path);
        base = super;
        n->info.ndim = 1 + andims;
        h->field_inner = (size_t)total;
    }
    if (classify_type(base, &n->info, h)) {
        rc = h5_fail(err, CELLAR_EFORMAT, "cannot map the type of '%s'", n->path);
        goto done;
    }
    size_t es = dtype_size(n->info.dtype), row;
    if (n->info.dtype == DT_NONE || (andims && (n->info.dtype == DT_STRING ||
                                                mul_size(h->field_inner, es, &row)))) {
        field_unreadable(n, h);
        goto done;
    }
    if (field_memtype(h, n->name, andims, andims ? adims : NULL))
        rc = h5_fail(err, CELLAR_EFORMAT, "cannot make a type for '%s'", n->path);
done:
    if (super >= 0)
        H5Tclose(super);
    return rc;
}

/* Opens the field `name` of the compound dataset parent as a node of its
 * own (storage/node.h: arrays of records). */
static int h5_field_open(node *parent, const char *name, node **out, cellar_error *err)
{
    *out = NULL;
    h5_node *ph = parent->impl;
    int idx = ph->ftype >= 0 ? H5Tget_member_index(ph->ftype, name) : -1;
    if (idx < 0)
        return cellar_fail(err, CELLAR_ENOTFOUND, "no field '%s' in '%s'", name, parent->path);
    hid_t mt = H5Tget_member_type(ph->ftype, (unsigned)idx);
    if (mt < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read field '%s' of '%s'", name,
                       parent->path);
    hid_t ftype = H5Tcopy(ph->ftype);
    if (ftype < 0 || H5Iinc_ref(ph->obj) < 0) {
        if (ftype >= 0)
            H5Tclose(ftype);
        H5Tclose(mt);
        return h5_fail(err, CELLAR_EFORMAT, "cannot open field '%s' of '%s'", name,
                       parent->path);
    }
    node *n = h5_node_alloc(parent, name, ph->obj, H5I_INVALID_HID);
    if (!n) {
        H5Tclose(ftype);
        H5Tclose(mt);
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", name);
    }
    h5_node *h = n->impl;
    h->field = 1;
    h->foreign = ph->foreign;
    h->ftype = ftype;
    atomic_store(&h->dstate, DIRECT_NONE); /* the stored bytes are whole records */
    int rc = field_info_load(n, h, parent, mt, err);
    H5Tclose(mt);
    if (rc) {
        node_tree_free(n);
        return rc;
    }
    *out = n;
    return 0;
}

/* The member names of a compound dataset, in stored order. */
static int h5_list_fields(node *n, arena *a, const char ***names, size_t *count,
                          cellar_error *err)
{
    h5_node *h = n->impl;
    size_t k = (size_t)n->info.n_fields;
    const char **v = arena_calloc(a, k ? k : 1, sizeof *v);
    if (!v)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '%s'", n->path);
    for (size_t i = 0; i < k; i++) {
        char *m = H5Tget_member_name(h->ftype, (unsigned)i);
        if (!m)
            return h5_fail(err, CELLAR_EFORMAT, "cannot read the fields of '%s'", n->path);
        v[i] = arena_strdup(a, m);
        H5free_memory(m);
        if (!v[i])
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '%s'", n->path);
    }
    *names = v;
    *count = k;
    return 0;
}

/* Set on this thread when libhdf5 was stopped at an external link. */
static _Thread_local int elink_refused;
/* The files the tree whose lookup runs on this thread may reach (NULL:
 * none), for check_external_link. */
static _Thread_local const ext_targets *following;

/* libhdf5 calls this (H5Pset_elink_cb) before it opens the file of an
 * external link met while traversing a path (the link itself, or a soft
 * link to "/uns/elink/x").  It lets libhdf5 go on only to a file the
 * store version's table followed (storage/ext_targets.h), still the file
 * it was: libhdf5 then opens the name in the directory of parent_file (no
 * prefix is set, and the HDF5_EXT_PREFIX variable is unset), exactly the
 * path the table resolved.  Only string work and a stat here: libhdf5's
 * lock is held. */
static herr_t check_external_link(const char *parent_file, const char *parent_group,
                                  const char *child_file, const char *child_object,
                                  unsigned *acc_flags, hid_t fapl, void *op_data)
{
    (void)parent_group, (void)child_object, (void)acc_flags, (void)fapl, (void)op_data;
    char base[PATH_MAX];
    const ext_target *e =
        following && !ext_targets_dir_of(parent_file, base, sizeof base)
            ? ext_targets_find(following, base, EXT_LINK, child_file)
            : NULL;
    if (e && !e->why && e->probed && ext_target_unchanged(e))
        return 0;
    elink_refused = 1;
    return -1;
}

static pthread_once_t link_access_once = PTHREAD_ONCE_INIT;
static hid_t link_access_props = H5I_INVALID_HID;

/* Dataset access properties, which are link access properties too: every
 * lookup and every open of ours uses them.  "${ORIGIN}": the files of a
 * dataset's external storage and of a virtual dataset's sources are found
 * in the directory of the dataset's own file (the HDF5_EXTFILE_PREFIX and
 * HDF5_VDS_PREFIX variables, which would come first, are unset at
 * startup), which is where storage/ext_targets.c resolved them. */
static void link_access_make(void)
{
    hid_t p = H5Pcreate(H5P_DATASET_ACCESS);
    if (p >= 0 && (H5Pset_elink_cb(p, check_external_link, NULL) < 0 ||
                   H5Pset_efile_prefix(p, "${ORIGIN}") < 0 ||
                   H5Pset_virtual_prefix(p, "${ORIGIN}") < 0)) {
        H5Pclose(p);
        p = H5I_INVALID_HID;
    }
    link_access_props = p;
}

static hid_t link_access(void)
{
    pthread_once(&link_access_once, link_access_make);
    return link_access_props;
}

hid_t h5_link_access(void)
{
    return link_access();
}

int h5_elink_refused_take(void)
{
    int r = elink_refused;
    elink_refused = 0;
    return r;
}

const struct h5_heap_file *h5_node_heap(const node *n)
{
    return n && n->ops == &h5_ops && n->root && n->root->impl ? file_heap(n) : NULL;
}

hid_t h5_node_object(const node *n)
{
    return n && n->ops == &h5_ops && n->impl ? ((const h5_node *)n->impl)->obj
                                              : H5I_INVALID_HID;
}

const ext_targets *h5_node_targets(const node *n)
{
    return n && n->ops == &h5_ops && n->root && n->root->impl
               ? ((const h5_node *)n->root->impl)->targets
               : NULL;
}

hid_t h5_object_open(hid_t loc, const char *name, const ext_targets *targets)
{
    hid_t lapl = link_access();
    if (lapl < 0)
        return H5I_INVALID_HID;
    /* A dataset is opened with H5Dopen2 and our properties: H5Oopen (and
     * H5Oget_info_by_name through an external link) opens it without the
     * prefixes, and libhdf5 keeps the first open's for every later one. */
    following = targets;
    hid_t obj = H5Dopen2(loc, name, lapl);
    if (obj < 0 && !elink_refused) {
        obj = H5Oopen(loc, name, lapl);
        if (obj >= 0 && H5Iget_type(obj) == H5I_DATASET) {
            H5Oclose(obj);
            obj = H5I_INVALID_HID;
        }
    }
    following = NULL;
    return obj;
}

int h5_external_link_followed(hid_t loc, const char *name, const char *shown,
                              const ext_targets *targets, cellar_error *err)
{
    char val[PATH_MAX + 1024], base[PATH_MAX];
    H5L_info_t li;
    unsigned flags = 0;
    const char *file = NULL, *obj = NULL;
    if (H5Lget_info(loc, name, &li, link_access()) < 0 || li.u.val_size > sizeof val ||
        H5Lget_val(loc, name, val, sizeof val, link_access()) < 0 ||
        H5Lunpack_elink_val(val, li.u.val_size, &flags, &file, &obj) < 0 || !file || !obj)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read the external link '%s'", shown);
    if (reference_sink) {
        reference_sink(reference_sink_ctx, EXT_LINK, file);
        return cellar_fail(err, CELLAR_EFORMAT,
                           "'%s' is an external link to another file, which the probe does "
                           "not follow",
                           shown);
    }
    const ext_target *e = NULL;
    const char *why = "the store's probe did not report it";
    if (!file_base(loc, base, sizeof base) &&
        (e = ext_targets_find(targets, base, EXT_LINK, file)) != NULL)
        why = e->why ? e->why
              : !e->probed ? "it was not checked"
              : !ext_target_unchanged(e) ? "it changed since the store was opened"
                                         : NULL;
    if (why)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "'%s' is an external link to '%s', which is not followed: %s", shown,
                           file, why);
    return 0;
}

void h5_following_set(const ext_targets *targets)
{
    following = targets;
}

/* Whether obj lies in another file than the tree's root file. */
static int in_other_file(hid_t obj, const h5_node *root)
{
#if H5_VERSION_GE(1, 12, 0)
    H5O_info2_t info;
    if (H5Oget_info3(obj, &info, H5O_INFO_BASIC) < 0)
        return 1;
#else
    H5O_info_t info;
    if (H5Oget_info2(obj, &info, H5O_INFO_BASIC) < 0)
        return 1;
#endif
    return info.fileno != root->fileno;
}

int h5_object_in_other_file(hid_t obj, const node *root)
{
    return root->ops != &h5_ops || in_other_file(obj, root->impl);
}

/* An identity of obj within its file (see h5_object_address). */
static int object_address(hid_t obj, uint64_t *addr)
{
#if H5_VERSION_GE(1, 12, 0)
    H5O_info2_t info;
    if (H5Oget_info3(obj, &info, H5O_INFO_BASIC) < 0)
        return -1;
    uint64_t a = 0;
    memcpy(&a, &info.token, sizeof a < sizeof info.token ? sizeof a : sizeof info.token);
    *addr = a ^ ((uint64_t)info.fileno << 48);
#else
    H5O_info_t info;
    if (H5Oget_info2(obj, &info, H5O_INFO_BASIC) < 0)
        return -1;
    *addr = (uint64_t)info.addr ^ ((uint64_t)info.fileno << 48);
#endif
    return 0;
}

/* The ancestor of child group obj (parent or above) that is the same
 * group, or NULL.  A hard link may name a group that contains it: libhdf5
 * follows it forever, and every path through the cycle would be a new
 * element of the tree (the zarr view's listing of a store repeats the whole
 * store under each turn, up to the key depth). */
static const node *cycle_ancestor(node *parent, hid_t obj)
{
    uint64_t addr, at;
    if (H5Iget_type(obj) != H5I_GROUP || object_address(obj, &addr))
        return NULL;
    for (node *p = parent; p; p = p->parent)
        if (p->ops == &h5_ops && !h5_object_address(p, &at) && at == addr)
            return p;
    return NULL;
}

static int h5_open_child(node *parent, const char *name, node **out, cellar_error *err)
{
    h5_quiet();
    *out = NULL;
    h5_node *ph = parent->impl;
    const h5_node *root = parent->root->impl;
    if (parent->info.type == NODE_ARRAY)
        return h5_field_open(parent, name, out, err);
    const char *sep = strcmp(parent->path, "/") == 0 ? "" : "/";
    /* "." names the group itself in HDF5 paths; a name with '/' is a path
     * libhdf5 would traverse (through links we have not checked). */
    if (strcmp(name, ".") == 0 || strchr(name, '/'))
        return cellar_fail(err, CELLAR_ENOTFOUND, "no element '%s' in '%s'", name, parent->path);
    hid_t lapl = link_access();
    if (lapl < 0)
        return h5_fail(err, CELLAR_EINTERNAL, "cannot set up link access for '%s'", name);
    htri_t exists = H5Lexists(ph->obj, name, lapl);
    if (exists < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot look up '%s' in '%s'", name, parent->path);
    if (!exists)
        return cellar_fail(err, CELLAR_ENOTFOUND, "no element '%s' in '%s'", name, parent->path);
    H5L_info_t li;
    if (H5Lget_info(ph->obj, name, &li, lapl) < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read the link '%s%s%s'", parent->path, sep,
                       name);
    char shown[1200];
    snprintf(shown, sizeof shown, "%s%s%s", parent->path, sep, name);
    if (li.type == H5L_TYPE_EXTERNAL) {
        int rc = h5_external_link_followed(ph->obj, name, shown, root->targets, err);
        if (rc)
            return rc;
    } else if (li.type != H5L_TYPE_HARD && li.type != H5L_TYPE_SOFT) {
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' is a user-defined link, not supported",
                           shown);
    }
    elink_refused = 0;
    hid_t obj = h5_object_open(ph->obj, name, root->targets);
    if (obj < 0) {
        if (elink_refused)
            return cellar_fail(err, CELLAR_EFORMAT,
                               "'%s' is a soft link through an external link to another "
                               "file, which is not followed",
                               shown);
        if (li.type == H5L_TYPE_SOFT)
            return h5_fail(err, CELLAR_EFORMAT, "'%s' is a soft link to nothing", shown);
        return h5_fail(err, CELLAR_EFORMAT, "cannot open '%s'", shown);
    }
    const node *again = cycle_ancestor(parent, obj);
    if (again) {
        H5Oclose(obj);
        return cellar_fail(err, CELLAR_EFORMAT,
                           "'%s' links back to '%s', which contains it (a cycle, not followed)",
                           shown, again->path[0] ? again->path : "/");
    }
    int foreign = ph->foreign || (li.type != H5L_TYPE_HARD && in_other_file(obj, root));
    return h5_node_wrap(parent, name, obj, H5I_INVALID_HID, foreign, NULL, out, err);
}

typedef struct name_list {
    arena *a;
    const char **names;
    size_t count, cap;
    int oom;
} name_list;

static herr_t name_list_cb(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
    (void)g;
    (void)info;
    name_list *l = data;
    if (l->count == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        const char **grown = arena_calloc(l->a, cap, sizeof *grown);
        if (!grown) {
            l->oom = 1;
            return -1;
        }
        if (l->count)
            memcpy(grown, l->names, l->count * sizeof *grown);
        l->names = grown;
        l->cap = cap;
    }
    const char *copy = arena_strdup(l->a, name);
    if (!copy) {
        l->oom = 1;
        return -1;
    }
    l->names[l->count++] = copy;
    return 0;
}

int h5_list_links(hid_t obj, const char *path, arena *a, const char ***names, size_t *count,
                  cellar_error *err)
{
    h5_quiet();
    unsigned crt = 0;
    hid_t gcpl = H5Gget_create_plist(obj);
    if (gcpl >= 0) {
        if (H5Pget_link_creation_order(gcpl, &crt) < 0)
            crt = 0;
        H5Pclose(gcpl);
    }
    name_list l = {.a = a};
    herr_t st = -1;
    if (crt & H5P_CRT_ORDER_TRACKED) {
        hsize_t idx = 0;
        st = H5Literate(obj, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, name_list_cb, &l);
        if (l.oom)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '%s'", path);
    }
    if (st < 0) {
        /* Name order: the default, and the fallback when creation order is
         * tracked but not indexed. */
        l.count = 0;
        hsize_t idx = 0;
        st = H5Literate(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, name_list_cb, &l);
        if (l.oom)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory listing '%s'", path);
        if (st < 0)
            return h5_fail(err, CELLAR_EFORMAT, "cannot list the children of '%s'", path);
    }
    *names = l.names;
    *count = l.count;
    return 0;
}

static int h5_list_children(node *n, arena *a, const char ***names, size_t *count,
                            cellar_error *err)
{
    const h5_node *h = n->impl;
    if (n->info.type == NODE_ARRAY)
        return h5_list_fields(n, a, names, count, err);
    return h5_list_links(h->obj, n->path, a, names, count, err);
}

/* ----------------------------------------------------------------- reads */

/* How one dimension of a selection is read: the distinct positions it
 * touches, in ascending order, as file blocks (start, stride, count), and
 * map[i] = rank of the i-th requested position among them (NULL when the
 * i-th requested position is simply the i-th distinct one). */
typedef struct dim_plan {
    int64_t nuniq;
    size_t nblocks;
    hsize_t *bstart, *bstride, *bcount;
    int64_t *boff;     /* rank of each block's first position */
    int64_t *uniq;     /* index lists: the distinct positions */
    int64_t *map;
    /* storage of the single block of a slice */
    hsize_t s_start, s_stride, s_count;
    int64_t s_off;
} dim_plan;

static void dim_plan_free(dim_plan *p)
{
    if (p->bstart != &p->s_start) {
        free(p->bstart);
        free(p->bstride);
        free(p->bcount);
        free(p->boff);
    }
    free(p->uniq);
    free(p->map);
    memset(p, 0, sizeof *p);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t rank_of(const int64_t *uniq, int64_t m, int64_t v)
{
    int64_t lo = 0, hi = m - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (uniq[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int plan_list(const dim_sel *s, int64_t len, dim_plan *p, const char *path,
                     cellar_error *err)
{
    int rc = 0;
    size_t count = (size_t)s->count;
    int64_t *uniq = malloc(count * sizeof *uniq);
    if (!uniq)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", path);
    memcpy(uniq, s->index, count * sizeof *uniq);
    qsort(uniq, count, sizeof *uniq, cmp_i64);
    size_t m = 0, runs = 0;
    for (size_t i = 0; i < count; i++) {
        if (m && uniq[i] == uniq[m - 1])
            continue;
        if (!m || uniq[i] != uniq[m - 1] + 1)
            runs++;
        uniq[m++] = uniq[i];
    }
    if (uniq[0] < 0 || uniq[m - 1] >= len) {
        rc = cellar_fail(err, CELLAR_ERANGE, "selection outside '%s'", path);
        goto done;
    }
    p->nuniq = (int64_t)m;
    p->nblocks = runs;
    p->bstart = malloc(runs * sizeof *p->bstart);
    p->bstride = malloc(runs * sizeof *p->bstride);
    p->bcount = malloc(runs * sizeof *p->bcount);
    p->boff = malloc(runs * sizeof *p->boff);
    p->map = malloc(count * sizeof *p->map);
    if (!p->bstart || !p->bstride || !p->bcount || !p->boff || !p->map) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", path);
        goto done;
    }
    size_t b = 0;
    for (size_t i = 0; i < m; i++) {
        if (i && uniq[i] == uniq[i - 1] + 1) {
            p->bcount[b - 1]++;
            continue;
        }
        p->bstart[b] = (hsize_t)uniq[i];
        p->bstride[b] = 1;
        p->bcount[b] = 1;
        p->boff[b] = (int64_t)i;
        b++;
    }
    int identity = m == count;
    for (size_t i = 0; i < count; i++) {
        p->map[i] = rank_of(uniq, (int64_t)m, s->index[i]);
        identity &= p->map[i] == (int64_t)i;
    }
    if (identity) {
        free(p->map);
        p->map = NULL;
    }
    p->uniq = uniq;
    uniq = NULL;
done:
    free(uniq);
    return rc;
}

static int plan_dim(const dim_sel *s, int64_t len, dim_plan *p, const char *path,
                    cellar_error *err)
{
    memset(p, 0, sizeof *p);
    p->bstart = &p->s_start;
    p->bstride = &p->s_stride;
    p->bcount = &p->s_count;
    p->boff = &p->s_off;
    if (s->count <= 0)
        return cellar_fail(err, CELLAR_EINTERNAL, "empty selection reached '%s'", path);
    if (s->index) {
        p->bstart = NULL;
        p->bstride = NULL;
        p->bcount = NULL;
        p->boff = NULL;
        return plan_list(s, len, p, path, err);
    }
    if (s->step == 0)
        return cellar_fail(err, CELLAR_EINTERNAL, "zero step reached '%s'", path);
    int64_t stride = s->step > 0 ? s->step : -s->step;
    int64_t first = s->step > 0 ? s->start : dim_sel_at(s, s->count - 1);
    int64_t last = s->step > 0 ? dim_sel_at(s, s->count - 1) : s->start;
    if (first < 0 || last >= len || first > last)
        return cellar_fail(err, CELLAR_ERANGE, "selection outside '%s'", path);
    p->nuniq = s->count;
    p->nblocks = 1;
    p->s_start = (hsize_t)first;
    p->s_stride = (hsize_t)stride;
    p->s_count = (hsize_t)s->count;
    p->s_off = 0;
    if (s->step < 0 && s->count > 1) {
        p->map = malloc((size_t)s->count * sizeof *p->map);
        if (!p->map)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", path);
        for (int64_t i = 0; i < s->count; i++)
            p->map[i] = s->count - 1 - i;
    }
    return 0;
}

/* libhdf5's default type-conversion buffer: allocated and zeroed for every
 * read that converts, whatever the read's size. */
#define H5_CONV_BUF_DEFAULT ((size_t)1 << 20)

/* Conversion buffers of 2^H5_XFER_MIN_SHIFT bytes and up, doubling to the
 * default's size: one transfer property list per size and thread, made on
 * first use and kept for the thread's life (a cache: making one costs as
 * much as a small read). */
#define H5_XFER_MIN_SHIFT 12
#define H5_XFER_CLASSES 9 /* 4 KiB .. 1 MiB */
static _Thread_local hid_t h5_xfer_cache[H5_XFER_CLASSES];

/* A dataset transfer property list whose conversion buffer fits a read of
 * nelem elements of h, or H5P_DEFAULT (no conversion, a read as large as
 * the default buffer, or a failure: the default then works as before).
 * Borrowed: nothing to release. */
static hid_t xfer_for(const h5_node *h, size_t nelem)
{
    if (!h->conv_size || nelem == 0 || nelem > H5_CONV_BUF_DEFAULT / h->conv_size)
        return H5P_DEFAULT;
    size_t need = nelem * h->conv_size;
    int c = 0;
    while (c < H5_XFER_CLASSES - 1 && ((size_t)1 << (H5_XFER_MIN_SHIFT + c)) < need)
        c++;
    if (h5_xfer_cache[c] > 0)
        return h5_xfer_cache[c];
    hid_t p = H5Pcreate(H5P_DATASET_XFER);
    if (p < 0)
        return H5P_DEFAULT;
    if (H5Pset_buffer(p, (size_t)1 << (H5_XFER_MIN_SHIFT + c), NULL, NULL) < 0) {
        H5Pclose(p);
        return H5P_DEFAULT;
    }
    h5_xfer_cache[c] = p;
    return p;
}

/* Reads the distinct positions of the plan, in C order over
 * nuniq[0] x nuniq[1] x ..., into temp (elements of memtype).  Works in
 * batches of dim-0 blocks so that no file selection holds more than about
 * H5_READ_BLOCK_BUDGET hyperslab blocks. */
/* Variable-length strings: their heap ids checked before libhdf5 follows
 * them (h5_heap.h); 0 for other values, or when the file's bytes are not
 * at hand. */
static int strings_checked(const node *n, const h5_node *h, hid_t mspace, hid_t fspace,
                           hid_t dxpl, size_t nelem, cellar_error *err)
{
    const h5_heap_file *heap = file_heap(n);
    /* (A string field of a compound is read within its records, unchecked.) */
    if (!h->vlen || h->field || nelem == 0 || (heap->fd < 0 && !heap->rd))
        return 0;
    cellar_error local;
    cellar_error_clear(&local);
    int rc = h5_heap_check_dataset(h->obj, mspace, fspace, dxpl, nelem, heap, &local);
    if (rc == CELLAR_ENOMEM)
        return cellar_fail(err, rc, "out of memory reading '%s'", n->path);
    return rc ? cellar_fail(err, rc == CELLAR_EIO ? CELLAR_EIO : CELLAR_EFORMAT,
                            "cannot read the strings of '%s' safely: %s", n->path, local.detail)
              : 0;
}

static int read_planned(const node *n, const h5_node *h, const dim_plan *p, int ndim,
                        size_t es, hid_t dxpl, char *temp, cellar_error *err)
{
    int rc = 0;
    hid_t fspace = H5Dget_space(h->obj), mspace = H5I_INVALID_HID;
    if (fspace < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read '%s'", n->path);
    size_t inner = 1, inner_blocks = 1;
    for (int d = 1; d < ndim; d++) {
        inner *= (size_t)p[d].nuniq;
        inner_blocks = inner_blocks > SIZE_MAX / p[d].nblocks ? SIZE_MAX
                                                              : inner_blocks * p[d].nblocks;
    }
    size_t b0 = 0;
    while (b0 < p[0].nblocks) {
        size_t b1 = b0 + 1;
        while (b1 < p[0].nblocks && inner_blocks <= H5_READ_BLOCK_BUDGET / (b1 - b0 + 1))
            b1++;
        int64_t row0 = p[0].boff[b0];
        int64_t row1 = b1 < p[0].nblocks ? p[0].boff[b1] : p[0].nuniq;
        H5S_seloper_t op = H5S_SELECT_SET;
        for (size_t bi = b0; bi < b1; bi++) {
            size_t combo[NODE_MAX_DIMS] = {0};
            for (;;) {
                hsize_t start[NODE_MAX_DIMS], stride[NODE_MAX_DIMS], cnt[NODE_MAX_DIMS];
                start[0] = p[0].bstart[bi];
                stride[0] = p[0].bstride[bi];
                cnt[0] = p[0].bcount[bi];
                for (int d = 1; d < ndim; d++) {
                    start[d] = p[d].bstart[combo[d]];
                    stride[d] = p[d].bstride[combo[d]];
                    cnt[d] = p[d].bcount[combo[d]];
                }
                if (H5Sselect_hyperslab(fspace, op, start, stride, cnt, NULL) < 0) {
                    rc = h5_fail(err, CELLAR_EFORMAT, "cannot select in '%s'", n->path);
                    goto done;
                }
                op = H5S_SELECT_OR;
                int d = ndim - 1;
                while (d >= 1 && ++combo[d] == p[d].nblocks)
                    combo[d--] = 0;
                if (d < 1)
                    break;
            }
        }
        hsize_t nelem = (hsize_t)(row1 - row0) * inner;
        mspace = H5Screate_simple(1, &nelem, NULL);
        if (mspace < 0) {
            rc = h5_fail(err, CELLAR_EFORMAT, "cannot read '%s'", n->path);
            goto done;
        }
        rc = strings_checked(n, h, mspace, fspace, dxpl, (size_t)nelem, err);
        if (rc)
            goto done;
        if (H5Dread(h->obj, h->memtype, mspace, fspace, dxpl,
                    temp + (size_t)row0 * inner * es) < 0) {
            rc = h5_fail(err, CELLAR_EFORMAT, "reading '%s' failed", n->path);
            goto done;
        }
        H5Sclose(mspace);
        mspace = H5I_INVALID_HID;
        b0 = b1;
    }
done:
    if (mspace >= 0)
        H5Sclose(mspace);
    H5Sclose(fspace);
    return rc;
}

/* The r-th distinct position of a dimension. */
static int64_t plan_pos(const dim_plan *p, int64_t r)
{
    return p->uniq ? p->uniq[r] : (int64_t)(p->s_start + (hsize_t)r * p->s_stride);
}

/* Same result as read_planned, through one point selection listing the
 * distinct positions in C order (libhdf5 reads points in list order). */
static int read_points(const node *n, const h5_node *h, const dim_plan *p, int ndim,
                       size_t npoints, hid_t dxpl, char *temp, cellar_error *err)
{
    int rc = 0;
    hid_t fspace = H5I_INVALID_HID, mspace = H5I_INVALID_HID;
    hsize_t *coords = malloc(npoints * (size_t)ndim * sizeof *coords); /* bounded by caller */
    if (!coords)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", n->path);
    int64_t idx[NODE_MAX_DIMS] = {0};
    for (size_t k = 0; k < npoints; k++) {
        for (int d = 0; d < ndim; d++)
            coords[k * (size_t)ndim + (size_t)d] = (hsize_t)plan_pos(&p[d], idx[d]);
        for (int d = ndim - 1; d >= 0 && ++idx[d] == p[d].nuniq; d--)
            idx[d] = 0;
    }
    hsize_t total = npoints;
    fspace = H5Dget_space(h->obj);
    if (fspace < 0 || H5Sselect_elements(fspace, H5S_SELECT_SET, npoints, coords) < 0 ||
        (mspace = H5Screate_simple(1, &total, NULL)) < 0) {
        rc = h5_fail(err, CELLAR_EFORMAT, "cannot select in '%s'", n->path);
        goto done;
    }
    rc = strings_checked(n, h, mspace, fspace, dxpl, npoints, err);
    if (!rc && H5Dread(h->obj, h->memtype, mspace, fspace, dxpl, temp) < 0)
        rc = h5_fail(err, CELLAR_EFORMAT, "reading '%s' failed", n->path);
done:
    if (mspace >= 0)
        H5Sclose(mspace);
    if (fspace >= 0)
        H5Sclose(fspace);
    free(coords);
    return rc;
}

/* Reads the distinct positions of the plan into temp, choosing hyperslab
 * blocks (long runs) or points (short runs). */
static int read_unique(const node *n, const h5_node *h, const dim_plan *p, int ndim,
                       size_t es, size_t npoints, char *temp, cellar_error *err)
{
    size_t blocks = 1;
    for (int d = 0; d < ndim; d++)
        blocks = blocks > SIZE_MAX / p[d].nblocks ? SIZE_MAX : blocks * p[d].nblocks;
    hid_t dxpl = xfer_for(h, npoints);
    int rc;
    if (blocks > H5_READ_BLOCK_BUDGET && npoints / 8 <= blocks &&
        npoints <= H5_POINTS_MAX_BYTES / ((size_t)ndim * sizeof(hsize_t)))
        rc = read_points(n, h, p, ndim, npoints, dxpl, temp, err);
    else
        rc = read_planned(n, h, p, ndim, es, dxpl, temp, err);
    return rc;
}

/* Per output row (innermost dimension): out_i is the output index of its
 * first item, base the temp index of position 0 along the last dim. */
typedef void (*scatter_fn)(void *ctx, int64_t out_i, int64_t base, const dim_plan *last,
                           int64_t n_last);

/* Visits the output in C order over the requested counts. */
static void plan_scatter(const dim_plan *p, const dim_sel *sel, int ndim, scatter_fn fn,
                         void *ctx)
{
    int64_t tstride[NODE_MAX_DIMS], idx[NODE_MAX_DIMS] = {0};
    int last = ndim - 1;
    tstride[last] = 1;
    for (int d = last - 1; d >= 0; d--)
        tstride[d] = tstride[d + 1] * p[d + 1].nuniq;
    int64_t out_i = 0;
    for (;;) {
        int64_t base = 0;
        for (int d = 0; d < last; d++)
            base += (p[d].map ? p[d].map[idx[d]] : idx[d]) * tstride[d];
        fn(ctx, out_i, base, &p[last], sel[last].count);
        out_i += sel[last].count;
        int d = last - 1;
        while (d >= 0 && ++idx[d] == sel[d].count)
            idx[d--] = 0;
        if (d < 0)
            break;
    }
}

typedef struct copy_ctx {
    const char *temp;
    char *out;
    size_t es;
} copy_ctx;

static void copy_row(void *vctx, int64_t out_i, int64_t base, const dim_plan *last,
                     int64_t n_last)
{
    copy_ctx *c = vctx;
    char *o = c->out + (size_t)out_i * c->es;
    for (int64_t j = 0; j < n_last; j++) {
        int64_t src = base + (last->map ? last->map[j] : j);
        memcpy(o + (size_t)j * c->es, c->temp + (size_t)src * c->es, c->es);
    }
}

typedef struct str_ctx {
    const char *temp;
    char **out;
    arena *a;
    size_t size; /* fixed-length item size; 0 for vlen */
    H5T_str_t pad;
    int oom;
} str_ctx;

static void str_row(void *vctx, int64_t out_i, int64_t base, const dim_plan *last,
                    int64_t n_last)
{
    str_ctx *c = vctx;
    for (int64_t j = 0; j < n_last && !c->oom; j++) {
        int64_t src = base + (last->map ? last->map[j] : j);
        char *s;
        if (c->size) {
            const char *item = c->temp + (size_t)src * c->size;
            s = arena_utf8(c->a, item, fixed_str_len(item, c->size, c->pad));
        } else {
            const char *item = ((char *const *)c->temp)[src];
            s = arena_utf8(c->a, item ? item : "", item ? strlen(item) : 0);
        }
        if (!s)
            c->oom = 1;
        c->out[out_i + j] = s;
    }
}

typedef struct read_job {
    dim_plan plan[NODE_MAX_DIMS];
    int ndim;
    size_t nuniq_total; /* elements in temp */
    int identity;       /* temp is already the requested order */
} read_job;

static void read_job_free(read_job *j)
{
    for (int d = 0; d < j->ndim; d++)
        dim_plan_free(&j->plan[d]);
}

static int read_job_init(read_job *j, const node *n, const dim_sel *sel, size_t es,
                         cellar_error *err)
{
    memset(j, 0, sizeof *j);
    if (n->info.ndim < 0)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' is empty (a NULL dataspace): no data",
                           n->path);
    j->identity = 1;
    j->nuniq_total = 1;
    for (int d = 0; d < n->info.ndim; d++) {
        int rc = plan_dim(&sel[d], n->info.shape[d], &j->plan[d], n->path, err);
        j->ndim = d + 1;
        if (rc)
            return rc;
        j->identity &= j->plan[d].map == NULL;
        j->nuniq_total *= (size_t)j->plan[d].nuniq; /* <= product of counts */
    }
    size_t bytes;
    if (mul_size(j->nuniq_total, es, &bytes))
        return cellar_fail(err, CELLAR_ETOOBIG, "selection of '%s' too large", n->path);
    return 0;
}

/* ---------------------------------------------------------- direct reads */

/* Integer types with every bit used: the stored bytes are the value. */
static int direct_int_ok(hid_t t, size_t size)
{
    return H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == size &&
           H5Tget_precision(t) == 8 * size && H5Tget_offset(t) == 0;
}

/* IEEE 754 binary16/32/64 with no padding. */
static int direct_float_ok(hid_t t, size_t size)
{
    size_t spos, epos, esize, mpos, msize;
    if (H5Tget_precision(t) != 8 * size || H5Tget_offset(t) != 0 ||
        H5Tget_norm(t) != H5T_NORM_IMPLIED ||
        H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0 || mpos != 0)
        return 0;
    size_t want_e = size == 2 ? 5 : size == 4 ? 8 : 11;
    size_t bias = ((size_t)1 << (want_e - 1)) - 1;
    return spos == 8 * size - 1 && esize == want_e && epos == msize && msize == spos - esize &&
           H5Tget_ebias(t) == bias;
}

/* Whether the stored bytes of type ftype are the values of dtype k, up to
 * byte order; *swap when that order is not the native one. */
static int direct_type_ok(hid_t ftype, dtype_kind k, int *swap)
{
    size_t size = dtype_size(k);
    H5T_class_t cls = H5Tget_class(ftype);
    H5T_order_t order = H5T_ORDER_ERROR;
    int ok = 0;
    if (!size || H5Tget_size(ftype) != size)
        return 0;
    if (cls == H5T_ENUM && k == DT_BOOL) {
        /* 0 is false, anything else true, as after libhdf5's conversion */
        hid_t base = H5Tget_super(ftype);
        ok = base >= 0 && direct_int_ok(base, size);
        if (base >= 0)
            H5Tclose(base);
        order = H5T_ORDER_LE;
    } else if (cls == H5T_INTEGER && dtype_is_integer(k)) {
        ok = direct_int_ok(ftype, size);
        order = H5Tget_order(ftype);
    } else if (cls == H5T_FLOAT && dtype_is_float(k)) {
        ok = direct_float_ok(ftype, size);
        order = H5Tget_order(ftype);
    }
    if (!ok)
        return 0;
    if (size == 1) {
        *swap = 0;
        return 1;
    }
    H5T_order_t native = H5Tget_order(H5T_NATIVE_INT);
    if (order != H5T_ORDER_LE && order != H5T_ORDER_BE)
        return 0;
    *swap = order != native;
    return 1;
}

/* The filter pipeline of dcpl, when direct reads know every filter. */
static int direct_filters(hid_t dcpl, size_t elem_size, h5d_layout *l)
{
    int nf = H5Pget_nfilters(dcpl);
    if (nf < 0 || nf > H5D_MAX_FILTERS)
        return -1;
    l->nfilters = nf;
    for (int i = 0; i < nf; i++) {
        unsigned flags = 0, config = 0, cd[8] = {0};
        size_t ncd = sizeof cd / sizeof cd[0];
        char name[64];
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, sizeof name, name,
                                         &config);
        if (id != H5Z_FILTER_DEFLATE && id != H5Z_FILTER_SHUFFLE && id != H5Z_FILTER_FLETCHER32 &&
            id != H5D_FILTER_LZF)
            return -1;
        l->filters[i].id = (int)id;
        if (id == H5Z_FILTER_SHUFFLE)
            l->filters[i].shuffle_size = ncd >= 1 && cd[0] ? cd[0] : elem_size;
    }
    return 0;
}

/* Lists the allocated chunks of a small chunked dataset into p's table;
 * nonzero (p unusable) when anything is off. */
/* The table of a chunked dataset of up to H5_DIRECT_COORD_TABLE_MAX chunks
 * in its grid, each looked up by the coordinates of its first element
 * (chunks never written are left out: they read as the fill value);
 * nonzero when anything is off. */
static int direct_table_by_coord(const h5_node *h, const h5_node *root, int ndim, h5d_plan *p,
                                 cellar_error *err)
{
    const h5d_layout *l = h5d_plan_layout(p);
    uint64_t grid = 1;
    for (int d = 0; d < ndim; d++) {
        uint64_t g = (uint64_t)((l->shape[d] + l->chunk[d] - 1) / l->chunk[d]);
        if (g == 0)
            return h5d_plan_finish_table(p, err);
        if (g > H5_DIRECT_COORD_TABLE_MAX || grid * g > H5_DIRECT_COORD_TABLE_MAX)
            return -1;
        grid *= g;
    }
    hsize_t off[NODE_MAX_DIMS] = {0};
    for (uint64_t i = 0; i < grid; i++) {
        unsigned mask = 0;
        haddr_t addr = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info_by_coord(h->obj, off, &mask, &addr, &size) < 0)
            return -1;
        if (addr != HADDR_UNDEF && size > 0) {
            int64_t start[NODE_MAX_DIMS];
            for (int d = 0; d < ndim; d++)
                start[d] = (int64_t)off[d];
            if (addr > UINT64_MAX - root->chunk_base ||
                h5d_plan_add_chunk(p, start, addr + root->chunk_base, size, mask, err))
                return -1;
        }
        for (int d = ndim - 1; d >= 0; d--) {
            off[d] += (hsize_t)l->chunk[d];
            if (off[d] < (hsize_t)l->shape[d])
                break;
            off[d] = 0;
        }
    }
    return h5d_plan_finish_table(p, err);
}

static int direct_table(const h5_node *h, const h5_node *root, int ndim, h5d_plan *p)
{
    cellar_error err;
    cellar_error_clear(&err);
    hid_t space = H5Dget_space(h->obj);
    hsize_t nch = 0;
    int rc = -1;
    if (space < 0 || H5Dget_num_chunks(h->obj, space, &nch) < 0)
        goto done;
    if (nch > H5_DIRECT_TABLE_MAX) {
        rc = direct_table_by_coord(h, root, ndim, p, &err);
        goto done;
    }
    for (hsize_t i = 0; i < nch; i++) {
        hsize_t off[NODE_MAX_DIMS];
        unsigned mask = 0;
        haddr_t addr = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info(h->obj, space, i, off, &mask, &addr, &size) < 0 ||
            addr == HADDR_UNDEF || addr > UINT64_MAX - root->chunk_base)
            goto done;
        int64_t start[NODE_MAX_DIMS];
        for (int d = 0; d < ndim; d++) {
            if (off[d] > (hsize_t)INT64_MAX)
                goto done;
            start[d] = (int64_t)off[d];
        }
        if (h5d_plan_add_chunk(p, start, addr + root->chunk_base, size, mask, &err))
            goto done;
    }
    rc = h5d_plan_finish_table(p, &err);
done:
    if (space >= 0)
        H5Sclose(space);
    return rc;
}

/* Fills l with where the dataset's bytes are; nonzero when it does not
 * qualify for direct reads. */
static int direct_layout(const node *n, const h5_node *h, const h5_node *root, h5d_layout *l)
{
    memset(l, 0, sizeof *l);
    int rc = -1;
    if (n->info.ndim < 1 || !direct_type_ok(h->ftype, n->info.dtype, &l->swap))
        return -1;
    l->ndim = n->info.ndim;
    memcpy(l->shape, n->info.shape, sizeof l->shape);
    l->elem_size = dtype_size(n->info.dtype);
    l->file_size = root->file_size;
    hid_t dcpl = H5Dget_create_plist(h->obj);
    if (dcpl < 0)
        return -1;
    H5D_layout_t layout = H5Pget_layout(dcpl);
    if (H5Pget_external_count(dcpl) != 0)
        goto done;
    if (layout == H5D_CONTIGUOUS) {
        haddr_t addr = H5Dget_offset(h->obj);
        if (addr == HADDR_UNDEF || H5Pget_nfilters(dcpl) != 0)
            goto done;
        l->contiguous = 1;
        l->addr = addr;
        rc = 0;
    } else if (layout == H5D_CHUNKED) {
        hsize_t cdims[NODE_MAX_DIMS];
        unsigned opts = 0;
        H5D_fill_time_t fill_time = H5D_FILL_TIME_IFSET;
        if (H5Pget_chunk(dcpl, NODE_MAX_DIMS, cdims) != l->ndim ||
            H5Pget_chunk_opts(dcpl, &opts) < 0 || opts != 0 ||
            H5Pget_fill_time(dcpl, &fill_time) < 0 || fill_time == H5D_FILL_TIME_NEVER ||
            direct_filters(dcpl, l->elem_size, l) ||
            H5Pget_fill_value(dcpl, h->memtype, l->fill) < 0)
            goto done;
        for (int d = 0; d < l->ndim; d++) {
            if (cdims[d] == 0 || cdims[d] > (hsize_t)INT64_MAX)
                goto done;
            l->chunk[d] = (int64_t)cdims[d];
        }
        rc = 0;
    }
done:
    H5Pclose(dcpl);
    return rc;
}

/* Makes the plan of a dataset and publishes DIRECT_READY, or publishes
 * DIRECT_NONE.  Under h->dlock. */
static void direct_plan_make(const node *n, h5_node *h)
{
    const h5_node *root = n->root->impl;
    h5d_layout l;
    h5d_plan *p = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    if ((root->fd < 0 && !root->reader.read) || direct_layout(n, h, root, &l) ||
        h5d_plan_new(&l, &p, &err)) {
        atomic_store_explicit(&h->dstate, DIRECT_NONE, memory_order_release);
        return;
    }
    if (!l.contiguous && atomic_load(&h5_direct_mode) != 2 && direct_table(h, root, l.ndim, p)) {
        /* No table after all (too many chunks, or odd ones): start again
         * and fetch chunks through libhdf5. */
        h5d_plan_free(p);
        p = NULL;
        if (h5d_plan_new(&l, &p, &err)) {
            atomic_store_explicit(&h->dstate, DIRECT_NONE, memory_order_release);
            return;
        }
    }
    h5_node *rh = n->root->impl;
    uint64_t version = atomic_load(&rh->cache_id), none = 0;
    if (!version && !atomic_compare_exchange_strong(&rh->cache_id, &none, version = chunk_cache_new_id()))
        version = none; /* another plan gave it first */
    h5d_plan_cache_as(p, chunk_cache_of(CHUNK_CACHE_HDF5), version, chunk_cache_new_id());
    h->plan = p;
    atomic_store_explicit(&h->dstate, DIRECT_READY, memory_order_release);
}

/* The plan of a dataset node (made on first use, under dlock; read without
 * a lock once published), or NULL. */
static const h5d_plan *direct_plan_get(const node *n, h5_node *h)
{
    if (!h->dlock_init || n->info.type != NODE_ARRAY)
        return NULL;
    int state = atomic_load_explicit(&h->dstate, memory_order_acquire);
    if (state == DIRECT_UNPLANNED) {
        pthread_mutex_lock(&h->dlock);
        if (atomic_load_explicit(&h->dstate, memory_order_relaxed) == DIRECT_UNPLANNED) {
            h5_quiet();
            direct_plan_make(n, h);
        }
        state = atomic_load_explicit(&h->dstate, memory_order_relaxed);
        pthread_mutex_unlock(&h->dlock);
    }
    return state == DIRECT_READY ? h->plan : NULL;
}

/* libhdf5 1.10 fails H5Dget_chunk_storage_size for a chunk never written:
 * such chunks (or any it cannot locate) are read through libhdf5 itself,
 * without type conversion, and handed back as one unfiltered chunk. */
static int direct_fetch_unallocated(const node *n, const h5_node *h, const hsize_t *off,
                                    uint8_t **buf, size_t *size, uint32_t *mask,
                                    cellar_error *err)
{
    int rc = 0, ndim = n->info.ndim;
    hid_t dcpl = H5Dget_create_plist(h->obj), fspace = H5I_INVALID_HID,
          mspace = H5I_INVALID_HID;
    hsize_t cdims[NODE_MAX_DIMS], count[NODE_MAX_DIMS], zero[NODE_MAX_DIMS] = {0};
    size_t bytes = dtype_size(n->info.dtype);
    uint8_t *b = NULL;
    if (dcpl < 0 || H5Pget_chunk(dcpl, NODE_MAX_DIMS, cdims) != ndim) {
        rc = h5_fail(err, CELLAR_EFORMAT, "cannot read the chunks of '%s'", n->path);
        goto done;
    }
    for (int d = 0; d < ndim; d++) {
        hsize_t left = (hsize_t)n->info.shape[d] - off[d];
        count[d] = cdims[d] < left ? cdims[d] : left;
        bytes *= cdims[d]; /* bounded by the plan's chunk size check */
    }
    b = calloc(1, bytes); /* the padding of an edge chunk stays zero */
    fspace = H5Dget_space(h->obj);
    mspace = H5Screate_simple(ndim, cdims, NULL);
    if (!b) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", n->path);
        goto done;
    }
    if (fspace < 0 || mspace < 0 ||
        H5Sselect_hyperslab(fspace, H5S_SELECT_SET, off, NULL, count, NULL) < 0 ||
        H5Sselect_hyperslab(mspace, H5S_SELECT_SET, zero, NULL, count, NULL) < 0 ||
        H5Dread(h->obj, h->ftype, mspace, fspace, H5P_DEFAULT, b) < 0) {
        rc = h5_fail(err, CELLAR_EFORMAT, "reading '%s' failed", n->path);
        goto done;
    }
    *buf = b;
    b = NULL;
    *size = bytes;
    *mask = UINT32_MAX; /* no filter to undo */
done:
    free(b);
    if (mspace >= 0)
        H5Sclose(mspace);
    if (fspace >= 0)
        H5Sclose(fspace);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    return rc;
}

/* h5d_fetch_fn: the stored bytes of one chunk, through libhdf5. */
static int direct_fetch(void *ctx, const int64_t *start, size_t max_size, uint8_t **buf,
                        size_t *size, uint32_t *mask, cellar_error *err)
{
    const node *n = ctx;
    const h5_node *h = n->impl;
    h5_quiet();
    *buf = NULL;
    *size = 0;
    *mask = 0;
    hsize_t off[NODE_MAX_DIMS];
    for (int d = 0; d < n->info.ndim; d++)
        off[d] = (hsize_t)start[d];
    hsize_t stored = 0;
    if (H5Dget_chunk_storage_size(h->obj, off, &stored) < 0 || stored == 0)
        return direct_fetch_unallocated(n, h, off, buf, size, mask, err);
    if (stored > max_size)
        return cellar_fail(err, CELLAR_EFORMAT, "a chunk of '%s' has an impossible size",
                           n->path);
    uint8_t *b = malloc((size_t)stored);
    if (!b)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", n->path);
    uint32_t filters = 0;
    if (H5Dread_chunk(h->obj, H5P_DEFAULT, off, &filters, b) < 0) {
        free(b);
        return h5_fail(err, CELLAR_EFORMAT, "reading a chunk of '%s' failed", n->path);
    }
    *buf = b;
    *size = (size_t)stored;
    *mask = filters;
    return 0;
}

void h5_set_direct_reads(int mode)
{
    atomic_store(&h5_direct_mode, mode);
}

int h5_direct_kind(node *n)
{
    if (n->ops != &h5_ops || atomic_load(&h5_direct_mode) == 0)
        return 0;
    const h5d_plan *p = direct_plan_get(n, n->impl);
    if (!p)
        return 0;
    return h5d_plan_is_direct(p) ? 1 : 2;
}

/* Reads through the plan, when there is one and direct reads are on;
 * 1 when not taken. */
static int direct_read(node *n, h5_node *h, const dim_sel *sel, void *out, size_t out_bytes,
                       cellar_error *err)
{
    if (atomic_load(&h5_direct_mode) == 0 || n->info.ndim < 1)
        return 1;
    const h5d_plan *p = direct_plan_get(n, h);
    if (!p)
        return 1;
    const h5_node *root = n->root->impl;
    return h5d_read_from(p, root->fd, root->reader.read ? &root->reader : NULL, direct_fetch, n,
                         sel, out, out_bytes, n->path, err);
}

/* node_file_extent: a contiguous, unfiltered dataset in native byte order,
 * through its direct-read plan (so only what direct reads trust). */
static int h5_file_extent(node *n, int *fd, uint64_t *offset, uint64_t *length)
{
    if (atomic_load(&h5_direct_mode) == 0 || n->info.ndim < 1)
        return 1;
    h5_quiet();
    const h5d_plan *p = direct_plan_get(n, n->impl);
    const h5_node *root = n->root->impl;
    if (!p || root->fd < 0 || h5d_plan_contiguous_extent(p, offset, length))
        return 1;
    *fd = fcntl(root->fd, F_DUPFD_CLOEXEC, 0);
    return *fd < 0 ? 1 : 0;
}

/* Reads a selection of a field that is itself an array (a member
 * float32[50] of a 1-D compound dataset): the member of each selected
 * record through libhdf5, then the selected positions within it. */
static int field_array_read(const node *n, const h5_node *h, const dim_sel *sel, char *out,
                            cellar_error *err)
{
    int ndim = n->info.ndim;
    size_t es = dtype_size(n->info.dtype), row_bytes, bytes;
    for (int d = 1; d < ndim; d++)
        for (int64_t k = 0; k < sel[d].count; k++) {
            int64_t v = dim_sel_at(&sel[d], k);
            if (v < 0 || v >= n->info.shape[d])
                return cellar_fail(err, CELLAR_ERANGE, "selection outside '%s'", n->path);
        }
    if (mul_size(h->field_inner, es, &row_bytes))
        return cellar_fail(err, CELLAR_ETOOBIG, "records of '%s' too large", n->path);
    dim_plan p0;
    int rc = plan_dim(&sel[0], n->info.shape[0], &p0, n->path, err);
    char *temp = NULL;
    if (rc)
        goto done;
    if (mul_size((size_t)p0.nuniq, row_bytes, &bytes)) {
        rc = cellar_fail(err, CELLAR_ETOOBIG, "selection of '%s' too large", n->path);
        goto done;
    }
    temp = malloc(bytes ? bytes : 1);
    if (!temp) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", n->path);
        goto done;
    }
    rc = read_unique(n, h, &p0, 1, row_bytes, (size_t)p0.nuniq, temp, err);
    if (rc)
        goto done;
    int64_t stride[NODE_MAX_DIMS];
    stride[ndim - 1] = 1;
    for (int d = ndim - 2; d >= 1; d--)
        stride[d] = stride[d + 1] * n->info.shape[d + 1];
    size_t o = 0;
    for (int64_t i = 0; i < sel[0].count; i++) {
        const char *rec = temp + (size_t)(p0.map ? p0.map[i] : i) * row_bytes;
        int64_t idx[NODE_MAX_DIMS] = {0};
        for (;;) {
            int64_t off = 0;
            for (int d = 1; d < ndim; d++)
                off += dim_sel_at(&sel[d], idx[d]) * stride[d];
            memcpy(out + o * es, rec + (size_t)off * es, es);
            o++;
            int d = ndim - 1;
            while (d >= 1 && ++idx[d] == sel[d].count)
                idx[d--] = 0;
            if (d < 1)
                break;
        }
    }
done:
    free(temp);
    dim_plan_free(&p0);
    return rc;
}

/* ---------------------------------------------------- the zarr view */

/* numpy's typestr of values of dtype k stored in order big (0/1). */
static void storage_typestr(dtype_kind k, int big, char out[8])
{
    size_t size = dtype_size(k);
    char kind = k == DT_BOOL ? 'b' : dtype_is_float(k) ? 'f' : dtype_is_signed(k) ? 'i' : 'u';
    snprintf(out, 8, "%c%c%zu", size == 1 ? '|' : big ? '>' : '<', kind, size);
}

/* deflate's level in dcpl's pipeline, -1 when it has none. */
static int deflate_level(hid_t dcpl)
{
    int nf = H5Pget_nfilters(dcpl);
    for (int i = 0; i < nf && i < H5D_MAX_FILTERS; i++) {
        unsigned flags = 0, config = 0, cd[8] = {0};
        size_t ncd = sizeof cd / sizeof cd[0];
        char name[64];
        if (H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, sizeof name, name, &config) ==
            H5Z_FILTER_DEFLATE)
            return ncd >= 1 && cd[0] <= 9 ? (int)cd[0] : 6;
    }
    return -1;
}

int h5_zarr_storage(node *n, h5_storage *out)
{
    memset(out, 0, sizeof *out);
    out->deflate_level = -1;
    out->fd = -1;
    if (n->ops != &h5_ops || n->info.type != NODE_ARRAY || ((h5_node *)n->impl)->field)
        return -1; /* a field of a compound dataset is no dataset of its own */
    h5_quiet();
    h5_node *h = n->impl;
    hid_t dcpl = H5Dget_create_plist(h->obj);
    if (dcpl < 0)
        return -1;
    hsize_t cdims[NODE_MAX_DIMS];
    if (n->info.ndim >= 1 && H5Pget_layout(dcpl) == H5D_CHUNKED &&
        H5Pget_chunk(dcpl, NODE_MAX_DIMS, cdims) == n->info.ndim) {
        out->chunked = 1;
        for (int d = 0; d < n->info.ndim; d++)
            out->chunk[d] = cdims[d] >= 1 && cdims[d] <= (hsize_t)INT64_MAX ? (int64_t)cdims[d] : 1;
    }
    if (!dtype_is_numeric(n->info.dtype)) {
        H5Pclose(dcpl);
        return 0;
    }
    if (h->memtype >= 0 && H5Tget_size(h->memtype) <= sizeof out->fill &&
        H5Pget_fill_value(dcpl, h->memtype, out->fill) >= 0)
        out->has_fill = 1;
    const h5d_plan *p = atomic_load(&h5_direct_mode) ? direct_plan_get(n, h) : NULL;
    const h5_node *root = n->root->impl;
    if (p && root->fd >= 0) {
        const h5d_layout *l = h5d_plan_layout(p);
        int native_big = H5Tget_order(H5T_NATIVE_INT) == H5T_ORDER_BE;
        storage_typestr(n->info.dtype, l->swap ? !native_big : native_big, out->typestr);
        if (l->contiguous) {
            out->kind = H5_STORE_CONTIGUOUS;
            out->offset = l->addr;
            out->fd = root->fd;
        } else if (l->nfilters == 0 ||
                   (l->nfilters == 1 && l->filters[0].id == H5D_FILTER_DEFLATE)) {
            out->kind = H5_STORE_CHUNKS;
            out->deflate_level = l->nfilters ? deflate_level(dcpl) : -1;
        } else {
            out->kind = H5_STORE_DECODED;
        }
    }
    H5Pclose(dcpl);
    return 0;
}

const char *h5_type_class_name(node *n)
{
    if (n->ops != &h5_ops || n->info.type != NODE_ARRAY)
        return "unknown";
    const h5_node *h = n->impl;
    h5_quiet();
    switch (h->ftype >= 0 ? H5Tget_class(h->ftype) : H5T_NO_CLASS) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_TIME: return "time";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "vlen";
    case H5T_ARRAY: return "array";
    default: return "unknown";
    }
}

int h5_zarr_chunk(node *n, const int64_t *cidx, h5_chunk_bytes *out, cellar_error *err)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    /* Only the plan (no call into libhdf5 once it is made): a chunk of a
     * table is pread and sent without taking libhdf5's lock. */
    const h5d_plan *p = n->ops == &h5_ops && !((h5_node *)n->impl)->field &&
                                atomic_load(&h5_direct_mode)
                            ? direct_plan_get(n, n->impl)
                            : NULL;
    const h5_node *root = n->root->impl;
    const h5d_layout *l = p ? h5d_plan_layout(p) : NULL;
    if (!l || l->contiguous || root->fd < 0)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' has no stored chunks", n->path);
    int as_stored = l->nfilters == 0 || (l->nfilters == 1 && l->filters[0].id == H5D_FILTER_DEFLATE);
    h5d_stored s;
    int rc = h5d_chunk_stored(p, direct_fetch, n, cidx, &s, n->path, err);
    if (rc || !s.allocated)
        return rc;
    out->allocated = 1;
    if (as_stored) {
        uint32_t all = l->nfilters ? (uint32_t)((1u << l->nfilters) - 1) : 0;
        out->raw = (s.mask & all) == all;
        out->size = s.size;
        if (s.buf) {
            out->data = s.buf;
        } else {
            out->fd = root->fd;
            out->offset = s.addr;
        }
        return 0;
    }
    size_t cb = h5d_plan_chunk_bytes(p);
    out->data = malloc(cb ? cb : 1);
    if (!out->data)
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", n->path);
    else
        rc = h5d_chunk_decode(p, root->fd, &s, out->data, n->path, err);
    free(s.buf);
    if (rc) {
        free(out->data);
        out->data = NULL;
        out->allocated = 0;
        return rc;
    }
    out->size = cb;
    return 0;
}

enum { SO_NONE = 1, SO_CHECK = 2 };

/* The chunks of dataset n that a read of j touches (those that meet the box
 * around its selection), checked with h5d_scaleoffset_ok before libhdf5
 * decodes them, when the last filter of n's pipeline but Fletcher-32's is
 * scale-offset (else the stored bytes are not that filter's: unchecked).
 * CELLAR_EFORMAT for a chunk that fails, CELLAR_ENOMEM. */

static int scaleoffset_check(const node *n, h5_node *h, const read_job *j, cellar_error *err)
{
    if (atomic_load(&h->so_state) == SO_NONE)
        return 0;
    hid_t dcpl = H5Dget_create_plist(h->obj);
    if (dcpl < 0)
        return 0;
    int nf = H5Pget_nfilters(dcpl), found = 0, checkable = 0, so_at = 0;
    size_t trailer = 0;
    for (int i = 0; i < nf; i++) {
        unsigned flags = 0;
        size_t ncd = 0;
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, NULL, 0, NULL, NULL);
        if (id == H5Z_FILTER_SCALEOFFSET) {
            found = checkable = 1;
            so_at = i;
            trailer = 0;
        } else if (found && id == H5Z_FILTER_FLETCHER32) {
            trailer += 4;
        } else if (found) {
            checkable = 0;
        }
    }
    hsize_t cdims[NODE_MAX_DIMS];
    int ok = checkable && so_at < 32 && j->ndim > 0 && H5Pget_layout(dcpl) == H5D_CHUNKED &&
             H5Pget_chunk(dcpl, NODE_MAX_DIMS, cdims) == j->ndim;
    H5Pclose(dcpl);
    size_t size = H5Tget_size(h->ftype);
    atomic_store(&h->so_state, ok && size ? SO_CHECK : SO_NONE);
    if (!ok || size == 0)
        return 0;
    int64_t lo[NODE_MAX_DIMS], hi[NODE_MAX_DIMS], at[NODE_MAX_DIMS];
    uint64_t n_items = 1;
    for (int d = 0; d < j->ndim; d++) {
        const dim_plan *p = &j->plan[d];
        if (p->nuniq == 0 || p->nblocks == 0 || cdims[d] == 0)
            return 0;
        lo[d] = INT64_MAX;
        hi[d] = -1;
        for (size_t b = 0; b < p->nblocks; b++) {
            int64_t first = (int64_t)p->bstart[b];
            int64_t steps = p->bcount[b] ? (int64_t)(p->bcount[b] - 1) : 0;
            int64_t last = first + steps * (int64_t)p->bstride[b];
            lo[d] = first < lo[d] ? first : lo[d];
            hi[d] = last > hi[d] ? last : hi[d];
        }
        lo[d] /= (int64_t)cdims[d];
        hi[d] /= (int64_t)cdims[d];
        at[d] = lo[d];
        if (n_items > UINT64_MAX / cdims[d])
            return cellar_fail(err, CELLAR_EFORMAT, "the chunks of '%s' are impossibly large",
                               n->path);
        n_items *= cdims[d];
    }
    if (n_items > (UINT64_MAX - 64) / size)
        return cellar_fail(err, CELLAR_EFORMAT, "the chunks of '%s' are impossibly large",
                           n->path);
    uint64_t most = 21 + n_items * size + trailer; /* what the filter writes at most */
    uint8_t *b = NULL;
    int rc = 0;
    for (;;) {
        hsize_t off[NODE_MAX_DIMS];
        for (int d = 0; d < j->ndim; d++)
            off[d] = (hsize_t)at[d] * cdims[d];
        hsize_t stored = 0;
        uint32_t mask = 0;
        if (H5Dget_chunk_storage_size(h->obj, off, &stored) >= 0 && stored > 0) {
            if (stored > most || stored < trailer) {
                rc = cellar_fail(err, CELLAR_EFORMAT,
                                 "a scale-offset chunk of '%s' has an impossible size", n->path);
                break;
            }
            free(b);
            b = malloc((size_t)stored);
            if (!b) {
                rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", n->path);
                break;
            }
            if (H5Dread_chunk(h->obj, H5P_DEFAULT, off, &mask, b) < 0) {
                rc = h5_fail(err, CELLAR_EFORMAT, "reading a chunk of '%s' failed", n->path);
                break;
            }
            /* a chunk whose filter mask says scale-offset was skipped holds the values */
            if (!(mask & (1u << so_at)) &&
                !h5d_scaleoffset_ok(b, (size_t)(stored - trailer), n_items, size)) {
                rc = cellar_fail(err, CELLAR_EFORMAT,
                                 "a chunk of '%s' is corrupt: its scale-offset header does not "
                                 "match its bytes", n->path);
                break;
            }
        }
        int d = j->ndim - 1;
        while (d >= 0 && at[d] == hi[d]) {
            at[d] = lo[d];
            d--;
        }
        if (d < 0)
            break;
        at[d]++;
    }
    free(b);
    return rc;
}

static int h5_read(node *n, const dim_sel *sel, void *out, size_t out_bytes, cellar_error *err)
{
    h5_quiet();
    h5_node *h = n->impl;
    size_t es = dtype_size(n->info.dtype);
    char *temp = NULL;
    read_job j;
    memset(&j, 0, sizeof j);
    int rc = h->field_inner ? field_array_read(n, h, sel, out, err)
                            : direct_read(n, h, sel, out, out_bytes, err);
    if (rc <= 0)
        goto normalize;
    rc = read_job_init(&j, n, sel, es, err);
    if (!rc)
        rc = scaleoffset_check(n, h, &j, err);
    if (rc)
        goto done;
    if (j.ndim == 0) {
        hid_t dxpl = xfer_for(h, 1);
        if (H5Dread(h->obj, h->memtype, H5S_ALL, H5S_ALL, dxpl, out) < 0)
            rc = h5_fail(err, CELLAR_EFORMAT, "reading '%s' failed", n->path);
    } else {
        temp = j.identity ? out : malloc(j.nuniq_total * es);
        if (!temp) {
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", n->path);
            goto done;
        }
        rc = read_unique(n, h, j.plan, j.ndim, es, j.nuniq_total, temp, err);
        if (!rc && !j.identity) {
            copy_ctx c = {.temp = temp, .out = out, .es = es};
            plan_scatter(j.plan, sel, j.ndim, copy_row, &c);
        }
    }
normalize:
    if (!rc && n->info.dtype == DT_BOOL) {
        unsigned char *b = out;
        for (size_t i = 0; i < out_bytes; i++)
            b[i] = b[i] != 0;
    }
done:
    if (temp != out)
        free(temp);
    read_job_free(&j);
    return rc;
}

static int h5_read_strings(node *n, const dim_sel *sel, arena *a, char **out,
                           cellar_error *err)
{
    h5_quiet();
    h5_node *h = n->impl;
    size_t es = h->vlen ? sizeof(char *) : n->info.string_size;
    char *temp = NULL;
    read_job j;
    int rc = read_job_init(&j, n, sel, es, err);
    if (rc)
        goto done;
    temp = calloc(j.nuniq_total, es);
    if (!temp) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", n->path);
        goto done;
    }
    if (j.ndim == 0) {
        hid_t dxpl = xfer_for(h, 1);
        rc = strings_checked(n, h, H5S_ALL, H5S_ALL, dxpl, 1, err);
        if (!rc && H5Dread(h->obj, h->memtype, H5S_ALL, H5S_ALL, dxpl, temp) < 0)
            rc = h5_fail(err, CELLAR_EFORMAT, "reading '%s' failed", n->path);
    } else {
        rc = read_unique(n, h, j.plan, j.ndim, es, j.nuniq_total, temp, err);
    }
    if (!rc) {
        str_ctx c = {.temp = temp, .out = out, .a = a, .size = h->vlen ? 0 : es,
                     .pad = h->strpad};
        if (j.ndim == 0) {
            dim_plan one = {.nuniq = 1};
            str_row(&c, 0, 0, &one, 1);
        } else {
            plan_scatter(j.plan, sel, j.ndim, str_row, &c);
        }
        if (c.oom)
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory reading '%s'", n->path);
    }
    if (h->vlen) {
        /* temp was zeroed, so this is safe after a partial read too. */
        hsize_t total = j.nuniq_total;
        hid_t mspace = H5Screate_simple(1, &total, NULL);
        if (mspace >= 0) {
            H5Dvlen_reclaim(h->memtype, mspace, H5P_DEFAULT, temp);
            H5Sclose(mspace);
        }
    }
done:
    free(temp);
    read_job_free(&j);
    return rc;
}

/* --------------------------------------------------------- open / close */

static void h5_destroy(node *n)
{
    h5_node *h = n->impl;
    if (!h)
        return;
    if (h->own_memtype && h->memtype >= 0)
        H5Tclose(h->memtype);
    if (h->ftype >= 0)
        H5Tclose(h->ftype);
    if (h->obj >= 0)
        H5Oclose(h->obj);
    if (h->file >= 0)
        H5Fclose(h->file);
    if (h->fd >= 0)
        close(h->fd);
    free(h->file_path);
    chunk_cache_drop_store(chunk_cache_of(CHUNK_CACHE_HDF5), atomic_load(&h->cache_id));
    h5d_plan_free(h->plan);
    if (h->dlock_init)
        pthread_mutex_destroy(&h->dlock);
    free(h);
    n->impl = NULL;
}

/* The string's bytes straight from the file (storage/hdf5/h5_stream.c),
 * which reopens the file by its path. */
static int h5_stream_string(node *n, size_t piece, node_string_sink sink, void *ctx,
                            cellar_error *err)
{
    const h5_node *root = n->root->impl, *h = n->impl;
    if (!root || !root->file_path || h->field || h->foreign)
        return cellar_fail(err, CELLAR_EINVAL, "'%s' cannot be streamed", n->path);
    return h5_stream_vlen_string(root->file_path, n->path, h5_link_access(), piece, sink, ctx,
                                 err);
}

void h5_library_init(void)
{
    const char *direct = getenv("CELLAR_H5_DIRECT");
    if (direct && strcmp(direct, "0") == 0)
        h5_set_direct_reads(0);
    /* libhdf5 would look for other files in these before the places
     * storage/ext_targets.c resolved them in. */
    unsetenv("HDF5_EXT_PREFIX");
    unsetenv("HDF5_EXTFILE_PREFIX");
    unsetenv("HDF5_VDS_PREFIX");
    /* The files libhdf5 opens for us through external links and virtual
     * datasets take their access properties from the file naming them,
     * but not its "no file locks": a server must not stop writers. */
    setenv("HDF5_USE_FILE_LOCKING", "FALSE", 1);
    H5open();
    h5_vfd_init();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    h5_thread_quiet = 1;
}

/* Our own descriptor of the very file libhdf5 opened (so a file replaced
 * meanwhile cannot be mixed in), for direct reads; h->fd stays -1 when the
 * file is not on libhdf5's default (sec2) driver. */
static void direct_file_open(h5_node *h)
{
    if (h->fd >= 0)
        return;
    hid_t fapl = H5Fget_access_plist(h->file);
    hid_t fcpl = H5Fget_create_plist(h->file);
    int *handle = NULL;
    hsize_t userblock = 0;
    struct stat st;
    if (fapl < 0 || fcpl < 0 || H5Pget_driver(fapl) != H5FD_SEC2 ||
        H5Pget_userblock(fcpl, &userblock) < 0 ||
        H5Fget_vfd_handle(h->file, fapl, (void **)&handle) < 0 || !handle || *handle < 0)
        goto done;
    int fd = fcntl(*handle, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        goto done;
    if (fstat(fd, &st) < 0 || st.st_size < 0) {
        close(fd);
        goto done;
    }
    h->fd = fd;
    h->file_size = (uint64_t)st.st_size;
    h5_heap_file heap = {.fd = fd, .size = h->file_size};
    if (h5_heap_file_sizes(h->file, &heap) == 0)
        h->heap = heap;
    /* libhdf5 before 1.14.4 reports chunk addresses relative to the base
     * address (after the userblock); H5Dget_offset is absolute. */
#if H5_VERSION_GE(1, 14, 4)
    h->chunk_base = 0;
#else
    h->chunk_base = userblock;
#endif
done:
    if (fapl >= 0)
        H5Pclose(fapl);
    if (fcpl >= 0)
        H5Pclose(fcpl);
}

/* Direct reads of a reader's file: its bytes from the reader (which any
 * thread may call at once), outside libhdf5's lock. */
static void direct_reader_open(h5_node *h, const h5_reader *rd)
{
    if (h->reader.read)
        return;
    hid_t fcpl = H5Fget_create_plist(h->file);
    hsize_t userblock = 0;
    if (fcpl < 0 || H5Pget_userblock(fcpl, &userblock) < 0) {
        if (fcpl >= 0)
            H5Pclose(fcpl);
        return;
    }
    H5Pclose(fcpl);
    h->reader = (h5d_file_reader){rd->ctx, rd->size, rd->read};
    h->file_size = rd->size;
    h5_heap_file heap = {.fd = -1, .rd = &h->reader, .size = rd->size};
    if (h5_heap_file_sizes(h->file, &heap) == 0)
        h->heap = heap;
#if H5_VERSION_GE(1, 14, 4)
    h->chunk_base = 0;
#else
    h->chunk_base = userblock;
#endif
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

static int open_tree_with(const char *path, const char *bn, hid_t fapl, hsize_t size,
                          const ext_targets *targets, node **root, cellar_error *err);

static int open_file_tree(const char *path, const ext_targets *targets, node **root,
                          cellar_error *err)
{
    h5_quiet();
    *root = NULL;
    const char *bn = base_name(path);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            return cellar_fail(err, CELLAR_ENOTFOUND, "no file '%s'", bn);
        /* Short of descriptors or memory passes (503); a file that is
         * there but cannot be opened (permissions, a loop) is 422. */
        return cellar_fail(err, e == EMFILE || e == ENFILE || e == ENOMEM ? CELLAR_EIO
                                                                          : CELLAR_EFORMAT,
                           "cannot open '%s': %s", bn, strerror(e));
    }
    struct stat st;
    int st_rc = fstat(fd, &st);
    close(fd);
    if (st_rc < 0)
        return cellar_fail(err, CELLAR_EIO, "cannot stat '%s': %s", bn, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' is not a regular file", bn);
    htri_t is_h5 = H5Fis_hdf5(path);
    if (is_h5 == 0)
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' is not an HDF5 file", bn);
    if (is_h5 < 0)
        return h5_fail(err, CELLAR_EFORMAT, "'%s' is not a readable HDF5 file", bn);

    hid_t fapl = h5_file_access_props();
    if (fapl < 0)
        return h5_fail(err, CELLAR_EINTERNAL, "cannot set up access to '%s'", bn);
    return open_tree_with(path, bn, fapl, (hsize_t)st.st_size, targets, root, err);
}

/* The tree of the file libhdf5 opens at path with fapl (closed here);
 * size: the file's size when opened from a local file (its rewrite
 * check), 0 for a reader. */
static int open_tree_with(const char *path, const char *bn, hid_t fapl, hsize_t size,
                          const ext_targets *targets, node **root, cellar_error *err)
{
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (file < 0) {
        int rc = h5_fail(err, CELLAR_EFORMAT, "'%s': truncated or corrupt HDF5 file", bn);
        H5Pclose(fapl);
        return rc;
    }
    H5Pclose(fapl);
    /* libhdf5 shares one open file per (device, inode), metadata cache
     * included: if an older tree of this inode is still open and the file
     * was rewritten in place since, this open would see stale metadata. */
    hsize_t eof = 0;
    if (size && H5Fget_obj_count(file, H5F_OBJ_FILE) > 1 &&
        (H5Fget_filesize(file, &eof) < 0 || eof != size)) {
        H5Fclose(file);
        return cellar_fail(err, CELLAR_EUNAVAILABLE,
                           "'%s' was rewritten in place while an older version is still open; "
                           "retry shortly",
                           bn);
    }
    hid_t g = H5Gopen2(file, "/", H5P_DEFAULT);
    if (g < 0) {
        int rc = h5_fail(err, CELLAR_EFORMAT, "'%s': cannot open the root group", bn);
        H5Fclose(file);
        return rc;
    }
#if H5_VERSION_GE(1, 12, 0)
    H5O_info2_t gi;
    herr_t gi_rc = H5Oget_info3(g, &gi, H5O_INFO_BASIC);
#else
    H5O_info_t gi;
    herr_t gi_rc = H5Oget_info2(g, &gi, H5O_INFO_BASIC);
#endif
    int rc = h5_node_wrap(NULL, "", g, file, 0, targets, root, err);
    if (rc)
        return rc;
    h5_node *rh = (*root)->impl;
    rh->fileno = gi_rc >= 0 ? gi.fileno : 0;
    if (!size) /* a reader's file: no path to stream strings from */
        return 0;
    rh->file_path = strdup(path);
    if (!rh->file_path) {
        node_tree_free(*root);
        *root = NULL;
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory opening '%s'", bn);
    }
    direct_file_open(rh);
    return 0;
}

int h5_open_reader(const h5_reader *rd, const char *what, node **root, cellar_error *err)
{
    int slot = node_locked_call_enter();
    h5_quiet();
    *root = NULL;
    h5_vfd_reader vr = {rd->ctx, rd->size, rd->read};
    hid_t fapl = h5_vfd_fapl(&vr);
    opening_reader = rd;
    int rc = fapl < 0 ? h5_fail(err, CELLAR_EINTERNAL, "cannot set up access to '%s'", what)
                      : open_tree_with(what, what, fapl, 0, NULL, root, err);
    opening_reader = NULL;
    if (!rc)
        direct_reader_open((*root)->impl, rd);
    node_locked_call_leave(slot);
    return rc;
}

int h5_open_with_targets(const char *path, const ext_targets *targets, node **root,
                         cellar_error *err)
{
    int slot = node_locked_call_enter(); /* libhdf5 may hang in here too */
    int rc = open_file_tree(path, targets, root, err);
    node_locked_call_leave(slot);
    return rc;
}

int h5_open(const char *path, node **root, cellar_error *err)
{
    return h5_open_with_targets(path, NULL, root, err);
}

/* ------------------------------------------------- for the probe's walk */

int h5_object_address(node *n, uint64_t *addr)
{
    h5_quiet();
    if (n->ops != &h5_ops || !n->impl)
        return -1;
    const h5_node *h = n->impl;
    if (h->field)
        return -1; /* the dataset's address: a field is not an object */
    return object_address(h->obj, addr);
}

/* The next chunk origin of a grid in C order; 0 when past the last. */
static int next_chunk(int ndim, const hsize_t *shape, const hsize_t *chunk, hsize_t *off)
{
    for (int d = ndim - 1; d >= 0; d--) {
        off[d] += chunk[d];
        if (off[d] < shape[d])
            return 1;
        off[d] = 0;
    }
    return 0;
}

int h5_chunk_index_walk(node *n, uint64_t max_lookups, uint64_t *lookups, cellar_error *err)
{
    h5_quiet();
    *lookups = 0;
    if (n->ops != &h5_ops || n->info.type != NODE_ARRAY || n->info.ndim < 1)
        return 0;
    const h5_node *h = n->impl;
    if (h->field)
        return 0;
    hid_t dcpl = H5Dget_create_plist(h->obj);
    if (dcpl < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read the layout of '%s'", n->path);
    int ndim = n->info.ndim, rc = 0;
    hsize_t chunk[NODE_MAX_DIMS], shape[NODE_MAX_DIMS], off[NODE_MAX_DIMS] = {0};
    if (H5Pget_layout(dcpl) != H5D_CHUNKED)
        goto done;
    if (H5Pget_chunk(dcpl, NODE_MAX_DIMS, chunk) != ndim) {
        rc = h5_fail(err, CELLAR_EFORMAT, "cannot read the chunk shape of '%s'", n->path);
        goto done;
    }
    for (int d = 0; d < ndim; d++) {
        if (n->info.shape[d] <= 0 || chunk[d] == 0)
            goto done; /* nothing stored */
        shape[d] = (hsize_t)n->info.shape[d];
    }
    do {
        hsize_t stored = 0;
        if (H5Dget_chunk_storage_size(h->obj, off, &stored) < 0)
            stored = 0; /* unallocated chunks fail here too: reads give the fill value */
        ++*lookups;
    } while (*lookups < max_lookups && next_chunk(ndim, shape, chunk, off));
done:
    H5Pclose(dcpl);
    return rc;
}
