/* A growable byte buffer on the heap: how response bodies are built before
 * they are handed to the HTTP layer, which takes ownership of the bytes. */
#ifndef CELLAR_BUF_H
#define CELLAR_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct buf {
    char *data;   /* malloc'd, NUL-terminated when len < cap; may be NULL */
    size_t len, cap;
    int failed;   /* set when an append ran out of memory; sticky */
} buf;

/* A zeroed buf is empty and valid; buf_init exists for symmetry. */
void buf_init(buf *b);

/* Frees the bytes; the buf is empty and reusable afterwards. */
void buf_destroy(buf *b);

/* Appends; on allocation failure sets b->failed and returns -1. */
int buf_append(buf *b, const void *data, size_t n);
int buf_puts(buf *b, const char *s);
int buf_putc(buf *b, char c);
int buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Makes room for n more bytes and returns where they go (len unchanged);
 * NULL on failure. Follow with buf->len += written. */
char *buf_reserve(buf *b, size_t n);

/* Hands the bytes to the caller (who frees them with free) and empties b. */
char *buf_steal(buf *b, size_t *len);

#endif
