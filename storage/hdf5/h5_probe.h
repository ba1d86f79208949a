/* The walk a probe process makes over an HDF5 file before the serving
 * process may open it (storage/README.md, "Trust").
 *
 * libhdf5 is not safe on hostile bytes: damaged object headers crash it or
 * make it loop for good, and it holds one global lock while it does.  So
 * the server never calls libhdf5 on a file version that a disposable child
 * process (server/probe.c) has not first walked with this function, under
 * rlimits and a deadline.  The walk goes through the same node backend the
 * server uses (storage/hdf5/h5.c), so it asks libhdf5 exactly what the
 * server will: it opens every group and link, reads every attribute
 * (object references resolved), maps every dataset's type and dataspace,
 * makes each dataset's direct-read plan (layout, filters, and the chunk
 * table of small chunked datasets) and asks what the zarr view asks of it
 * (h5_zarr_storage: chunk shape, deflate level, fill value), looks up every chunk of the others in
 * the chunk index, and reads through libhdf5 what the server reads through
 * it: string arrays (variable-length strings come from the global heap)
 * and numeric datasets that direct reads do not take (compact layout, LZF
 * and other filters).  Chunk payloads that the server reads itself (pread
 * and cellar's own decoders, bounded) are not read here.
 *
 * Elements libhdf5 cleanly reports as broken are counted, not fatal: the
 * server answers 422 for them.  Only a crash, a hang or runaway memory,
 * which the parent observes, makes the file unsafe. */
#ifndef CELLAR_H5_PROBE_H
#define CELLAR_H5_PROBE_H

#include <stdint.h>

#include "common/error.h"
#include "storage/hdf5/h5.h"

/* Bounds of one walk, so that a valid but huge file is walked in bounded
 * time: past a bound the walk goes on without reading more of that kind
 * (the report says so). */
typedef struct h5_probe_limits {
    uint64_t max_objects;        /* groups and datasets opened */
    uint64_t max_string_values;  /* strings read through libhdf5 */
    uint64_t max_read_bytes;     /* numeric bytes read through libhdf5 */
    uint64_t max_chunk_lookups;  /* chunk index lookups */
} h5_probe_limits;

/* Defaults for h5_probe_limits (a 1M-cell AnnData is walked whole). */
#define H5_PROBE_DEFAULT_LIMITS                                                                \
    ((h5_probe_limits){.max_objects = 1000000,                                                 \
                       .max_string_values = 50000000,                                          \
                       .max_read_bytes = (uint64_t)1 << 30,                                    \
                       .max_chunk_lookups = 4000000})

typedef struct h5_probe_report {
    uint64_t groups, datasets, attributes;
    uint64_t strings_read, bytes_read, chunk_lookups;
    uint64_t broken;     /* elements libhdf5 reported as unreadable */
    int over_limit;      /* some bound of h5_probe_limits was reached */
    /* The other files its elements name (external links, external raw
     * storage, virtual sources), each once: lines "K NAME\n", K the kind
     * (storage/ext_targets.h), NAME with its bytes below '!', '%' and
     * above '~' written %XX.  Not walked: each is probed on its own. */
    char targets[8192];
    size_t targets_len;
    int targets_cut;     /* some did not fit (they are then refused) */
} h5_probe_report;

/* Walks the HDF5 file at path as above.  0 when the walk finished (rep
 * filled); the error of h5_open when the file cannot be opened at all
 * (CELLAR_EFORMAT: not HDF5, truncated; CELLAR_ENOTFOUND; CELLAR_EIO),
 * CELLAR_ENOMEM. */
int h5_probe_file(const char *path, const h5_probe_limits *lim, h5_probe_report *rep,
                  cellar_error *err);

/* h5_probe_file of the file rd reads (storage/hdf5/h5.h, h5_open_reader);
 * what names it. */
int h5_probe_reader(const h5_reader *rd, const char *what, const h5_probe_limits *lim,
                    h5_probe_report *rep, cellar_error *err);

#endif
