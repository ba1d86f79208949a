/* A set of 64-bit integers (object addresses already walked), open
 * addressing, grown by doubling.  Zero-initialize, free with u64set_free. */
#ifndef CELLAR_U64SET_H
#define CELLAR_U64SET_H

#include <stddef.h>
#include <stdint.h>

typedef struct u64set {
    uint64_t *slots; /* 0 = empty; values are stored + 1 */
    size_t cap, count;
} u64set;

/* Adds v: 1 when it was new, 0 when already there, -1 when out of memory. */
int u64set_add(u64set *s, uint64_t v);

void u64set_free(u64set *s);

#endif
