/* Fuzz target: the probe's walk over an HDF5 file image (h5_probe_file,
 * storage/hdf5/h5_probe.c), as the probe process runs it before the
 * server may open a file version with libhdf5.
 *
 * The input is the file's bytes, written to a scratch file and walked with
 * small bounds.  Invariants: the walk ends with 0 or one of its documented
 * errors (detail set), its report stays within the bounds, and a second
 * walk of the same bytes reports the same (nothing read uninitialised).
 *
 * libhdf5 itself is not safe on hostile bytes, and a crash inside it is
 * what the probe process exists to contain (tests/http/test_probe.py shows
 * the server surviving them).  `make fuzz` therefore runs this target in
 * libFuzzer's fork mode, going on past crashes, and then judges each crash
 * it saved (tests/fuzz/judge_h5_crashes.sh): one whose first frame outside
 * the sanitizer runtime is in libhdf5 is libhdf5's; any other is ours and
 * fails the run.  The corpus (tests/fuzz/make_h5_probe_seeds.py) holds only
 * inputs libhdf5 survives, so make test replays it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "tests/fuzz/fuzz.h"
#include "common/error.h"
#include "storage/hdf5/h5_probe.h"

#define SCRATCH_PREFIX "cellar-h5probe-"

static char scratch[256];

static const char *scratch_base(void)
{
    return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

/* Scratch files of fuzzing processes that died (a crash in fork mode
 * leaves its file behind): removed when their process is gone. */
static void remove_stale_scratch(void)
{
    DIR *d = opendir(scratch_base());
    if (!d)
        return;
    struct dirent *e;
    size_t pl = strlen(SCRATCH_PREFIX);
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, SCRATCH_PREFIX, pl) != 0)
            continue;
        long pid = strtol(e->d_name + pl, NULL, 10);
        if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
            char path[512];
            snprintf(path, sizeof path, "%s/%s", scratch_base(), e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

static void scratch_remove(void)
{
    if (scratch[0])
        unlink(scratch);
}

static const char *scratch_file(void)
{
    if (scratch[0])
        return scratch;
    remove_stale_scratch();
    snprintf(scratch, sizeof scratch, "%s/" SCRATCH_PREFIX "%ld.h5", scratch_base(),
             (long)getpid());
    atexit(scratch_remove);
    return scratch;
}

static void write_image(const char *path, const uint8_t *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    MUST(fd >= 0);
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(fd, data + done, size - done);
        MUST(n > 0);
        done += (size_t)n;
    }
    MUST(close(fd) == 0);
}

static int walk(const char *path, const h5_probe_limits *lim, h5_probe_report *rep)
{
    cellar_error err;
    cellar_error_clear(&err);
    memset(rep, 0, sizeof *rep);
    int rc = h5_probe_file(path, lim, rep, &err);
    MUST(rc == 0 || rc == CELLAR_EFORMAT || rc == CELLAR_ENOTFOUND || rc == CELLAR_EIO ||
         rc == CELLAR_ENOMEM);
    if (rc) {
        MUST(err.code == rc && err.detail[0]);
        return rc;
    }
    MUST(rep->groups >= 1); /* the root */
    MUST(rep->groups + rep->datasets <= lim->max_objects + 1);
    MUST(rep->strings_read <= lim->max_string_values);
    MUST(rep->bytes_read <= lim->max_read_bytes);
    MUST(rep->chunk_lookups <= lim->max_chunk_lookups);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > ((size_t)1 << 20))
        return 0;
    const h5_probe_limits lim = {.max_objects = 2000,
                                 .max_string_values = 20000,
                                 .max_read_bytes = (uint64_t)4 << 20,
                                 .max_chunk_lookups = 20000};
    const char *path = scratch_file();
    write_image(path, data, size);
    h5_probe_report first, second;
    int rc = walk(path, &lim, &first);
    int again = walk(path, &lim, &second);
    MUST(again == rc);
    if (rc == 0)
        MUST(first.groups == second.groups && first.datasets == second.datasets &&
             first.attributes == second.attributes && first.strings_read == second.strings_read &&
             first.bytes_read == second.bytes_read &&
             first.chunk_lookups == second.chunk_lookups && first.broken == second.broken &&
             first.over_limit == second.over_limit);
    unlink(path);
    return 0;
}

#define FUZZ_NAME "h5_probe"
#include "tests/fuzz/replay_main.h"
