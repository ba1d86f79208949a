/* Streaming a variable-length string from an HDF5 file: see h5_stream.h.
 *
 * On disk (HDF5 file format spec, "Global Heap" and "Variable-length
 * data"):
 *   the dataset's raw element: u32 length | collection address (sizeof
 *     offsets bytes, relative to the base address) | u32 object index
 *   the collection: "GCOL" | u8 version 1 | 3 reserved | size (sizeof
 *     lengths bytes, the whole collection with this header) | objects
 *   an object: u16 index | u16 references | 4 reserved | size (sizeof
 *     lengths) | data padded to a multiple of 8; index 0 is the free space
 *     at the end. */
#include "storage/hdf5/h5_stream.h"

#include "storage/hdf5/h5_access.h"
#include "storage/hdf5/h5_heap.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* More objects than this in one collection: not walked (libhdf5 reads it). */
enum { MAX_OBJECTS = 1 << 20 };

typedef struct vlen_where {
    uint64_t addr;       /* absolute address of the dataset's raw element */
    uint64_t base;       /* the base address (userblock size) */
    size_t sizeof_addr, sizeof_size;
} vlen_where;

static int not_here(cellar_error *err, const char *why)
{
    return cellar_fail(err, CELLAR_EINVAL, "not streamed: %s", why);
}

/* The dataset is a contiguous vlen string with one element. */
static int dataset_ok(hid_t d)
{
    int ok = 0;
    hid_t type = H5Dget_type(d), space = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
    if (type < 0 || space < 0 || dcpl < 0)
        goto done;
    if (H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) <= 0)
        goto done;
    int nd = H5Sget_simple_extent_ndims(space);
    hsize_t dim = 0;
    if (nd == 1 && (H5Sget_simple_extent_dims(space, &dim, NULL) != 1 || dim != 1))
        goto done;
    if (nd != 0 && nd != 1)
        goto done;
    ok = H5Pget_layout(dcpl) == H5D_CONTIGUOUS;
done:
    if (type >= 0)
        H5Tclose(type);
    if (space >= 0)
        H5Sclose(space);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    return ok;
}

/* Asks libhdf5 where the dataset's element lies and how addresses are
 * written.  0, or CELLAR_EINVAL. */
static int locate(const char *file_path, const char *dset_path, hid_t dataset_access,
                  vlen_where *w, cellar_error *err)
{
    int rc = 0;
    hid_t fapl = -1, file = -1, fcpl = -1, d = -1;
    fapl = h5_file_access_props();
    if (fapl < 0) {
        rc = not_here(err, "file access properties");
        goto done;
    }
    file = H5Fopen(file_path, H5F_ACC_RDONLY, fapl);
    if (file < 0) {
        rc = not_here(err, "cannot open the file by its path");
        goto done;
    }
    fcpl = H5Fget_create_plist(file);
    hsize_t userblock = 0;
    if (fcpl < 0 || H5Pget_sizes(fcpl, &w->sizeof_addr, &w->sizeof_size) < 0 ||
        H5Pget_userblock(fcpl, &userblock) < 0) {
        rc = not_here(err, "file creation properties");
        goto done;
    }
    w->base = userblock;
    d = H5Dopen2(file, dset_path, dataset_access);
    if (d < 0 || !dataset_ok(d)) {
        rc = not_here(err, "not a contiguous variable-length string");
        goto done;
    }
    haddr_t addr = H5Dget_offset(d);
    if (addr == HADDR_UNDEF) {
        rc = not_here(err, "no raw data address");
        goto done;
    }
    w->addr = (uint64_t)addr;
    if (w->sizeof_addr < 2 || w->sizeof_addr > 8 || w->sizeof_size < 2 || w->sizeof_size > 8)
        rc = not_here(err, "unusual address sizes");
done:
    if (d >= 0)
        H5Dclose(d);
    if (fcpl >= 0)
        H5Pclose(fcpl);
    if (file >= 0)
        H5Fclose(file);
    if (fapl >= 0)
        H5Pclose(fapl);
    return rc;
}

