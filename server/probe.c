#include "server/probe.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "storage/hdf5/h5.h"
#include "storage/hdf5/h5_probe.h"

/* The verdict line the child prints; everything else it prints (sanitizer
 * reports, say) is kept only for the log, but for the names of other files
 * the file's elements name, one a line before the verdict. */
#define VERDICT_TAG "CELLAR-PROBE "
#define TARGET_TAG "CELLAR-TARGET "
/* What the parent keeps of the child's output. */
#define OUTPUT_MAX 16384
/* How often the parent looks at the child's resident memory.  The bound
 * is watched rather than set as RLIMIT_AS: under an address-space limit a
 * huge allocation inside libhdf5 (a vlen conversion buffer sized by a lying
 * header) fails cleanly in the probe, which would then pass the file, and
 * the server, without that limit, would make the allocation for real.
 * (Sanitizer builds also reserve terabytes of address space.) */
#define WATCH_MS 10

struct probe_runner {
    probe_runner_config cfg;
    pthread_mutex_t lock;
    pthread_cond_t slot_free;
    unsigned running;
    atomic_int stopping;
};

probe_runner *probe_runner_new(const probe_runner_config *cfg)
{
    probe_runner *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->cfg = *cfg;
    if (p->cfg.concurrency == 0)
        p->cfg.concurrency = 1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->slot_free, NULL);
    return p;
}

void probe_runner_free(probe_runner *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->slot_free);
    free(p);
}

