#include "server/probe_heap.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PROBE_HEAP_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define PROBE_HEAP_OFF 1
#endif
#endif

#ifdef PROBE_HEAP_OFF

int probe_heap_guard(void)
{
    return 0;
}

size_t probe_heap_guarded_bytes(void)
{
    return 0;
}

#else

/* glibc's own allocator, which the functions below stand in front of. */
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void __libc_free(void *p);

/* Right in front of every guarded block, the magic nearest to it. */
typedef struct guard_header {
    uint32_t size;  /* what was asked for */
    uint32_t pages; /* readable pages, the block's last */
    uint64_t magic;
} guard_header;

#define GUARD_MAGIC 0x63656c6c61726764ull /* "cellargd" */

/* Process-wide on purpose: the allocator is.  Set once by
 * probe_heap_guard before any guarded block exists. */
static char *guard_base, *guard_end;
static size_t guard_page;
static _Atomic int guard_on;
static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static char *guard_next;     /* under guard_lock */
static size_t guard_resident; /* under guard_lock */

int probe_heap_guard(void)
{
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        return -1;
    void *base = mmap(NULL, PROBE_HEAP_GUARD_RESERVE, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED)
        return -1;
    pthread_mutex_lock(&guard_lock);
    guard_page = (size_t)page;
    guard_base = guard_next = base;
    guard_end = guard_base + PROBE_HEAP_GUARD_RESERVE;
    pthread_mutex_unlock(&guard_lock);
    guard_on = 1;
    return 0;
}

size_t probe_heap_guarded_bytes(void)
{
    pthread_mutex_lock(&guard_lock);
    size_t n = guard_resident;
    pthread_mutex_unlock(&guard_lock);
    return n;
}

static int is_guarded(const void *p)
{
    return guard_base && (const char *)p >= guard_base && (const char *)p < guard_end;
}

/* A guarded block of size bytes (zeroed: its pages are new), or NULL when
 * this one is not to be guarded. */
static size_t pages_for(size_t size)
{
    size_t rounded = (size + 15) & ~(size_t)15; /* malloc's alignment at the end */
    return (rounded + sizeof(guard_header) + guard_page - 1) / guard_page;
}

static void *guarded_alloc(size_t size)
{
    if (!guard_on || size < PROBE_HEAP_GUARD_MIN || size > UINT32_MAX)
        return NULL;
    size_t rounded = (size + 15) & ~(size_t)15;
    size_t pages = pages_for(size);
    size_t bytes = pages * guard_page;
    char *start = NULL;
    pthread_mutex_lock(&guard_lock);
    if (guard_resident + bytes <= PROBE_HEAP_GUARD_RESIDENT &&
        (size_t)(guard_end - guard_next) > bytes + guard_page) {
        start = guard_next;
        guard_next += bytes + guard_page; /* the page behind stays inaccessible */
        guard_resident += bytes;
    }
    pthread_mutex_unlock(&guard_lock);
    if (!start)
        return NULL;
    if (mprotect(start, bytes, PROT_READ | PROT_WRITE) != 0) {
        pthread_mutex_lock(&guard_lock);
        guard_resident -= bytes;
        pthread_mutex_unlock(&guard_lock);
        return NULL;
    }
    char *p = start + bytes - rounded;
    guard_header h = {.magic = GUARD_MAGIC, .size = (uint32_t)size, .pages = (uint32_t)pages};
    memcpy(p - sizeof h, &h, sizeof h);
    return p;
}

static guard_header header_of(const void *p)
{
    guard_header h;
    memcpy(&h, (const char *)p - sizeof h, sizeof h);
    if (h.magic != GUARD_MAGIC || h.pages != pages_for(h.size))
        abort(); /* a stray write before the block: as unsafe as one after it */
    return h;
}

/* Makes the block's pages inaccessible for good (a use after free faults). */
static void guarded_free(void *p)
{
    guard_header h = header_of(p);
    size_t rounded = ((size_t)h.size + 15) & ~(size_t)15;
    size_t bytes = (size_t)h.pages * guard_page;
    char *start = (char *)p + rounded - bytes;
    madvise(start, bytes, MADV_DONTNEED);
    mprotect(start, bytes, PROT_NONE);
    pthread_mutex_lock(&guard_lock);
    guard_resident -= bytes;
    pthread_mutex_unlock(&guard_lock);
}

void *malloc(size_t size)
{
    void *p = guarded_alloc(size);
    return p ? p : __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = guarded_alloc(n * size);
    return p ? p : __libc_calloc(n, size);
}

void free(void *p)
{
    if (!p)
        return;
    if (is_guarded(p))
        guarded_free(p);
    else
        __libc_free(p);
}

void *realloc(void *p, size_t size)
{
    if (!p)
        return malloc(size);
    if (!is_guarded(p)) {
        if (!guard_on || size < PROBE_HEAP_GUARD_MIN)
            return __libc_realloc(p, size);
        void *q = guarded_alloc(size);
        if (!q)
            return __libc_realloc(p, size);
        size_t old = malloc_usable_size(p); /* glibc's, of glibc's block */
        memcpy(q, p, old < size ? old : size);
        __libc_free(p);
        return q;
    }
    if (size == 0) {
        guarded_free(p);
        return NULL;
    }
    size_t old = header_of(p).size;
    void *q = malloc(size);
    if (!q)
        return NULL;
    memcpy(q, p, old < size ? old : size);
    guarded_free(p);
    return q;
}

#endif
