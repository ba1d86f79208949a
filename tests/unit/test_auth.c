/* server/auth (token files, grants, the Bearer header, reload under
 * concurrent readers) and server/cors (the origin list). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/auth.h"
#include "server/cors.h"
#include "tests/unit/unit.h"

/* sha256("alpha"), sha256("") */
#define HASH_ALPHA "8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8"
#define HASH_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static auth_table *parse(const char *text, auth_file_kind kind, cellar_error *err)
{
    cellar_error_clear(err);
    return auth_table_parse(text, strlen(text), kind, "tokens.txt", err);
}

void test_auth_table_grants(void)
{
    cellar_error err;
    auth_table *t = parse("# who reads what\n"
                          "\n" HASH_ALPHA "  blood.h5ad   atlas/*  # a comment\r\n"
                          "   " HASH_EMPTY "\tpbmc?.h5mu\n",
                          AUTH_FILE_STORES, &err);
    CHECK(t != NULL);
    if (!t)
        return;
    CHECK_EQ(auth_table_count(t), 2);
    const auth_grant *alpha = auth_table_find(t, "alpha", 5);
    CHECK(alpha != NULL);
    CHECK(auth_grant_allows(alpha, "blood.h5ad"));
    CHECK(auth_grant_allows(alpha, "atlas/liver.zarr"));
    CHECK(auth_grant_allows(alpha, "atlas/deep/lung.h5ad")); /* '*' crosses '/' */
    CHECK(!auth_grant_allows(alpha, "blood.zarr"));
    CHECK(!auth_grant_allows(alpha, "xatlas/liver.zarr"));
    CHECK(!auth_grant_allows(alpha, "blood.h5ad2"));
    const auth_grant *empty = auth_table_find(t, "", 0);
    CHECK(empty != NULL && empty != alpha);
    CHECK(auth_grant_allows(empty, "pbmc1.h5mu"));
    CHECK(!auth_grant_allows(empty, "pbmc12.h5mu"));
    CHECK(!auth_grant_allows(empty, "blood.h5ad"));
    /* Prefixes, suffixes and case of a token are other tokens. */
    CHECK(auth_table_find(t, "alph", 4) == NULL);
    CHECK(auth_table_find(t, "alphaa", 6) == NULL);
    CHECK(auth_table_find(t, "ALPHA", 5) == NULL);
    CHECK(auth_table_find(t, "beta", 4) == NULL);
    CHECK(!auth_grant_allows(NULL, "blood.h5ad"));
    auth_table_release(t);
}

void test_auth_table_uppercase_hash_and_metrics_kind(void)
{
    cellar_error err;
    char upper[] = HASH_ALPHA "\n";
    for (char *c = upper; *c; c++)
        if (*c >= 'a' && *c <= 'f')
            *c = (char)(*c - 'a' + 'A');
    auth_table *t = parse(upper, AUTH_FILE_TOKENS, &err);
    CHECK(t != NULL);
    CHECK(auth_table_find(t, "alpha", 5) != NULL);
    auth_table_release(t);
    /* An empty file is valid: no token gets in. */
    t = parse("# nobody\n", AUTH_FILE_STORES, &err);
    CHECK(t != NULL);
    CHECK_EQ(auth_table_count(t), 0);
    CHECK(auth_table_find(t, "alpha", 5) == NULL);
    auth_table_release(t);
}

static void check_refused(const char *text, auth_file_kind kind, const char *detail_part)
{
    cellar_error err;
    auth_table *t = parse(text, kind, &err);
    CHECK(t == NULL);
    CHECK_EQ(err.code, CELLAR_EINVAL);
    if (!strstr(err.detail, detail_part)) {
        fprintf(stderr, "detail '%s' lacks '%s'\n", err.detail, detail_part);
        unit_failures++;
    }
    /* A detail names the line, never the hash. */
    CHECK(strstr(err.detail, HASH_ALPHA) == NULL);
    auth_table_release(t);
}

