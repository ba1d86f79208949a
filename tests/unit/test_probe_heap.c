/* The probe process's guarded heap (server/probe_heap.c): each case runs in
 * a forked child that turns the guard on, so the runner's own heap stays
 * glibc's. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/probe_heap.h"
#include "tests/unit/unit.h"

#if defined(__SANITIZE_ADDRESS__)

void test_probe_heap_guard(void)
{
    /* AddressSanitizer keeps the allocator (its redzones do this job). */
    CHECK_EQ(probe_heap_guard(), 0);
    CHECK_EQ(probe_heap_guarded_bytes(), 0);
}

#else

/* How a child running fn ended: the signal that stopped it, or 0 when it
 * exited with status 0 (-1 otherwise). */
static int run_guarded(void (*fn)(void))
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        signal(SIGABRT, SIG_DFL);
        if (probe_heap_guard() != 0)
            _exit(3);
        fn();
        _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    if (WIFSIGNALED(status))
        return WTERMSIG(status);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static volatile char sink;

/* p, out of the compiler's sight (the stray accesses below are the point). */
static volatile char *opaque(void *p)
{
    volatile uintptr_t u = (uintptr_t)p;
    return (volatile char *)u;
}

static void read_past_end(void)
{
    char *p = malloc(1024);
    if (!p)
        _exit(4);
    memset(p, 1, 1024);
    sink = p[1023];
    sink = opaque(p)[1024]; /* the page behind the block */
    _exit(5);
}

static void write_past_end(void)
{
    char *p = calloc(64, 64);
    if (!p)
        _exit(4);
    opaque(p)[4096] = 1;
    _exit(5);
}

static void read_after_free(void)
{
    char *p = malloc(5000);
    if (!p)
        _exit(4);
    memset(p, 2, 5000);
    volatile char *q = opaque(p);
    free(p);
    sink = q[0];
    _exit(5);
}

static void write_before_block(void)
{
    char *p = malloc(512);
    if (!p)
        _exit(4);
    opaque(p)[-4] = 0; /* inside the block's header */
    free(p);
    _exit(5);
}

/* Exits 6 + the number of the first check that does not hold. */
static void ordinary_use(void)
{
    char *small = malloc(16);
    if (!small || probe_heap_guarded_bytes() != 0)
        _exit(6); /* small blocks come from glibc */
    unsigned char *z = calloc(300, 1);
    if (!z || probe_heap_guarded_bytes() == 0)
        _exit(7);
    for (int i = 0; i < 300; i++)
        if (z[i])
            _exit(8);
    if (((uintptr_t)z & 15) != 0)
        _exit(9);
    memset(z, 7, 300);
    unsigned char *grown = realloc(z, 100000); /* guarded to guarded */
    if (!grown || grown[0] != 7 || grown[299] != 7)
        _exit(10);
    memset(grown + 300, 8, 100000 - 300);
    unsigned char *shrunk = realloc(grown, 100); /* to glibc */
    if (!shrunk || shrunk[99] != 7)
        _exit(11);
    char *moved = realloc(small, 1000); /* glibc to guarded */
    if (!moved)
        _exit(12);
    free(shrunk);
    free(moved);
    if (probe_heap_guarded_bytes() != 0)
        _exit(13); /* every guarded page given back */
    _exit(0);
}

/* Past the resident bound blocks come from glibc, and work. */
static void over_the_bound(void)
{
    size_t n = PROBE_HEAP_GUARD_RESIDENT / 4096 + 100;
    char **blocks = malloc(n * sizeof *blocks); /* 64 KiB: guarded itself */
    if (!blocks)
        _exit(6);
    for (size_t i = 0; i < n; i++) {
        blocks[i] = malloc(4000);
        if (!blocks[i])
            _exit(7);
        memset(blocks[i], (int)i, 4000);
    }
    if (probe_heap_guarded_bytes() > PROBE_HEAP_GUARD_RESIDENT)
        _exit(8);
    for (size_t i = 0; i < n; i++)
        free(blocks[i]);
    free(blocks);
    _exit(probe_heap_guarded_bytes() == 0 ? 0 : 9);
}

void test_probe_heap_guard(void)
{
    CHECK_EQ(run_guarded(read_past_end), SIGSEGV);
    CHECK_EQ(run_guarded(write_past_end), SIGSEGV);
    CHECK_EQ(run_guarded(read_after_free), SIGSEGV);
    CHECK_EQ(run_guarded(write_before_block), SIGABRT);
    CHECK_EQ(run_guarded(ordinary_use), 0);
    CHECK_EQ(run_guarded(over_the_bound), 0);
    /* Where the guard was never turned on (the server), blocks are glibc's. */
    char *p = malloc(1024);
    CHECK(p != NULL);
    CHECK_EQ(probe_heap_guarded_bytes(), 0);
    free(p);
}

#endif
