/* The memory a structure read whole from one element may take.
 *
 * Categories, a tree's nodes, edges and attribute columns, a map of a
 * MuData axis: each is read whole and sized by an element's shape before a
 * value of it is read.  A shape is metadata and may lie (a 300 KB file
 * claiming a billion categories), and the stored bytes do not bound it
 * either: a compressed or never-written (fill value) array is rightly far
 * larger than its bytes.  These structures serve answers that
 * --max-response-bytes bounds, so the same limit bounds them, checked
 * before anything is allocated.  Thread-safe. */
#ifndef CELLAR_BUDGET_H
#define CELLAR_BUDGET_H

#include <stdint.h>

#include "common/error.h"

/* The bound while none was set, or when it is set to 0 (no answer limit). */
#define BUDGET_DEFAULT_BYTES ((uint64_t)1 << 30)

/* What one string read whole costs: its pointer and its copy in an arena
 * (16 bytes at least). */
#define BUDGET_STRING_BYTES 24

/* Sets the bound (server/main.c passes --max-response-bytes). */
void budget_set_whole(uint64_t bytes);

/* The bound in force. */
uint64_t budget_whole(void);

/* 0 when count items of per_item bytes each fit the bound, else
 * CELLAR_ETOOBIG with a detail naming `what` (e.g. "the categories of
 * '/obs/cell_type'"), its count and the bound. */
int budget_check_whole(int64_t count, uint64_t per_item, const char *what, cellar_error *err);

#endif
