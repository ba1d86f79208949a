#include "common/arena.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ARENA_ALIGN = 16, ARENA_BLOCK = 64 * 1024 };

typedef struct block {
    struct block *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
} block;

struct arena {
    block *head;
    size_t total;
};

arena *arena_new(void)
{
    return calloc(1, sizeof(arena));
}

void arena_free(arena *a)
{
    if (!a)
        return;
    block *b = a->head;
    while (b) {
        block *next = b->next;
        free(b);
        b = next;
    }
    free(a);
}

static block *arena_grow(arena *a, size_t need)
{
    size_t size = need > ARENA_BLOCK ? need : ARENA_BLOCK;
    if (size > SIZE_MAX - sizeof(block))
        return NULL;
    block *b = malloc(sizeof(block) + size);
    if (!b)
        return NULL;
    b->size = size;
    b->used = 0;
    /* A big one-off allocation goes behind the current block so the
     * remaining space of the current block stays usable. */
    if (a->head && need > ARENA_BLOCK) {
        b->next = a->head->next;
        a->head->next = b;
    } else {
        b->next = a->head;
        a->head = b;
    }
    a->total += size;
    return b;
}

void *arena_alloc(arena *a, size_t n)
{
    if (n > SIZE_MAX - ARENA_ALIGN)
        return NULL;
    size_t rounded = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (rounded == 0)
        rounded = ARENA_ALIGN;
    block *b = a->head;
    if (!b || b->size - b->used < rounded) {
        b = arena_grow(a, rounded);
        if (!b)
            return NULL;
    }
    void *p = b->data + b->used;
    b->used += rounded;
    memset(p, 0, rounded);
    return p;
}

void *arena_calloc(arena *a, size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    return arena_alloc(a, count * size);
}

char *arena_strndup(arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *arena_strdup(arena *a, const char *s)
{
    return arena_strndup(a, s, strlen(s));
}

char *arena_vprintf(arena *a, const char *fmt, va_list ap)
{
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    if (n < 0)
        return NULL;
    char *p = arena_alloc(a, (size_t)n + 1);
    if (!p)
        return NULL;
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    return p;
}

char *arena_printf(arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *p = arena_vprintf(a, fmt, ap);
    va_end(ap);
    return p;
}

size_t arena_bytes(const arena *a)
{
    return a->total;
}
