#include "common/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(buf *b)
{
    memset(b, 0, sizeof *b);
}

void buf_destroy(buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

char *buf_reserve(buf *b, size_t n)
{
    if (b->failed)
        return NULL;
    if (n > SIZE_MAX - b->len - 1) {
        b->failed = 1;
        return NULL;
    }
    size_t need = b->len + n + 1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        char *p = realloc(b->data, cap);
        if (!p) {
            b->failed = 1;
            return NULL;
        }
        b->data = p;
        b->cap = cap;
    }
    return b->data + b->len;
}

int buf_append(buf *b, const void *data, size_t n)
{
    char *p = buf_reserve(b, n);
    if (!p)
        return -1;
    if (n)
        memcpy(p, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_puts(buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_putc(buf *b, char c)
{
    return buf_append(b, &c, 1);
}

int buf_printf(buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    if ((size_t)n < sizeof small)
        return buf_append(b, small, (size_t)n);
    char *p = buf_reserve(b, (size_t)n);
    if (!p)
        return -1;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

char *buf_steal(buf *b, size_t *len)
{
    char *p = b->data;
    if (len)
        *len = b->len;
    memset(b, 0, sizeof *b);
    return p;
}
