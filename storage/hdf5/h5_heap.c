/* Global heap ids checked before libhdf5 follows them: see h5_heap.h.
 *
 * On disk (HDF5 file format spec, "Global Heap"; libhdf5 1.10's
 * H5HG__cache_heap_deserialize and H5HG_read, whose reading this mirrors):
 *   the collection: "GCOL" | u8 version 1 | 3 reserved | size (sizeof
 *     lengths bytes: the whole collection, this header included) | objects
 *   an object: u16 index | u16 references | 4 reserved | size (sizeof
 *     lengths) | data padded to a multiple of 8; index 0 is free space,
 *     whose size counts its own header.
 * libhdf5 walks the objects from the first until the rest is too short
 * for an object header, recording each index (a later one replaces an
 * earlier one); free space of size 0 would make it walk on the spot for
 * good.  Reading id (address, index) it copies the recorded object's size
 * bytes from its data, into a buffer of the id's length. */
#include "storage/hdf5/h5_heap.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The opaque type heap ids are read raw as: u32 length | address (up to
 * 8 bytes) | u32 index. */
#define RAW_TAG "cellar:vlen-raw"
#define RAW_SIZE 16
/* Collections read whole up to this size; larger ones header by header. */
#define WHOLE_MAX ((uint64_t)8 << 20)
/* Collections whose object table is kept during one check. */
enum { KEPT = 4 };

/* ------------------------------------------------- reading ids raw */

/* libhdf5 conversion callback: a vlen string (the stored heap ids, as
 * the attribute's raw data holds them) to RAW_TAG, byte for byte. */
static herr_t raw_convert(hid_t src, hid_t dst, H5T_cdata_t *cdata, size_t n, size_t buf_stride,
                          size_t bkg_stride, void *buf, void *bkg, hid_t dxpl)
{
    (void)bkg_stride, (void)bkg, (void)dxpl;
    if (cdata->command == H5T_CONV_FREE)
        return 0;
    size_t ss = H5Tget_size(src), ds = H5Tget_size(dst);
    if (cdata->command == H5T_CONV_INIT) {
        if (H5Tis_variable_str(src) <= 0 || H5Tget_class(dst) != H5T_OPAQUE || ds != RAW_SIZE)
            return -1;
        char *tag = H5Tget_tag(dst);
        int ours = tag && strcmp(tag, RAW_TAG) == 0;
        H5free_memory(tag);
        return ours ? 0 : -1;
    }
    if (ss < 8 || ss > ds || (buf_stride && buf_stride < ds))
        return -1;
    size_t step_in = buf_stride ? buf_stride : ss, step_out = buf_stride ? buf_stride : ds;
    unsigned char *b = buf;
    /* In place, from the last: the output is at least as wide. */
    for (size_t i = n; i-- > 0;) {
        memmove(b + i * step_out, b + i * step_in, ss);
        memset(b + i * step_out + ss, 0, ds - ss);
    }
    return 0;
}

/* The type heap ids are read raw as (the caller closes it), or -1. */
static hid_t raw_type_new(void)
{
    hid_t op = H5Tcreate(H5T_OPAQUE, RAW_SIZE);
    if (op >= 0 && H5Tset_tag(op, RAW_TAG) < 0) {
        H5Tclose(op);
        op = H5I_INVALID_HID;
    }
    return op;
}

static pthread_once_t raw_once = PTHREAD_ONCE_INIT;
static int raw_registered; /* set once, under raw_once */

/* Registers raw_convert with libhdf5, which keeps copies of the types (no
 * id stays open: tests count them). */
static void raw_setup(void)
{
    hid_t vs = H5Tcopy(H5T_C_S1), op = raw_type_new();
    raw_registered = vs >= 0 && op >= 0 && H5Tset_size(vs, H5T_VARIABLE) >= 0 &&
                     H5Tregister(H5T_PERS_SOFT, "cellar vlen ids", vs, op, raw_convert) >= 0;
    if (vs >= 0)
        H5Tclose(vs);
    if (op >= 0)
        H5Tclose(op);
}

int h5_heap_file_sizes(hid_t file, h5_heap_file *f)
{
    hid_t fcpl = H5Fget_create_plist(file);
    hsize_t userblock = 0;
    int rc = fcpl >= 0 && H5Pget_sizes(fcpl, &f->sizeof_addr, &f->sizeof_size) >= 0 &&
                     H5Pget_userblock(fcpl, &userblock) >= 0
                 ? 0
                 : -1;
    if (fcpl >= 0)
        H5Pclose(fcpl);
    f->base = userblock;
    if (f->sizeof_addr < 2 || f->sizeof_addr > 8 || f->sizeof_size < 2 || f->sizeof_size > 8)
        rc = -1;
    return rc;
}

/* ------------------------------------------------- the collections */

uint64_t h5_heap_le(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i > 0; i--)
        v = v << 8 | p[i - 1];
    return v;
}

