/* The bare libmicrohttpd reference for `make bench`.
 *
 *   mhd_ref --port P --threads N --bodies DIR --files ROOT [--memory-limit KIB]
 *
 * GET /mem/NAME   answers the bytes of DIR/NAME, read into memory at start
 *                 (the harness saves there each of cellar's answers, so the
 *                 reference sends a body of exactly the same size).
 * GET /file/PATH  answers ROOT/PATH sent by sendfile (a response made from
 *                 the file descriptor, opened per request, as a static file
 *                 server does).
 *
 * The daemon uses the same flags and options as cellar's server/http.c
 * (internal polling thread pool, epoll, and by default the same connection
 * memory limit, 256 KiB), so the difference between the two is what cellar
 * does per request.  libmicrohttpd zeroes a connection's memory pool between
 * keep-alive requests, so --memory-limit changes the cost of every request. */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_BODIES 256

typedef struct body {
    char name[256];
    char *data;
    size_t len;
    struct MHD_Response *response;
} body;

typedef struct ref_server {
    body bodies[MAX_BODIES];
    size_t n_bodies;
    const char *files_root;
} ref_server;

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static char *read_file(const char *path, size_t *len)
{
    char *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0)
        goto done;
    data = malloc((size_t)st.st_size + 1);
    if (!data)
        goto done;
    if (fread(data, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        free(data);
        data = NULL;
        goto done;
    }
    *len = (size_t)st.st_size;
done:
    fclose(f);
    return data;
}

static int load_bodies(ref_server *srv, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "mhd_ref: cannot open %s\n", dir);
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d)) && srv->n_bodies < MAX_BODIES) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof srv->bodies[0].name)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        body *b = &srv->bodies[srv->n_bodies];
        b->data = read_file(path, &b->len);
        if (!b->data)
            continue;
        strcpy(b->name, e->d_name);
        b->response = MHD_create_response_from_buffer(b->len, b->data, MHD_RESPMEM_PERSISTENT);
        if (!b->response) {
            free(b->data);
            continue;
        }
        MHD_add_response_header(b->response, "Content-Type", "application/octet-stream");
        srv->n_bodies++;
    }
    closedir(d);
    return 0;
}

static enum MHD_Result answer_404(struct MHD_Connection *conn)
{
    static const char msg[] = "not found";
    struct MHD_Response *r =
        MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_NOT_FOUND, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result answer_file(ref_server *srv, struct MHD_Connection *conn,
                                   const char *rel)
{
    if (!srv->files_root || strstr(rel, ".."))
        return answer_404(conn);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", srv->files_root, rel);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return answer_404(conn);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return answer_404(conn);
    }
    struct MHD_Response *r = MHD_create_response_from_fd((size_t)st.st_size, fd);
    if (!r) {
        close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/octet-stream");
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)method;
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    ref_server *srv = cls;
    if (!*con_cls) {
        /* First call: headers only, as cellar's handler sees it. */
        *con_cls = srv;
        return MHD_YES;
    }
    if (!strncmp(url, "/mem/", 5)) {
        for (size_t i = 0; i < srv->n_bodies; i++)
            if (!strcmp(srv->bodies[i].name, url + 5))
                return MHD_queue_response(conn, MHD_HTTP_OK, srv->bodies[i].response);
        return answer_404(conn);
    }
    if (!strncmp(url, "/file/", 6))
        return answer_file(srv, conn, url + 6);
    return answer_404(conn);
}

int main(int argc, char **argv)
{
    static ref_server srv;
    unsigned port = 0, threads = 2;
    size_t memory_limit_kib = 256;
    const char *bodies = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port"))
            port = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--threads"))
            threads = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--bodies"))
            bodies = argv[i + 1];
        else if (!strcmp(argv[i], "--files"))
            srv.files_root = argv[i + 1];
        else if (!strcmp(argv[i], "--memory-limit"))
            memory_limit_kib = (size_t)strtoul(argv[i + 1], NULL, 10);
    }
    if (!port || !threads || memory_limit_kib < 4) {
        fprintf(stderr, "usage: mhd_ref --port P --threads N [--bodies DIR] [--files ROOT] "
                        "[--memory-limit KIB]\n");
        return 2;
    }
    if (bodies && load_bodies(&srv, bodies) != 0)
        return 1;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_USE_ERROR_LOG,
        (uint16_t)port, NULL, NULL, on_request, &srv,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory_limit_kib * 1024,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)60,
        MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "mhd_ref: cannot listen on 127.0.0.1:%u\n", port);
        return 1;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    while (!stop_requested)
        pause();
    MHD_stop_daemon(d);
    for (size_t i = 0; i < srv.n_bodies; i++) {
        MHD_destroy_response(srv.bodies[i].response);
        free(srv.bodies[i].data);
    }
    return 0;
}
