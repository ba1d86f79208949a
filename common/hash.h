/* A 64-bit hash of bytes, the same in every process and on every machine
 * (ETags that replicas must agree on, hash tables). */
#ifndef CELLAR_HASH_H
#define CELLAR_HASH_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a over n bytes, finished with a murmur-style mix so that the low
 * bits are well spread.  Not for untrusted keys an attacker picks to
 * collide where a collision costs more than a comparison. */
uint64_t hash64(const void *p, size_t n);

#endif
