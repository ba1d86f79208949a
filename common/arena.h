/* A bump allocator for memory that lives exactly as long as one request
 * (or one build of a derived structure).  Nothing allocated from an arena is
 * freed individually; arena_free releases everything at once.
 *
 * An arena is not thread-safe: one owner at a time. */
#ifndef CELLAR_ARENA_H
#define CELLAR_ARENA_H

#include <stdarg.h>
#include <stddef.h>

typedef struct arena arena;

/* Returns a new empty arena, or NULL when out of memory. Caller frees it
 * with arena_free. */
arena *arena_new(void);

/* Frees the arena and everything allocated from it. NULL is fine. */
void arena_free(arena *a);

/* Returns n bytes aligned for any type, zeroed, owned by the arena; NULL when
 * out of memory or when n overflows.  arena_alloc(a, 0) returns a valid
 * non-NULL pointer. */
void *arena_alloc(arena *a, size_t n);

/* arena_alloc(a, count * size) with an overflow check. */
void *arena_calloc(arena *a, size_t count, size_t size);

/* Copies s (or its first n bytes) into the arena, NUL-terminated. */
char *arena_strdup(arena *a, const char *s);
char *arena_strndup(arena *a, const char *s, size_t n);

/* printf into arena memory. */
char *arena_printf(arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
char *arena_vprintf(arena *a, const char *fmt, va_list ap);

/* Bytes currently held by the arena (for accounting). */
size_t arena_bytes(const arena *a);

#endif