void test_auth_table_refuses(void)
{
    check_refused(HASH_ALPHA "\n", AUTH_FILE_STORES, "line 1: a token needs the store");
    check_refused("\n" HASH_ALPHA " a.h5ad\n" HASH_ALPHA " b.h5ad\n", AUTH_FILE_STORES,
                  "line 3: the same hash");
    check_refused("8ed3f6 a.h5ad\n", AUTH_FILE_STORES, "line 1: the first field is not a SHA-256");
    check_refused(HASH_ALPHA "0 a.h5ad\n", AUTH_FILE_STORES, "not a SHA-256");
    check_refused("zz" HASH_EMPTY " a.h5ad\n", AUTH_FILE_STORES, "not a SHA-256");
    check_refused(HASH_ALPHA " /etc/x.h5ad\n", AUTH_FILE_STORES, "relative to the root");
    check_refused(HASH_ALPHA " a.h5ad\n", AUTH_FILE_TOKENS, "only hashes");
    cellar_error err;
    cellar_error_clear(&err);
    CHECK(auth_table_parse(HASH_ALPHA " a\0b", sizeof HASH_ALPHA + 3, AUTH_FILE_STORES, "t",
                           &err) == NULL);
    CHECK_EQ(err.code, CELLAR_EINVAL);
}

void test_auth_bearer_header(void)
{
    const char *tok = NULL;
    size_t len = 0;
    CHECK_EQ(auth_bearer_token("Bearer abc.def-_~+/==", &tok, &len), 0);
    CHECK(len == 14 && !memcmp(tok, "abc.def-_~+/==", 14));
    CHECK_EQ(auth_bearer_token("  bearer   xyz  ", &tok, &len), 0);
    CHECK(len == 3 && !memcmp(tok, "xyz", 3));
    CHECK_EQ(auth_bearer_token("BEARER\tq", &tok, &len), 0);
    CHECK(len == 1 && tok[0] == 'q');
    CHECK_EQ(auth_bearer_token(NULL, &tok, &len), -1);
    CHECK_EQ(auth_bearer_token("Bearer", &tok, &len), -1);
    CHECK_EQ(auth_bearer_token("Bearer    ", &tok, &len), -1);
    CHECK_EQ(auth_bearer_token("Basic YWxhZGRpbjpvcGVu", &tok, &len), -1);
    CHECK_EQ(auth_bearer_token("Bearerabc", &tok, &len), -1);
    CHECK_EQ(auth_bearer_token("Bearer a b", &tok, &len), -1);
}

static char *write_temp(const char *text)
{
    char *path = strdup("/tmp/cellar-auth-XXXXXX");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK_EQ(write(fd, text, strlen(text)), (long long)strlen(text));
        close(fd);
    }
    return path;
}

