/* A heap that faults where libhdf5 strays, for the probe process
 * (storage/README.md, "Trust"; server/probe.c).
 *
 * The probe vouches for a file by walking it with libhdf5 and surviving.
 * On damaged files libhdf5 reads and writes past the ends of its own
 * buffers (a global heap collection copied past its end while reading a
 * vlen string attribute, found by valgrind on the malformed corpus).  In
 * a fresh probe process such a stray access usually lands in mapped heap
 * and goes unnoticed, so the probe passed the file; in the long-running
 * server, whose heap is laid out otherwise, the very same read of the same
 * bytes crashed.  So in the probe process every block of at least
 * PROBE_HEAP_GUARD_MIN bytes is placed at the end of pages of its own with
 * an inaccessible page behind it, and its pages become inaccessible again
 * when it is freed (never reused): a read or write past its end, or after
 * it was freed, is a segmentation fault there, which the server counts as
 * a crashed probe and answers 422 for the version.  Smaller blocks, and
 * blocks past the resident bound PROBE_HEAP_GUARD_RESIDENT, come from
 * glibc's heap as usual.
 *
 * The binary's malloc, calloc, realloc and free are this module's; they
 * hand everything to glibc until probe_heap_guard() is called, which only
 * the probe process does, before it walks a file.  Sanitizer builds leave
 * the allocator to AddressSanitizer (its redzones catch the same accesses)
 * and probe_heap_guard() does nothing.  Linked into the cellar binary
 * only, not into libcellar.a. */
#ifndef CELLAR_PROBE_HEAP_H
#define CELLAR_PROBE_HEAP_H

#include <stddef.h>

/* Blocks this size or larger are guarded. */
#define PROBE_HEAP_GUARD_MIN ((size_t)256)
/* Guarded pages live at once, at most; past it blocks come from glibc. */
#define PROBE_HEAP_GUARD_RESIDENT ((size_t)32 << 20)
/* Address space reserved for guarded blocks (never reused). */
#define PROBE_HEAP_GUARD_RESERVE ((size_t)64 << 30)

/* From now on, guards blocks as above; 0, or -1 when the address space
 * could not be reserved (then nothing is guarded). */
int probe_heap_guard(void);

/* Bytes of guarded pages live now (for tests). */
size_t probe_heap_guarded_bytes(void);

#endif
