/* JSON output: a streaming writer into a buf (compact, as yajl's generator
 * wrote it), with
 * exact number formatting and string sanitizing.
 *
 * Numbers: integers are written as integers over the full int64/uint64
 * range; float64 with the shortest text that reads back to the same double,
 * float32 with the shortest text that reads back to the same float (float16
 * is widened to float32 first); NaN and +-inf become null.  Strings: any
 * bytes become valid JSON; invalid UTF-8 sequences are replaced by U+FFFD and
 * control characters are escaped.
 *
 * The number and UTF-8 helpers underneath are common/numfmt.h and
 * common/utf8.h.  Also small helpers for jansson documents (summaries, schemas): a sanitizing
 * string constructor and a dump into a response. */
#ifndef CELLAR_JSON_OUT_H
#define CELLAR_JSON_OUT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <yajl/yajl_gen.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/numfmt.h"
#include "common/utf8.h"
#include "storage/dtype.h"

/* The longest text the formatters write for one value of a numeric kind in
 * JSON or CSV, separator included (for bounding an answer before reading). */
uint64_t fmt_max_text(dtype_kind dt);

/* Formats element i of a typed array (numeric or bool) as text: integers in
 * decimal, floats as above (0 = NaN/inf, which the caller treats as missing),
 * bools as `true_text` / `false_text`.  Returns the length. */
size_t fmt_typed(dtype_kind dt, const void *data, int64_t i, const char *true_text,
                 const char *false_text, char *out);

/* Whether element i of a float array is NaN or infinite (0 for other types). */
int typed_is_nonfinite(dtype_kind dt, const void *data, int64_t i);

/* ---- streaming writer ---- */

/* Nesting the writer accepts (as yajl's generator did). */
#define JSON_OUT_MAX_DEPTH 128

typedef struct json_out {
    buf *out;          /* borrowed: where the text goes */
    uint64_t limit;    /* fail once out grows past this; 0 = no limit */
    int over;          /* the limit was passed */
    int failed;        /* misuse (a non-string key, too deep) or memory failure */
    buf scratch;       /* sanitized copies of invalid strings */
    unsigned depth;    /* open maps and arrays */
    unsigned char state[JSON_OUT_MAX_DEPTH + 1]; /* what comes next at each depth */
} json_out;

/* Starts writing into out (appending). limit 0 = unlimited.
 * Returns 0 or CELLAR_ENOMEM. json_out_destroy frees the generator. */
int json_out_init(json_out *j, buf *out, uint64_t limit, cellar_error *err);
void json_out_destroy(json_out *j);

/* Each returns 0, or -1 once the writer has failed (see json_out_finish). */
int json_out_map_open(json_out *j);
int json_out_map_close(json_out *j);
int json_out_array_open(json_out *j);
int json_out_array_close(json_out *j);
int json_out_null(json_out *j);
int json_out_bool(json_out *j, int v);
int json_out_str(json_out *j, const char *s);       /* NULL writes null */
int json_out_strn(json_out *j, const char *s, size_t n);
/* A value given as its JSON text, written as it is: the caller vouches that
 * it is valid compact JSON (the attribute texts of storage/trees are). */
int json_out_raw(json_out *j, const char *text, size_t n);
int json_out_int(json_out *j, int64_t v);
int json_out_uint(json_out *j, uint64_t v);
int json_out_f64(json_out *j, double v);
int json_out_f32(json_out *j, float v);
/* Element i of a typed numeric/bool array. */
int json_out_typed(json_out *j, dtype_kind dt, const void *data, int64_t i);

/* Whether the writer is still fine; for loops to stop early. */
static inline int json_out_ok(const json_out *j)
{
    return !j->over && !j->failed && !j->out->failed;
}

/* Reports how writing went: 0, CELLAR_ETOOBIG (detail names `limit`, and
 * `hint` when not NULL is appended), CELLAR_ENOMEM, or CELLAR_EINTERNAL. */
int json_out_finish(json_out *j, const char *hint, cellar_error *err);

/* ---- jansson helpers ---- */

/* json_string of s with invalid UTF-8 replaced (never NULL for non-NULL s
 * unless out of memory); NULL s gives json_null().  New reference. */
json_t *json_str_sanitized(const char *s);

/* Serializes doc compactly into out. 0, or CELLAR_ENOMEM. */
int json_dump_buf(const json_t *doc, buf *out, cellar_error *err);

#endif