static void rewrite(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

void test_auth_reload(void)
{
    char *path = write_temp(HASH_ALPHA " a.h5ad\n");
    cellar_error err;
    cellar_error_clear(&err);
    auth *a = auth_open(path, AUTH_FILE_STORES, &err);
    CHECK(a != NULL);
    if (!a)
        goto done;
    /* A request's table and grant outlive the reload that replaces them. */
    auth_table *held = auth_acquire(a);
    const auth_grant *g = auth_table_find(held, "alpha", 5);
    CHECK(g != NULL);
    rewrite(path, HASH_EMPTY " b.h5ad\n");
    CHECK_EQ(auth_reload(a, &err), 0);
    auth_table *now = auth_acquire(a);
    CHECK(auth_table_find(now, "alpha", 5) == NULL);
    CHECK(auth_table_find(now, "", 0) != NULL);
    CHECK(auth_grant_allows(g, "a.h5ad"));
    auth_table_release(held);
    auth_table_release(now);
    /* A file that does not parse keeps the tokens in use. */
    rewrite(path, "not a token file\n");
    cellar_error_clear(&err);
    CHECK(auth_reload(a, &err) != 0);
    CHECK(strstr(err.detail, "line 1") != NULL);
    now = auth_acquire(a);
    CHECK(auth_table_find(now, "", 0) != NULL);
    auth_table_release(now);
    unlink(path);
    cellar_error_clear(&err);
    CHECK(auth_reload(a, &err) != 0);
    now = auth_acquire(a);
    CHECK(auth_table_find(now, "", 0) != NULL);
    auth_table_release(now);
    auth_free(a);
    cellar_error_clear(&err);
    CHECK(auth_open(path, AUTH_FILE_STORES, &err) == NULL);
    CHECK_EQ(err.code, CELLAR_EIO);
done:
    unlink(path);
    free(path);
}

typedef struct reader_arg {
    auth *a;
    atomic_int stop;
    atomic_long checks;
} reader_arg;

static void *reader(void *p)
{
    reader_arg *r = p;
    while (!atomic_load(&r->stop)) {
        auth_table *t = auth_acquire(r->a);
        const auth_grant *g = auth_table_find(t, "alpha", 5);
        /* Every version of the file grants alpha a.h5ad. */
        if (!g || !auth_grant_allows(g, "a.h5ad"))
            atomic_store(&r->stop, 2);
        auth_table_release(t);
        atomic_fetch_add(&r->checks, 1);
    }
    return NULL;
}

/* Readers acquire, find and release while the file is reloaded again and
 * again: no reader ever sees a freed table (ASan) or a missing grant. */
void test_auth_reload_concurrent(void)
{
    char *path = write_temp(HASH_ALPHA " a.h5ad\n");
    cellar_error err;
    cellar_error_clear(&err);
    reader_arg r = {.a = auth_open(path, AUTH_FILE_STORES, &err)};
    CHECK(r.a != NULL);
    if (!r.a)
        goto done;
    pthread_t threads[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&threads[i], NULL, reader, &r);
    for (int i = 0; i < 300; i++) {
        rewrite(path, i % 2 ? HASH_ALPHA " a.h5ad\n" HASH_EMPTY " b.h5ad\n"
                            : HASH_EMPTY " c.h5ad\n" HASH_ALPHA " a.h5ad x.zarr\n");
        cellar_error_clear(&err);
        CHECK_EQ(auth_reload(r.a, &err), 0);
    }
    if (!atomic_load(&r.stop))
        atomic_store(&r.stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(threads[i], NULL);
    CHECK_EQ(atomic_load(&r.stop), 1);
    CHECK(atomic_load(&r.checks) > 0);
    auth_free(r.a);
done:
    unlink(path);
    free(path);
}

/* A policy of one entry: the same answer whatever the Origin. */
static void check_one_entry(const char *spec, const char *sent, int credentials)
{
    cellar_error err;
    cellar_error_clear(&err);
    cors_policy *p = cors_new(spec, &err);
    CHECK(p != NULL);
    if (!p)
        return;
    const char *origins[] = {"https://x.org", "https://a.org", NULL};
    for (size_t i = 0; i < 3; i++) {
        cors_answer a = cors_decide(p, origins[i]);
        CHECK_STR_EQ(a.allow_origin, sent);
        CHECK_EQ(a.credentials, credentials);
        CHECK(!a.vary);
    }
    cors_free(p);
}

void test_cors_policy(void)
{
    check_one_entry("*", "*", 0);
    check_one_entry(" https://a.org ", "https://a.org", 1);
    cellar_error err;
    cellar_error_clear(&err);
    cors_answer a;

    /* No origin at all: no CORS headers. */
    cors_policy *none = cors_new(" , ", &err);
    CHECK(none != NULL);
    a = cors_decide(none, "https://a.org");
    CHECK(a.allow_origin == NULL && !a.vary && !a.credentials);
    cors_free(none);

    cors_policy *list = cors_new(" https://a.org , http://localhost:5173", &err);
    CHECK(list != NULL);
    a = cors_decide(list, "https://a.org");
    CHECK_STR_EQ(a.allow_origin, "https://a.org");
    CHECK(a.credentials && a.vary);
    cors_answer b = cors_decide(list, "http://localhost:5173");
    CHECK_STR_EQ(b.allow_origin, "http://localhost:5173");
    CHECK(b.variant != a.variant);
    a = cors_decide(list, "https://evil.org");
    CHECK(a.allow_origin == NULL && !a.credentials && a.vary);
    a = cors_decide(list, "https://a.org.evil.org");
    CHECK(a.allow_origin == NULL);
    a = cors_decide(list, NULL);
    CHECK(a.allow_origin == NULL && a.vary);
    cors_free(list);

    /* `*` in a list: unlisted origins get it, never with credentials. */
    cors_policy *mixed = cors_new("https://a.org,*", &err);
    CHECK(mixed != NULL);
    a = cors_decide(mixed, "https://a.org");
    CHECK_STR_EQ(a.allow_origin, "https://a.org");
    CHECK(a.credentials);
    a = cors_decide(mixed, "https://b.org");
    CHECK_STR_EQ(a.allow_origin, "*");
    CHECK(!a.credentials && a.vary);
    cors_free(mixed);

    const char *bad[] = {"a.org", "https://a.org/", "https://a.org/path", "null", "://a.org",
                         "https://", "https://u@a.org", "HTTPS://a.org x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cellar_error_clear(&err);
        cors_policy *p = cors_new(bad[i], &err);
        if (p) {
            fprintf(stderr, "cors_new accepted '%s'\n", bad[i]);
            unit_failures++;
        }
        CHECK_EQ(err.code, CELLAR_EINVAL);
        cors_free(p);
    }
}