static int read_at(const h5_heap_file *f, uint64_t off, size_t n, void *buf, cellar_error *err)
{
    if (off > f->size || f->size - off < n)
        return cellar_fail(err, CELLAR_EFORMAT, "a global heap collection runs past the file's end");
    if (f->rd)
        return f->rd->read(f->rd->ctx, off, n, buf, err);
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = pread(f->fd, p, n, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return cellar_fail(err, CELLAR_EIO, "reading a global heap collection failed");
        p += got;
        n -= (size_t)got;
        off += (uint64_t)got;
    }
    return 0;
}

/* Object indexes are 16 bits. */
enum { INDEXES = 1 << 16 };

typedef struct heap_object {
    uint64_t size;
    uint64_t data_end; /* offset in the collection of the end of its data; 0: none */
} heap_object;

/* The objects of one collection as libhdf5 records them, by index (a
 * later record of an index replaces an earlier one, as in libhdf5). */
typedef struct collection {
    uint64_t addr; /* as the ids write it (relative to the base) */
    heap_object *by_index; /* INDEXES entries */
    uint64_t size;
} collection;

/* The object header at pos of the collection (whole: its bytes in data). */
static int object_header(const h5_heap_file *f, uint64_t at, const unsigned char *data,
                         uint64_t pos, unsigned char *hdr, size_t n, cellar_error *err)
{
    if (data) {
        memcpy(hdr, data + pos, n);
        return 0;
    }
    return read_at(f, at + pos, n, hdr, err);
}

/* Parses the collection at addr into c.  0, CELLAR_EFORMAT (not one
 * libhdf5 may read safely), CELLAR_EIO, CELLAR_ENOMEM. */
static int collection_parse(const h5_heap_file *f, uint64_t addr, collection *c,
                            cellar_error *err)
{
    size_t ss = f->sizeof_size, hdr_size = 8 + ss, obj_hdr = 8 + ss;
    unsigned char hdr[16];
    if (addr == 0 || addr > UINT64_MAX - f->base)
        return cellar_fail(err, CELLAR_EFORMAT, "a heap id names no global heap collection");
    uint64_t at = f->base + addr;
    int rc = read_at(f, at, hdr_size, hdr, err);
    if (rc)
        return rc;
    if (memcmp(hdr, "GCOL", 4) != 0 || hdr[4] != 1)
        return cellar_fail(err, CELLAR_EFORMAT, "a heap id names no global heap collection");
    uint64_t size = h5_heap_le(hdr + 8, ss);
    if (size < hdr_size || size > f->size - at)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "a global heap collection's size runs past the file's end");
    unsigned char *data = NULL;
    if (size <= WHOLE_MAX) {
        data = malloc((size_t)size);
        if (!data)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory checking a global heap");
        rc = read_at(f, at, (size_t)size, data, err);
    }
    c->addr = addr;
    c->size = size;
    free(c->by_index);
    c->by_index = calloc(INDEXES, sizeof *c->by_index);
    if (!c->by_index)
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory checking a global heap");
    for (uint64_t pos = hdr_size; !rc && pos < size && size - pos >= obj_hdr;) {
        rc = object_header(f, at, data, pos, hdr, obj_hdr, err);
        if (rc)
            break;
        uint32_t index = (uint32_t)h5_heap_le(hdr, 2);
        uint64_t osize = h5_heap_le(hdr + 8, ss), need;
        if (index == 0) {
            if (osize == 0) {
                rc = cellar_fail(err, CELLAR_EFORMAT,
                                 "a global heap collection's free space has size 0");
                break;
            }
            need = osize;
        } else {
            uint64_t padded = osize > UINT64_MAX - 7 ? UINT64_MAX : (osize + 7) & ~(uint64_t)7;
            need = padded > UINT64_MAX - obj_hdr ? UINT64_MAX : obj_hdr + padded;
            uint64_t end = osize > UINT64_MAX - pos - obj_hdr ? UINT64_MAX : pos + obj_hdr + osize;
            c->by_index[index] = (heap_object){osize, end};
        }
        if (need > size - pos)
            break; /* libhdf5 stops here too */
        pos += need;
    }
    free(data);
    return rc;
}

/* The id (length, address, index) checked against c (c->addr == address). */
static int id_check(const collection *c, uint64_t len, uint32_t index, cellar_error *err)
{
    const heap_object *o = index > 0 && index < INDEXES ? &c->by_index[index] : NULL;
    if (!o || !o->data_end)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "a heap id names an object its collection lacks");
    if (o->data_end > c->size)
        return cellar_fail(err, CELLAR_EFORMAT, "a global heap object runs past its collection");
    if (o->size != len)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "a global heap object's size is not its string's length");
    return 0;
}

typedef struct kept {
    collection c[KEPT];
    size_t used, next;
} kept;

static void kept_free(kept *k)
{
    for (size_t i = 0; i < KEPT; i++)
        free(k->c[i].by_index);
}

/* The parsed collection at addr, parsed now when not kept. */
static int kept_get(kept *k, const h5_heap_file *f, uint64_t addr, const collection **out,
                    cellar_error *err)
{
    for (size_t i = 0; i < k->used; i++)
        if (k->c[i].addr == addr) {
            *out = &k->c[i];
            return 0;
        }
    collection *c = &k->c[k->next];
    k->next = (k->next + 1) % KEPT;
    if (k->used < KEPT)
        k->used++;
    int rc = collection_parse(f, addr, c, err);
    if (rc) {
        c->addr = 0; /* never matches: ids with address 0 are not looked up */
        return rc;
    }
    *out = c;
    return 0;
}

