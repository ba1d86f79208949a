/* A libhdf5 virtual file driver over a reader (storage/hdf5/h5_vfd.h). */
#include "storage/hdf5/h5_vfd.h"

#include <stdlib.h>
#include <string.h>

#include "storage/hdf5/h5_access.h"

typedef struct vfd_file {
    H5FD_t pub; /* first: libhdf5 sees this part */
    h5_vfd_reader rd;
    haddr_t eoa;
} vfd_file;

typedef struct vfd_fapl {
    h5_vfd_reader rd;
} vfd_fapl;

/* Registered once at start, before any other thread uses libhdf5. */
static hid_t vfd_id = -1;
/* The last reader failure on this thread (h5_vfd_take_error). */
static _Thread_local cellar_error vfd_error;

static H5FD_t *vfd_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr)
{
    (void)name;
    (void)maxaddr;
    if (flags & (H5F_ACC_RDWR | H5F_ACC_TRUNC | H5F_ACC_CREAT))
        return NULL;
    const vfd_fapl *fa = H5Pget_driver_info(fapl);
    if (!fa || !fa->rd.read)
        return NULL;
    vfd_file *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->rd = fa->rd;
    return &f->pub;
}

static herr_t vfd_close(H5FD_t *file)
{
    free(file);
    return 0;
}

static int vfd_cmp(const H5FD_t *a, const H5FD_t *b)
{
    const vfd_file *x = (const vfd_file *)a, *y = (const vfd_file *)b;
    return x->rd.ctx < y->rd.ctx ? -1 : x->rd.ctx > y->rd.ctx;
}

static herr_t vfd_query(const H5FD_t *file, unsigned long *flags)
{
    (void)file;
    /* Bigger reads of metadata and raw data: fewer trips to the reader. */
    *flags = H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE;
    return 0;
}

static haddr_t vfd_get_eoa(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return ((const vfd_file *)file)->eoa;
}

static herr_t vfd_set_eoa(H5FD_t *file, H5FD_mem_t type, haddr_t addr)
{
    (void)type;
    ((vfd_file *)file)->eoa = addr;
    return 0;
}

static haddr_t vfd_get_eof(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return (haddr_t)((const vfd_file *)file)->rd.size;
}

static herr_t vfd_get_handle(H5FD_t *file, hid_t fapl, void **handle)
{
    (void)fapl;
    *handle = ((vfd_file *)file)->rd.ctx;
    return 0;
}

static herr_t vfd_read(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                       void *buf)
{
    (void)type;
    (void)dxpl;
    vfd_file *f = (vfd_file *)file;
    if (addr == HADDR_UNDEF || addr + size < addr)
        return -1;
    uint64_t have = addr < f->rd.size ? f->rd.size - addr : 0;
    size_t n = size < have ? size : (size_t)have;
    if (n) {
        cellar_error e;
        cellar_error_clear(&e);
        int rc = f->rd.read(f->rd.ctx, (uint64_t)addr, n, buf, &e);
        if (rc) {
            vfd_error = e;
            vfd_error.code = rc;
            return -1;
        }
    }
    if (n < size)
        memset((char *)buf + n, 0, size - n);
    return 0;
}

static herr_t vfd_write(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                        const void *buf)
{
    (void)file;
    (void)type;
    (void)dxpl;
    (void)addr;
    (void)size;
    (void)buf;
    return -1;
}

static herr_t vfd_truncate(H5FD_t *file, hid_t dxpl, hbool_t closing)
{
    (void)file;
    (void)dxpl;
    (void)closing;
    return 0;
}

static const H5FD_class_t vfd_class = {
    .name = "cellar_reader",
    .maxaddr = (haddr_t)1 << 62,
    .fc_degree = H5F_CLOSE_STRONG,
    .fapl_size = sizeof(vfd_fapl),
    .open = vfd_open,
    .close = vfd_close,
    .cmp = vfd_cmp,
    .query = vfd_query,
    .get_eoa = vfd_get_eoa,
    .set_eoa = vfd_set_eoa,
    .get_eof = vfd_get_eof,
    .get_handle = vfd_get_handle,
    .read = vfd_read,
    .write = vfd_write,
    .truncate = vfd_truncate,
    .fl_map = H5FD_FLMAP_DICHOTOMY,
};

void h5_vfd_init(void)
{
    if (vfd_id < 0)
        vfd_id = H5FDregister(&vfd_class);
}

hid_t h5_vfd_fapl(const h5_vfd_reader *rd)
{
    if (vfd_id < 0)
        return -1;
    hid_t fapl = h5_file_access_props();
    vfd_fapl fa = {*rd};
    if (fapl >= 0 && H5Pset_driver(fapl, vfd_id, &fa) < 0) {
        H5Pclose(fapl);
        return -1;
    }
    return fapl;
}

int h5_vfd_take_error(cellar_error *err)
{
    int rc = vfd_error.code;
    if (rc)
        cellar_fail(err, rc, "%s", vfd_error.detail);
    cellar_error_clear(&vfd_error);
    return rc;
}

void h5_vfd_clear_error(void)
{
    cellar_error_clear(&vfd_error);
}
