/* What the h5grove handlers (the .c files of api/h5grove/) share: values as h5py
 * delivers them and their encodings as h5grove writes them (orjson's
 * JSON, numpy's .npy and savetxt CSV, tifffile's TIFF, raw bytes), and
 * type descriptions as h5grove's get_type_metadata.  Not for the router. */
#ifndef CELLAR_API_H5GROVE_GROVE_H
#define CELLAR_API_H5GROVE_GROVE_H

#include <jansson.h>
#include <stdint.h>

#include "api/encode/json_out.h"
#include "api/request.h"
#include "common/buf.h"
#include "storage/hdf5/h5_grove.h"

/* Values of one type: count elements of type->mem_size bytes at data,
 * laid out as h5g_read delivers them (stored byte order), in C order
 * over shape.  ndim -1 is h5py.Empty (no values), 0 a scalar. */
typedef struct grove_values {
    const h5g_type *type;
    int ndim;
    int64_t shape[GROVE_MAX_DIMS];
    uint64_t count;
    const unsigned char *data;
} grove_values;

/* numpy's dtype.str of what h5py reads type t as ("<f4", "|S6", "|O",
 * "|b1", "<c16"); NULL for a compound that is not complex (its dtype is
 * a dict of its members) or a type h5py cannot map. */
const char *grove_dtype_str(const h5g_type *t, arena *a);

/* h5grove's get_type_metadata(t) as a new JSON object (NULL when out of
 * memory or for a type h5py cannot map: CELLAR_EFORMAT in err). */
json_t *grove_type_meta(const h5g_type *t, arena *a, cellar_error *err);

/* Whether h5grove's is_numeric_data holds for values of t (numpy number
 * or bool: integers, floats, complex, bool, enums). */
int grove_is_numeric(const h5g_type *t);

/* Writes the values as orjson writes what h5py returned: numbers of
 * numpy arrays and scalars with float32 and float16 in float32's
 * shortest text, elements of compounds as lists (their floats as Python
 * floats), strings and opaque bytes as text, NaN and infinities as null,
 * h5py.Empty as null. */
void grove_json_values(json_out *j, const grove_values *v);

/* orjson's text of a float64 or float32 (0 for NaN and infinities). */
size_t grove_fmt_f64(double v, char *out);
size_t grove_fmt_f32(float v, char *out);

/* Converts numeric values in place to h5grove's dtype=safe: float16 to
 * float32, big-endian to little-endian (values->data is replaced with
 * memory from a, values->type with a converted type). */
int grove_make_safe(grove_values *v, arena *a, cellar_error *err);

/* A scalar as numpy hands it out (h5py returns numpy scalars for them):
 * numbers in native byte order, a fixed-length string without its
 * trailing NULs. */
int grove_make_scalar(grove_values *v, arena *a, cellar_error *err);

/* The encodings of /data/ (format=bin, npy, csv, tiff) appended to out.
 * Each returns 0, or CELLAR_EFORMAT (422) with h5grove's message when the
 * values cannot be encoded so.  bin of values that already lie in out's
 * reserved room, just past its length, only counts them in. */
int grove_encode_bin(const grove_values *v, buf *out, cellar_error *err);
int grove_encode_npy(const grove_values *v, arena *a, buf *out, cellar_error *err);
int grove_encode_csv(const grove_values *v, buf *out, cellar_error *err);
int grove_encode_tiff(const grove_values *v, buf *out, cellar_error *err);

/* The value of element i of numeric (not complex) values as a double, and
 * whether it is an integer kind (then *iv holds it exactly). */
double grove_number_at(const grove_values *v, uint64_t i, int *is_int, int64_t *iv,
                       int *is_unsigned);

/* ---- request helpers (api/h5grove/grove.c) ---- */

/* The last value of query parameter name (h5grove reads the last), or NULL. */
const char *grove_param(const api_request *req, const char *name);

/* `path`, "/" when absent. */
const char *grove_path(const api_request *req);

/* resolve_links as h5grove parses it (only_valid when absent). */
int grove_links_param(const api_request *req, h5g_links *out, cellar_error *err);

/* Opens the store of the request (api_open_store), a file the server may
 * not read being 403 as in h5grove. */
int grove_open_store(api_request *req, cellar_error *err);

/* Opens the store of the request and the entity at path, with h5grove's
 * messages for what is not there (404). */
int grove_open(api_request *req, const char *path, h5g_links links, h5g_object *o,
               cellar_error *err);

/* Starts a JSON answer in res written with j (limit: --max-response-bytes). */
int grove_json_begin(api_request *req, api_response *res, json_out *j, cellar_error *err);

/* Finishes it: 0, or the writer's error. */
int grove_json_end(api_response *res, json_out *j, cellar_error *err);

#endif
