/* Selections along one axis: what `rows=` / `cols=` / `mod_rows=` say, and
 * what a backend read takes.
 *
 * A parsed selection is either a Python-style slice (start:stop[:step], any
 * part may be omitted, negatives count from the end) or an explicit list of
 * positions (negatives count from the end, duplicates and any order allowed).
 * It is resolved against an axis length into a dim_sel of in-range,
 * non-negative positions. */
#ifndef CELLAR_SELECTION_H
#define CELLAR_SELECTION_H

#include <stddef.h>
#include <stdint.h>

#include "common/arena.h"
#include "common/error.h"

/* What the user wrote, before the axis length is known. */
typedef struct selection {
    int is_list;
    /* slice: has_* say which parts were given */
    int has_start, has_stop, has_step;
    int64_t start, stop, step;
    /* list */
    int64_t *items;   /* arena-owned */
    size_t count;
} selection;

/* A resolved selection along one axis: either `count` positions
 * start, start+step, ... (step may be negative, never 0) or, when index is
 * non-NULL, the `count` positions in index[].  Every position is in
 * [0, axis length). */
typedef struct dim_sel {
    int64_t start, step;
    int64_t count;
    const int64_t *index; /* arena-owned, or NULL for a slice */
} dim_sel;

/* Parses len bytes at s as one decimal integer: an optional sign, digits
 * only (blanks around it allowed; no hex, no exponent, no fraction).
 * Returns 0 with *out set, SELECTION_INT_BAD when it is not an integer, or
 * SELECTION_INT_RANGE when it is one outside int64 (never a wrap).  Every
 * integer a request gives goes through it. */
#define SELECTION_INT_BAD (-1)
#define SELECTION_INT_RANGE (-2)
int selection_parse_int(const char *s, size_t len, int64_t *out);

/* The whole axis. */
selection selection_all(void);

/* Parses "start:stop[:step]" or "3,17,42" (whitespace around items is
 * allowed).  Errors: CELLAR_EINVAL with a detail naming `what` (e.g. "rows").
 * Lists are allocated from a. */
int selection_parse(const char *text, const char *what, arena *a, selection *out,
                    cellar_error *err);

/* Builds a list selection from already-parsed positions (copied into a). */
int selection_from_list(const int64_t *items, size_t count, arena *a, selection *out,
                        cellar_error *err);

/* Resolves against an axis of `length` items, like Python: slices clamp,
 * list items out of range fail with CELLAR_ERANGE naming `what`, a zero
 * step fails with CELLAR_EINVAL.  A list that turns out to be a contiguous
 * ascending run is resolved to a slice (cheaper reads). */
int selection_resolve(const selection *sel, int64_t length, const char *what, arena *a,
                      dim_sel *out, cellar_error *err);

/* Position of the i-th selected item (0 <= i < d->count). */
static inline int64_t dim_sel_at(const dim_sel *d, int64_t i)
{
    return d->index ? d->index[i] : d->start + i * d->step;
}

/* For a slice (no index): how many of its positions from the k-th on stay
 * in the chunk of `chunk` entries holding the k-th (at most count - k); that
 * chunk's number in *chunk_no.  Readers walk a slice chunk by chunk with it. */
static inline int64_t dim_sel_run_in_chunk(const dim_sel *s, int64_t k, int64_t chunk,
                                           int64_t *chunk_no)
{
    /* From the offset inside the chunk, so that nothing near INT64_MAX is
     * formed; |step| unsigned (it may be INT64_MIN). */
    int64_t pos = s->start + k * s->step, in = pos % chunk, n;
    uint64_t abs_step = s->step < 0 ? (uint64_t)0 - (uint64_t)s->step : (uint64_t)s->step;
    if (s->step > 0)
        n = (int64_t)((uint64_t)(chunk - 1 - in) / abs_step) + 1;
    else
        n = (int64_t)((uint64_t)in / abs_step) + 1;
    *chunk_no = pos / chunk;
    return n > s->count - k ? s->count - k : n;
}

/* A dim_sel covering [0, length). */
dim_sel dim_sel_range(int64_t start, int64_t count);

#endif
