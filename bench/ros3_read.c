/* The libhdf5 side of the remote benchmark (bench/remote.py): reads
 * datasets of an HDF5 file on S3 through libhdf5's read-only S3 driver
 * (ros3, in Debian's libhdf5), as a client of libhdf5 without cellar would.
 *
 *   ros3_read URL REGION KEY_ID SECRET WARM DATASET[:START:COUNT]...
 *
 * Cold: the file opened and every dataset read (rows [START, START+COUNT)
 * of a 1-D dataset, else the whole of it) in a fresh process.  Warm: the
 * same reads again, WARM times, with the file kept open (libhdf5's
 * metadata cache warm; the ros3 driver of libhdf5 1.10 caches no bytes).
 * Prints "cold SECONDS BYTES MONOTONIC_END" and one "warm SECONDS" line per
 * warm run; MONOTONIC_END (CLOCK_MONOTONIC, seconds) lets the caller tell
 * the cold requests from the warm ones in a proxy's log. */
#include <hdf5.h>
#include <H5FDros3.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Reads one spec ("path" or "path:start:count") of f; its bytes, or -1. */
static long long read_spec(hid_t f, const char *spec)
{
    char path[512];
    long long start = -1, count = -1;
    const char *colon = strchr(spec, ':');
    size_t pl = colon ? (size_t)(colon - spec) : strlen(spec);
    if (pl >= sizeof path)
        return -1;
    memcpy(path, spec, pl);
    path[pl] = '\0';
    if (colon && sscanf(colon + 1, "%lld:%lld", &start, &count) != 2)
        return -1;
    long long bytes = -1;
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    hid_t fspace = d >= 0 ? H5Dget_space(d) : -1;
    hid_t ftype = d >= 0 ? H5Dget_type(d) : -1;
    hid_t mtype = ftype >= 0 ? H5Tget_native_type(ftype, H5T_DIR_ASCEND) : -1;
    hid_t mspace = -1;
    void *buf = NULL;
    if (mtype < 0)
        goto done;
    int ndim = H5Sget_simple_extent_ndims(fspace);
    hsize_t dims[8] = {0};
    if (ndim < 0 || ndim > 8 || H5Sget_simple_extent_dims(fspace, dims, NULL) < 0)
        goto done;
    hsize_t n = (hsize_t)H5Sget_simple_extent_npoints(fspace);
    if (start >= 0 && ndim == 1) {
        hsize_t s = (hsize_t)start, c = (hsize_t)count;
        if (H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &s, NULL, &c, NULL) < 0)
            goto done;
        n = c;
    }
    mspace = H5Screate_simple(1, &n, NULL);
    size_t es = H5Tget_size(mtype);
    buf = malloc(n * es + 1);
    if (!buf || H5Dread(d, mtype, mspace, fspace, H5P_DEFAULT, buf) < 0)
        goto done;
    bytes = (long long)(n * es);
    if (H5Tdetect_class(mtype, H5T_VLEN) > 0 ||
        (H5Tget_class(mtype) == H5T_STRING && H5Tis_variable_str(mtype) > 0))
        H5Dvlen_reclaim(mtype, mspace, H5P_DEFAULT, buf);
done:
    free(buf);
    if (mspace >= 0)
        H5Sclose(mspace);
    if (mtype >= 0)
        H5Tclose(mtype);
    if (ftype >= 0)
        H5Tclose(ftype);
    if (fspace >= 0)
        H5Sclose(fspace);
    if (d >= 0)
        H5Dclose(d);
    return bytes;
}

static long long read_all(hid_t f, int n, char **specs)
{
    long long total = 0;
    for (int i = 0; i < n; i++) {
        long long b = read_spec(f, specs[i]);
        if (b < 0) {
            fprintf(stderr, "ros3_read: cannot read %s\n", specs[i]);
            return -1;
        }
        total += b;
    }
    return total;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: ros3_read URL REGION KEY_ID SECRET WARM DATASET[:START:COUNT]...\n");
        return 2;
    }
    H5FD_ros3_fapl_t fa = {.version = H5FD_CURR_ROS3_FAPL_T_VERSION, .authenticate = 1};
    snprintf(fa.aws_region, sizeof fa.aws_region, "%s", argv[2]);
    snprintf(fa.secret_id, sizeof fa.secret_id, "%s", argv[3]);
    snprintf(fa.secret_key, sizeof fa.secret_key, "%s", argv[4]);
    int warm = atoi(argv[5]);
    int rc = 1;
    double t0 = now();
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_fapl_ros3(fapl, &fa) < 0)
        return 1;
    hid_t f = H5Fopen(argv[1], H5F_ACC_RDONLY, fapl);
    if (f < 0) {
        fprintf(stderr, "ros3_read: cannot open %s\n", argv[1]);
        goto done;
    }
    long long bytes = read_all(f, argc - 6, argv + 6);
    double t1 = now();
    if (bytes < 0)
        goto done;
    printf("cold %.6f %lld %.6f\n", t1 - t0, bytes, t1);
    for (int i = 0; i < warm; i++) {
        double w0 = now();
        if (read_all(f, argc - 6, argv + 6) != bytes)
            goto done;
        printf("warm %.6f\n", now() - w0);
    }
    rc = 0;
done:
    if (f >= 0)
        H5Fclose(f);
    H5Pclose(fapl);
    return rc;
}