void probe_runner_stop(void *ctx)
{
    probe_runner *p = ctx;
    atomic_store(&p->stopping, 1);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---------------------------------------------------------- the child */

static void print_identity(const struct stat *st)
{
    printf("%llu %llu %llu %lld %ld %lld %ld", (unsigned long long)st->st_dev,
           (unsigned long long)st->st_ino, (unsigned long long)st->st_size,
           (long long)st->st_mtim.tv_sec, (long)st->st_mtim.tv_nsec,
           (long long)st->st_ctim.tv_sec, (long)st->st_ctim.tv_nsec);
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

void probe_child_main(const char *path)
{
    h5_library_init();
    struct stat before, after;
    if (stat(path, &before) != 0) {
        printf(VERDICT_TAG "gone\n");
        fflush(stdout);
        _exit(0);
    }
    h5_probe_limits lim = H5_PROBE_DEFAULT_LIMITS;
    h5_probe_report rep;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = h5_probe_file(path, &lim, &rep, &err);
    if (stat(path, &after) != 0 || !same_file(&before, &after)) {
        printf(VERDICT_TAG "gone\n");
    } else if (rc == CELLAR_ENOMEM) {
        printf(VERDICT_TAG "nomem\n");
    } else {
        for (char *c = err.detail; *c; c++)
            if (*c == '\n' || *c == '\r')
                *c = ' ';
        for (const char *t = rc ? "" : rep.targets; *t;) {
            size_t len = strcspn(t, "\n");
            printf(TARGET_TAG "%.*s\n", (int)len, t);
            t += len + (t[len] == '\n');
        }
        printf(VERDICT_TAG "%s ", rc ? "fail" : "ok");
        print_identity(&before);
        if (rc)
            printf(" %s\n", err.detail);
        else
            printf(" %llu %llu %llu %llu %llu %llu %llu %d\n", (unsigned long long)rep.groups,
                   (unsigned long long)rep.datasets, (unsigned long long)rep.attributes,
                   (unsigned long long)rep.strings_read, (unsigned long long)rep.bytes_read,
                   (unsigned long long)rep.chunk_lookups, (unsigned long long)rep.broken,
                   rep.over_limit);
    }
    fflush(stdout);
    /* _exit: no exit handlers (a leak report of a walk cut short is not a verdict). */
    _exit(0);
}

/* The child's reads of a file the parent reads for it (a remote object):
 * on fd PROBE_READ_FD it sends the offset and length (two little-endian
 * u64) and gets one status byte (0: the bytes follow) and the bytes. */
#define PROBE_READ_FD 3
#define PROBE_READ_MAX ((uint64_t)64 << 20)

static int full_io(int fd, void *p, size_t n, int writing)
{
    char *c = p;
    while (n) {
        ssize_t k = writing ? write(fd, c, n) : read(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static int child_read_remote(void *ctx, uint64_t off, size_t n, void *buf, cellar_error *err)
{
    (void)ctx;
    uint64_t q[2] = {off, (uint64_t)n};
    unsigned char status = 1;
    if (full_io(PROBE_READ_FD, q, sizeof q, 1) || full_io(PROBE_READ_FD, &status, 1, 0) ||
        status != 0 || full_io(PROBE_READ_FD, buf, n, 0))
        return cellar_fail(err, CELLAR_EIO, "the server could not read the file for the probe");
    return 0;
}

void probe_child_main_reader(const char *size_text)
{
    h5_library_init();
    char *end = NULL;
    unsigned long long size = strtoull(size_text, &end, 10);
    h5_reader rd = {.ctx = NULL, .size = size, .read = child_read_remote};
    h5_probe_limits lim = H5_PROBE_DEFAULT_LIMITS;
    h5_probe_report rep;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = end && !*end ? h5_probe_reader(&rd, "the remote file", &lim, &rep, &err)
                          : cellar_fail(&err, CELLAR_EINVAL, "bad size");
    if (rc == CELLAR_ENOMEM) {
        printf(VERDICT_TAG "nomem\n");
    } else {
        for (char *c = err.detail; *c; c++)
            if (*c == '\n' || *c == '\r')
                *c = ' ';
        printf(VERDICT_TAG "%s 0 0 %llu 0 0 0 0", rc ? "fail" : "ok", size);
        if (rc)
            printf(" %s\n", err.detail);
        else
            printf(" %llu %llu %llu %llu %llu %llu %llu %d\n", (unsigned long long)rep.groups,
                   (unsigned long long)rep.datasets, (unsigned long long)rep.attributes,
                   (unsigned long long)rep.strings_read, (unsigned long long)rep.bytes_read,
                   (unsigned long long)rep.chunk_lookups, (unsigned long long)rep.broken,
                   rep.over_limit);
    }
    fflush(stdout);
    _exit(0);
}

/* --------------------------------------------------------- the parent */

typedef struct child_run {
    pid_t pid;
    int out_fd;
    int read_fd;            /* the parent's end of the reads of rd; -1 */
    /* Closed (EOF) when the child has exec'd: until then its resident
     * memory is the server's, shared copy-on-write since the fork, and
     * says nothing of the probe's. */
    int exec_fd;
    int execed;
    const probe_reader *rd;
    int read_failed;        /* a read of rd failed: the child was stopped */
    cellar_error read_err;
    char output[OUTPUT_MAX + 1];
    size_t output_len;
    int killed_timeout, killed_memory, killed_stop;
    int status;
} child_run;

/* fd moved to a descriptor >= min (close-on-exec), or -1. */
static int fd_above(int fd, int min)
{
    if (fd < 0 || fd >= min)
        return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, min);
    close(fd);
    return moved;
}

/* Starts `<this binary> --probe-file path` (or `--probe-reader SIZE` with the
 * reads of rd on fd 3) with its limits; -1 when it cannot. */
static int child_start(const probe_runner_config *cfg, const char *path, const probe_reader *rd,
                       child_run *c)
{
    int fds[2], sv[2] = {-1, -1}, ex[2];
    if (pipe2(ex, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        close(ex[0]);
        close(ex[1]);
        return -1;
    }
    if (rd && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        close(fds[0]);
        close(fds[1]);
        close(ex[0]);
        close(ex[1]);
        return -1;
    }
    /* The child's ends above the descriptors it keeps, so dup2 onto
     * PROBE_READ_FD clears close-on-exec and never lands on ex[1]. */
    ex[1] = fd_above(ex[1], 10);
    if (rd)
        sv[1] = fd_above(sv[1], 10);
    if (ex[1] < 0 || (rd && sv[1] < 0)) {
        close(fds[0]);
        close(fds[1]);
        close(ex[0]);
        if (ex[1] >= 0)
            close(ex[1]);
        if (rd) {
            close(sv[0]);
            if (sv[1] >= 0)
                close(sv[1]);
        }
        return -1;
    }
    char size_text[32];
    snprintf(size_text, sizeof size_text, "%llu", rd ? (unsigned long long)rd->size : 0ull);
    char *argv_file[] = {"cellar", "--probe-file", (char *)path, NULL};
    char *argv_reader[] = {"cellar", "--probe-reader", size_text, NULL};
    char **argv = rd ? argv_reader : argv_file;
    rlim_t cpu = (rlim_t)ceil(cfg->timeout_seconds) + 1;
    struct rlimit cpu_limit = {cpu, cpu + 1}, no_core = {0, 0};
    sigset_t none;
    sigemptyset(&none);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        close(ex[0]);
        close(ex[1]);
        if (rd) {
            close(sv[0]);
            close(sv[1]);
        }
        return -1;
    }
    if (pid == 0) {
        /* Async-signal-safe calls only until exec. */
        int null_fd = open("/dev/null", O_RDONLY);
        if (null_fd >= 0)
            dup2(null_fd, 0);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        if (rd)
            dup2(sv[1], PROBE_READ_FD);
        /* Every other descriptor goes, but ex[1], which exec closes. */
        int low = rd ? PROBE_READ_FD + 1 : 3;
        int keep = ex[1] >= low ? ex[1] : low - 1;
        if (keep >= low) {
            if (keep > low)
                close_range((unsigned)low, (unsigned)keep - 1, 0);
            close_range((unsigned)keep + 1, ~0u, 0);
        } else {
            close_range((unsigned)low, ~0u, 0);
        }
        setrlimit(RLIMIT_CPU, &cpu_limit);
        setrlimit(RLIMIT_CORE, &no_core);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(fds[1]);
    close(ex[1]);
    memset(c, 0, sizeof *c);
    c->pid = pid;
    c->out_fd = fds[0];
    c->exec_fd = ex[0];
    c->read_fd = -1;
    if (rd) {
        close(sv[1]);
        c->read_fd = sv[0];
        c->rd = rd;
    }
    return 0;
}

/* Answers one read the child asks for; -1 when the child is to be
 * stopped (its request is out of bounds, or the read failed: the verdict
 * is then that failure, not the file's). */
static int serve_read(child_run *c)
{
    uint64_t q[2];
    if (full_io(c->read_fd, q, sizeof q, 0) != 0)
        return -1;
    uint64_t off = q[0], n = q[1];
    unsigned char status = 1;
    if (n > PROBE_READ_MAX || off > c->rd->size || n > c->rd->size - off) {
        full_io(c->read_fd, &status, 1, 1);
        return 0; /* the child reports a read it should not have made */
    }
    void *buf = malloc(n ? (size_t)n : 1);
    cellar_error_clear(&c->read_err);
    int rc = buf ? c->rd->read(c->rd->ctx, off, (size_t)n, buf, &c->read_err)
                 : cellar_fail(&c->read_err, CELLAR_ENOMEM, "out of memory");
    if (rc) {
        c->read_err.code = rc;
        c->read_failed = 1;
        free(buf);
        return -1;
    }
    status = 0;
    int w = full_io(c->read_fd, &status, 1, 1) || full_io(c->read_fd, buf, (size_t)n, 1);
    free(buf);
    return w ? -1 : 0;
}

static uint64_t child_resident_bytes(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    unsigned long long size = 0, resident = 0;
    int n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    return n == 2 ? resident * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/* Whether the child has exec'd (its exec closed the pipe's last writer). */
static int child_execed(child_run *c)
{
    if (c->execed)
        return 1;
    char b;
    struct pollfd pfd = {c->exec_fd, POLLIN, 0};
    if (poll(&pfd, 1, 0) > 0 && read(c->exec_fd, &b, 1) <= 0) {
        c->execed = 1;
        close(c->exec_fd);
        c->exec_fd = -1;
    }
    return c->execed;
}

/* Reads what is there; 1 at end of output. */
static int child_read(child_run *c)
{
    char chunk[4096];
    ssize_t n = read(c->out_fd, chunk, sizeof chunk);
    if (n < 0)
        return errno == EINTR || errno == EAGAIN ? 0 : 1;
    if (n == 0)
        return 1;
    size_t keep = OUTPUT_MAX - c->output_len < (size_t)n ? OUTPUT_MAX - c->output_len : (size_t)n;
    memcpy(c->output + c->output_len, chunk, keep);
    c->output_len += keep;
    c->output[c->output_len] = '\0';
    return 0;
}

/* Follows the child to its end: its output, its deadline, its memory. */
static void child_wait(probe_runner *p, child_run *c, double started)
{
    const probe_runner_config *cfg = &p->cfg;
    int eof = 0;
    for (;;) {
        double left = cfg->timeout_seconds - (now_seconds() - started);
        if (atomic_load(&p->stopping) && !c->killed_stop) {
            kill(c->pid, SIGKILL);
            c->killed_stop = 1;
        }
        if (left <= 0 && !c->killed_timeout && !c->killed_memory) {
            kill(c->pid, SIGKILL);
            c->killed_timeout = 1;
        }
        if (!c->killed_timeout && !c->killed_memory &&
            child_execed(c) && child_resident_bytes(c->pid) > cfg->memory_bytes) {
            kill(c->pid, SIGKILL);
            c->killed_memory = 1;
        }
        if (eof) {
            pid_t w = waitpid(c->pid, &c->status, WNOHANG);
            if (w == c->pid || (w < 0 && errno != EINTR))
                break;
            struct timespec pause = {0, WATCH_MS * 1000000L};
            nanosleep(&pause, NULL);
            continue;
        }
        struct pollfd pfd[2] = {{c->out_fd, POLLIN, 0}, {c->read_fd, POLLIN, 0}};
        if (poll(pfd, c->read_fd >= 0 ? 2 : 1, WATCH_MS) > 0) {
            if (pfd[0].revents)
                eof = child_read(c);
            if (c->read_fd >= 0 && (pfd[1].revents & (POLLIN | POLLHUP)) && serve_read(c) != 0) {
                close(c->read_fd);
                c->read_fd = -1;
                if (c->read_failed && !c->killed_stop)
                    kill(c->pid, SIGKILL);
            }
        }
    }
    close(c->out_fd);
    if (c->read_fd >= 0)
        close(c->read_fd);
    if (c->exec_fd >= 0)
        close(c->exec_fd);
}

/* A file's identity as the child printed it (print_identity). */
typedef struct printed_id {
    unsigned long long dev, ino, size;
    long long mtime_sec, ctime_sec;
    long mtime_nsec, ctime_nsec;
} printed_id;

/* Reads "dev ino size mtime mtime_ns ctime ctime_ns" at line; the
 * characters used, or 0 when it is not there. */
static int scan_identity(const char *line, printed_id *p)
{
    int used = 0;
    if (sscanf(line, "%llu %llu %llu %lld %ld %lld %ld%n", &p->dev, &p->ino, &p->size,
               &p->mtime_sec, &p->mtime_nsec, &p->ctime_sec, &p->ctime_nsec, &used) != 7)
        return 0;
    return used;
}

static void set_id(probe_file_id *id, const printed_id *p)
{
    id->dev = p->dev;
    id->ino = p->ino;
    id->size = p->size;
    id->mtime_sec = p->mtime_sec;
    id->mtime_nsec = p->mtime_nsec;
    id->ctime_sec = p->ctime_sec;
    id->ctime_nsec = p->ctime_nsec;
}

/* The TARGET_TAG lines the child printed before end, without their tag,
 * in one malloc'd string ("K NAME\n" each), or NULL when none. */
static char *targets_printed(const char *output, const char *end)
{
    size_t total = 0;
    char *out = NULL;
    for (int pass = 0; pass < 2; pass++) {
        size_t at = 0;
        for (const char *t = output; (t = strstr(t, TARGET_TAG)) != NULL && t < end;) {
            if (t != output && t[-1] != '\n') {
                t++;
                continue;
            }
            t += strlen(TARGET_TAG);
            size_t len = strcspn(t, "\n");
            if (out) {
                memcpy(out + at, t, len);
                out[at + len] = '\n';
            }
            at += len + 1;
            t += len;
        }
        if (pass == 0) {
            total = at;
            if (!total || !(out = malloc(total + 1)))
                return NULL;
        }
    }
    out[total] = '\0';
    return out;
}

/* The verdict line of a child that exited normally; 0 when there was one. */
static int parse_verdict(const child_run *c, probe_verdict *v)
{
    const char *line = strstr(c->output, VERDICT_TAG);
    if (!line)
        return -1;
    line += strlen(VERDICT_TAG);
    printed_id id;
    int used = 0;
    if (!strncmp(line, "gone", 4)) {
        v->outcome = PROBE_NOT_RUN;
        snprintf(v->detail, sizeof v->detail, "the file changed while it was checked; retry");
    } else if (!strncmp(line, "nomem", 5)) {
        v->outcome = PROBE_OUT_OF_MEMORY;
        snprintf(v->detail, sizeof v->detail, "reading its metadata ran out of memory");
    } else if (!strncmp(line, "ok ", 3) && scan_identity(line + 3, &id)) {
        v->outcome = PROBE_OK;
        set_id(&v->walked, &id);
        v->targets = targets_printed(c->output, line);
    } else if (!strncmp(line, "fail ", 5) && (used = scan_identity(line + 5, &id)) > 0) {
        v->outcome = PROBE_UNREADABLE;
        set_id(&v->walked, &id);
        const char *detail = line + 5 + used;
        detail += strspn(detail, " ");
        size_t len = strcspn(detail, "\n");
        snprintf(v->detail, sizeof v->detail, "%.*s", (int)len, detail);
    } else {
        return -1;
    }
    return 0;
}

/* A line of the child's output worth quoting in the log (a sanitizer's
 * summary), or "". */
static void quote_output(const child_run *c, char *out, size_t size)
{
    const char *s = strstr(c->output, "SUMMARY: ");
    if (!s)
        s = strstr(c->output, "ERROR: ");
    out[0] = '\0';
    if (s)
        snprintf(out, size, ": %.*s", (int)strcspn(s, "\n"), s);
}

static void judge(const probe_runner_config *cfg, const child_run *c, probe_verdict *v)
{
    char quote[256];
    quote_output(c, quote, sizeof quote);
    if (c->killed_stop) {
        v->outcome = PROBE_NOT_RUN;
        snprintf(v->detail, sizeof v->detail, "the server is shutting down");
    } else if (c->read_failed) {
        v->outcome = PROBE_NOT_RUN;
        v->code = c->read_err.code;
        snprintf(v->detail, sizeof v->detail, "%s", c->read_err.detail);
    } else if (c->killed_timeout) {
        v->outcome = PROBE_TIMED_OUT;
        snprintf(v->detail, sizeof v->detail, "reading its metadata took longer than %g s",
                 cfg->timeout_seconds);
    } else if (c->killed_memory) {
        v->outcome = PROBE_OUT_OF_MEMORY;
        snprintf(v->detail, sizeof v->detail, "reading its metadata needed more than %llu MB",
                 (unsigned long long)(cfg->memory_bytes >> 20));
    } else if (WIFSIGNALED(c->status)) {
        int sig = WTERMSIG(c->status);
        v->outcome = sig == SIGXCPU || sig == SIGKILL ? PROBE_TIMED_OUT : PROBE_CRASHED;
        if (v->outcome == PROBE_TIMED_OUT)
            snprintf(v->detail, sizeof v->detail,
                     "reading its metadata used more than %g s of CPU time", cfg->timeout_seconds);
        else
            snprintf(v->detail, sizeof v->detail, "reading its metadata crashed the reader (%s)%s",
                     strsignal(sig), quote);
    } else if (WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0 && !parse_verdict(c, v)) {
        return;
    } else {
        v->outcome = PROBE_CRASHED;
        snprintf(v->detail, sizeof v->detail,
                 "reading its metadata stopped the reader (exit status %d)%s",
                 WIFEXITED(c->status) ? WEXITSTATUS(c->status) : -1, quote);
    }
}

static void run_child(probe_runner *p, const char *path, const probe_reader *rd,
                      probe_verdict *v)
{
    double started = now_seconds();
    if (atomic_load(&p->stopping)) {
        v->outcome = PROBE_NOT_RUN;
        snprintf(v->detail, sizeof v->detail, "the server is shutting down");
        return;
    }
    child_run *c = calloc(1, sizeof *c);
    if (!c || child_start(&p->cfg, path, rd, c) != 0) {
        v->outcome = PROBE_NOT_RUN;
        snprintf(v->detail, sizeof v->detail, "cannot start a probe process (%s); retry",
                 strerror(errno));
        free(c);
        return;
    }
    child_wait(p, c, started);
    judge(&p->cfg, c, v);
    v->seconds = now_seconds() - started;
    free(c);
}

void probe_runner_run(void *ctx, const char *path, const probe_reader *rd, probe_verdict *out)
{
    probe_runner *p = ctx;
    pthread_mutex_lock(&p->lock);
    while (p->running >= p->cfg.concurrency)
        pthread_cond_wait(&p->slot_free, &p->lock);
    p->running++;
    pthread_mutex_unlock(&p->lock);
    run_child(p, path, rd, out);
    pthread_mutex_lock(&p->lock);
    p->running--;
    pthread_cond_signal(&p->slot_free);
    pthread_mutex_unlock(&p->lock);
}