/* Checks n raw ids (RAW_SIZE bytes each). */
static int ids_check(const h5_heap_file *f, const unsigned char *raw, size_t n, cellar_error *err)
{
    kept k;
    memset(&k, 0, sizeof k);
    size_t sa = f->sizeof_addr;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const unsigned char *id = raw + i * RAW_SIZE;
        uint64_t len = h5_heap_le(id, 4), addr = h5_heap_le(id + 4, sa);
        uint32_t index = (uint32_t)h5_heap_le(id + 4 + sa, 4);
        if (addr == 0) { /* libhdf5 reads nothing for it */
            if (len != 0)
                rc = cellar_fail(err, CELLAR_EFORMAT, "a heap id of length %llu names no data",
                                 (unsigned long long)len);
            continue;
        }
        const collection *c = NULL;
        rc = kept_get(&k, f, addr, &c, err);
        if (!rc)
            rc = id_check(c, len, index, err);
    }
    kept_free(&k);
    return rc;
}

/* A zeroed buffer for n raw ids, or NULL (err set). */
static unsigned char *raw_buffer(const h5_heap_file *f, size_t n, cellar_error *err)
{
    pthread_once(&raw_once, raw_setup);
    if (!raw_registered) {
        cellar_fail(err, CELLAR_EFORMAT, "cannot read heap ids raw");
        return NULL;
    }
    if (f->sizeof_addr + 8 > RAW_SIZE || n > SIZE_MAX / RAW_SIZE) {
        cellar_fail(err, CELLAR_EFORMAT, "unusual heap ids");
        return NULL;
    }
    unsigned char *raw = calloc(n ? n : 1, RAW_SIZE);
    if (!raw)
        cellar_fail(err, CELLAR_ENOMEM, "out of memory checking heap ids");
    return raw;
}

/* A variable-length string's characters are one byte each (the spec's
 * "Datatype Message", variable-length class).  libhdf5 trusts the base
 * type's size: it sizes its conversion buffer as an id's length times it
 * and reads that much through it, so a flipped bit there turns a heap
 * object of 9 bytes into a 1.2 GB allocation, filled, per string. */
static int base_check(hid_t ftype, const char *what, cellar_error *err)
{
    hid_t base = ftype >= 0 ? H5Tget_super(ftype) : H5I_INVALID_HID;
    size_t size = base >= 0 ? H5Tget_size(base) : 0;
    if (base >= 0)
        H5Tclose(base);
    if (size != 1)
        return cellar_fail(err, CELLAR_EFORMAT,
                           "the variable-length strings of %s have characters of %zu bytes",
                           what, size);
    return 0;
}

/* Reads the ids raw with read(ctx, raw type, buffer) and checks them;
 * ftype is the stored type. */
typedef herr_t (*raw_read_fn)(const void *ctx, hid_t type, void *raw);

static int check_read(const h5_heap_file *f, size_t n, hid_t ftype, raw_read_fn read,
                      const void *ctx, const char *what, cellar_error *err)
{
    int rc = base_check(ftype, what, err);
    if (rc)
        return rc;
    unsigned char *raw = raw_buffer(f, n, err);
    if (!raw)
        return err->code;
    hid_t t = raw_type_new();
    rc = t < 0 || read(ctx, t, raw) < 0
                 ? cellar_fail(err, CELLAR_EFORMAT, "cannot read the heap ids of %s", what)
                 : ids_check(f, raw, n, err);
    if (t >= 0)
        H5Tclose(t);
    free(raw);
    return rc;
}

static herr_t attr_raw(const void *ctx, hid_t type, void *raw)
{
    return H5Aread(*(const hid_t *)ctx, type, raw);
}

int h5_heap_check_attr(hid_t attr, size_t n, const h5_heap_file *f, cellar_error *err)
{
    hid_t ftype = H5Aget_type(attr);
    int rc = check_read(f, n, ftype, attr_raw, &attr, "an attribute", err);
    if (ftype >= 0)
        H5Tclose(ftype);
    return rc;
}

typedef struct dataset_read {
    hid_t dset, mspace, fspace, dxpl;
} dataset_read;

static herr_t dataset_raw(const void *ctx, hid_t type, void *raw)
{
    const dataset_read *d = ctx;
    return H5Dread(d->dset, type, d->mspace, d->fspace, d->dxpl, raw);
}

int h5_heap_check_dataset(hid_t dset, hid_t mspace, hid_t fspace, hid_t dxpl, size_t n,
                          const h5_heap_file *f, cellar_error *err)
{
    dataset_read d = {dset, mspace, fspace, dxpl};
    hid_t ftype = H5Dget_type(dset);
    int rc = check_read(f, n, ftype, dataset_raw, &d, "its strings", err);
    if (ftype >= 0)
        H5Tclose(ftype);
    return rc;
}
