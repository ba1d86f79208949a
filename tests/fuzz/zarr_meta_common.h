/* Shared body of the zarr metadata fuzz targets: parse the input as a v2
 * .zarray or v3 zarr.json text, check the parsed invariants, then read the
 * first and last element of every axis from a store with no chunks (all fill
 * values), which drives the read planner over the parsed shapes. */
#ifndef CELLAR_ZARR_META_COMMON_H
#define CELLAR_ZARR_META_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz.h"
#include "common/arena.h"
#include "storage/zarr/zarr_impl.h"

static void fuzz_read_fill(const zarr_array *za)
{
    dim_sel sel[NODE_MAX_DIMS];
    int64_t idx[NODE_MAX_DIMS][2];
    size_t count = 1;
    for (int d = 0; d < za->ndim; d++) {
        if (za->shape[d] == 0)
            return;
        idx[d][0] = za->shape[d] - 1;
        idx[d][1] = 0;
        sel[d].start = 0;
        sel[d].step = 1;
        sel[d].count = 2;
        sel[d].index = idx[d];
        count *= 2;
    }
    cellar_error err;
    cellar_error_clear(&err);
    zarr_dir none; /* no directory: every chunk is missing */
    zarr_dir_open(&none, "/nonexistent/cellar-fuzz");
    if (za->dtype == DT_STRING) {
        arena *a = arena_new();
        char *out[256];
        MUST(a != NULL);
        int rc = zarr_array_read(za, &none.src, "", "fuzz", sel, NULL, 0, a, out, &err);
        zarr_dir_close(&none);
        MUST(rc == 0);
        for (size_t i = 0; i < count; i++)
            MUST(out[i] != NULL);
        arena_free(a);
        return;
    }
    uint8_t out[256 * 8];
    size_t es = dtype_size(za->dtype);
    MUST(es > 0 && es <= 8);
    int rc = zarr_array_read(za, &none.src, "", "fuzz", sel, out, count * es, NULL, NULL, &err);
    zarr_dir_close(&none);
    MUST(rc == 0);
    for (size_t i = 0; i < count; i++)
        MUST(memcmp(out + i * es, za->fill, es) == 0 ||
             (za->dtype == DT_BOOL && out[i] == (za->fill[0] != 0)));
}

static void fuzz_zarr_meta(const uint8_t *data, size_t size, int version)
{
    json_t *doc = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = zarr_json_parse((const char *)data, size, &doc, "fuzz", &err);
    if (rc) {
        MUST(err.code == rc && doc == NULL);
        return;
    }
    zarr_array za;
    rc = version == 2 ? zarr_array_parse_v2(doc, &za, "fuzz", &err)
                      : zarr_array_parse_v3(doc, &za, "fuzz", &err);
    json_decref(doc);
    if (rc) {
        MUST(err.code == rc && err.detail[0]);
        return;
    }
    MUST(za.ndim >= 0 && za.ndim <= NODE_MAX_DIMS);
    for (int d = 0; d < za.ndim; d++) {
        MUST(za.shape[d] >= 0 && za.chunk[d] >= 1);
        if (za.sharded)
            MUST(za.inner[d] >= 1 && za.chunk[d] % za.inner[d] == 0);
    }
    MUST(za.dtype != DT_STRING || za.fill_str != NULL || za.unsupported);
    if (!za.unsupported && za.dtype != DT_NONE)
        fuzz_read_fill(&za);
    zarr_array_clear(&za);
}

#endif