/* pread of exactly n bytes at off; -1 on error or end of file. */
static int read_at(int fd, void *buf, size_t n, uint64_t off)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = pread(fd, p, n, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        p += got;
        n -= (size_t)got;
        off += (uint64_t)got;
    }
    return 0;
}

/* Finds the heap object of the element: its absolute address and size.
 * 0, or CELLAR_EINVAL. */
static int find_object(int fd, uint64_t file_size, const vlen_where *w, uint64_t *data_at,
                       uint64_t *data_len, cellar_error *err)
{
    unsigned char id[4 + 8 + 4], hdr[8 + 8];
    size_t sa = w->sizeof_addr, ss = w->sizeof_size, id_len = 4 + sa + 4;
    if (w->addr > file_size || file_size - w->addr < id_len || read_at(fd, id, id_len, w->addr))
        return not_here(err, "heap id outside the file");
    uint64_t len = h5_heap_le(id, 4), coll = h5_heap_le(id + 4, sa), index = h5_heap_le(id + 4 + sa, 4);
    if (len == 0 || index == 0 || coll > file_size - w->base)
        return not_here(err, "empty or null heap id");
    coll += w->base;
    if (file_size - coll < 8 + ss || read_at(fd, hdr, 8 + ss, coll) ||
        memcmp(hdr, "GCOL", 4) != 0 || hdr[4] != 1)
        return not_here(err, "no global heap collection at the address");
    uint64_t coll_size = h5_heap_le(hdr + 8, ss);
    if (coll_size < 8 + ss || coll_size > file_size - coll)
        return not_here(err, "global heap collection size");
    uint64_t end = coll + coll_size, pos = coll + 8 + ss;
    for (int k = 0; k < MAX_OBJECTS && end - pos >= 8 + ss; k++) {
        if (read_at(fd, hdr, 8 + ss, pos))
            return not_here(err, "global heap object header");
        uint64_t oi = h5_heap_le(hdr, 2), osize = h5_heap_le(hdr + 8, ss);
        if (oi == 0)
            break; /* free space: the rest of the collection */
        uint64_t data = pos + 8 + ss;
        if (osize > end - data)
            return not_here(err, "global heap object past its collection");
        if (oi == index) {
            if (osize != len)
                return not_here(err, "heap object size differs from the string's");
            *data_at = data;
            *data_len = len;
            return 0;
        }
        uint64_t padded = (osize + 7) & ~(uint64_t)7;
        if (padded > end - data)
            break;
        pos = data + padded;
    }
    return not_here(err, "heap object not found");
}

static int stream_bytes(int fd, uint64_t at, uint64_t len, size_t piece, h5_stream_sink sink,
                        void *ctx, cellar_error *err)
{
    char *buf = malloc(piece);
    if (!buf)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory streaming a string");
    int rc = 0;
    while (len > 0 && !rc) {
        size_t n = len < piece ? (size_t)len : piece;
        if (read_at(fd, buf, n, at)) {
            rc = cellar_fail(err, CELLAR_EIO, "reading a string from the file failed");
            break;
        }
        rc = sink(ctx, buf, n, err);
        at += n;
        len -= n;
    }
    free(buf);
    return rc;
}

int h5_stream_vlen_string(const char *file_path, const char *dset_path, hid_t dataset_access,
                          size_t piece, h5_stream_sink sink, void *ctx, cellar_error *err)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* per thread in libhdf5 */
    struct stat st;
    if (piece == 0 || stat(file_path, &st) < 0 || !S_ISREG(st.st_mode))
        return not_here(err, "not a regular file");
    vlen_where w = {0};
    int rc = locate(file_path, dset_path, dataset_access, &w, err);
    if (rc)
        return rc;
    int fd = open(file_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return not_here(err, "cannot open the file");
    uint64_t at = 0, len = 0;
    if (fstat(fd, &st) < 0 || st.st_size < 0)
        rc = not_here(err, "cannot stat the file");
    if (!rc)
        rc = find_object(fd, (uint64_t)st.st_size, &w, &at, &len, err);
    if (!rc) {
        posix_fadvise(fd, (off_t)at, (off_t)len, POSIX_FADV_SEQUENTIAL);
        rc = stream_bytes(fd, at, len, piece, sink, ctx, err);
    }
    close(fd);
    return rc;
}
