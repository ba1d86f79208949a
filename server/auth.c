#include "server/auth.h"

#include <errno.h>
#include <fnmatch.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/numfmt.h"

#define DIGEST_BYTES 32
/* A token file is a list of hashes, not data: a bigger one is a mistake. */
#define MAX_FILE_BYTES (16u << 20)

struct auth_grant {
    unsigned char hash[DIGEST_BYTES];
    char *const *globs; /* into the table's glob array, once parsed */
    size_t first_glob, n_globs;
};

struct auth_table {
    atomic_size_t refs;
    auth_grant *grants;
    size_t n, cap;
    char **globs; /* every grant's, in order; strings point into text */
    size_t n_globs, globs_cap;
    char *text;   /* the file, fields NUL-terminated in place */
};

struct auth {
    pthread_mutex_t lock; /* guards current (the swap and the reference taken) */
    auth_table *current;
    char *path;
    auth_file_kind kind;
};

static void table_free(auth_table *t)
{
    free(t->grants);
    free(t->globs);
    free(t->text);
    free(t);
}

void auth_table_release(auth_table *t)
{
    if (t && atomic_fetch_sub(&t->refs, 1) == 1)
        table_free(t);
}

size_t auth_table_count(const auth_table *t)
{
    return t ? t->n : 0;
}

static int parse_hash(const char *field, unsigned char out[DIGEST_BYTES])
{
    if (strlen(field) != 2 * DIGEST_BYTES)
        return -1;
    for (size_t i = 0; i < DIGEST_BYTES; i++) {
        int hi = hex_digit_value(field[2 * i]), lo = hex_digit_value(field[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (unsigned char)(hi * 16 + lo);
    }
    return 0;
}

static int push_grant(auth_table *t)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        auth_grant *g = realloc(t->grants, cap * sizeof *g);
        if (!g)
            return -1;
        t->grants = g;
        t->cap = cap;
    }
    memset(&t->grants[t->n++], 0, sizeof *t->grants);
    return 0;
}

static int push_glob(auth_table *t, char *glob)
{
    if (t->n_globs == t->globs_cap) {
        size_t cap = t->globs_cap ? 2 * t->globs_cap : 16;
        char **g = realloc(t->globs, cap * sizeof *g);
        if (!g)
            return -1;
        t->globs = g;
        t->globs_cap = cap;
    }
    t->globs[t->n_globs++] = glob;
    return 0;
}

/* The next blank-separated field of a line at *p, NUL-terminated in place;
 * NULL at the end of the line or at a `#` that starts a field. */
static char *next_field(char **p)
{
    char *s = *p;
    while (*s == ' ' || *s == '\t')
        s++;
    if (!*s || *s == '#')
        return NULL;
    char *e = s;
    while (*e && *e != ' ' && *e != '\t')
        e++;
    if (*e)
        *e++ = '\0';
    *p = e;
    return s;
}

static int glob_is_valid(const char *glob)
{
    if (glob[0] == '/')
        return 0;
    for (const char *c = glob; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            return 0;
    return 1;
}

/* One line (NUL-terminated, no newline) into t. */
static int parse_line(auth_table *t, char *line, unsigned lineno, auth_file_kind kind,
                      const char *source, cellar_error *err)
{
    char *p = line;
    char *hash = next_field(&p);
    if (!hash)
        return 0; /* blank or comment */
    if (push_grant(t))
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    auth_grant *g = &t->grants[t->n - 1];
    if (parse_hash(hash, g->hash))
        return cellar_fail(err, CELLAR_EINVAL,
                           "%s line %u: the first field is not a SHA-256 in hex (64 digits)",
                           source, lineno);
    g->first_glob = t->n_globs;
    for (char *glob; (glob = next_field(&p));) {
        if (kind == AUTH_FILE_TOKENS)
            return cellar_fail(err, CELLAR_EINVAL,
                               "%s line %u: a metrics token file holds only hashes", source,
                               lineno);
        if (!glob_is_valid(glob))
            return cellar_fail(err, CELLAR_EINVAL,
                               "%s line %u: '%.200s' is not a store name or glob relative to "
                               "the root",
                               source, lineno, glob);
        if (push_glob(t, glob))
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    }
    g->n_globs = t->n_globs - g->first_glob;
    if (kind == AUTH_FILE_STORES && g->n_globs == 0)
        return cellar_fail(err, CELLAR_EINVAL,
                           "%s line %u: a token needs the store names or globs it may read",
                           source, lineno);
    for (size_t i = 0; i + 1 < t->n; i++)
        if (!memcmp(t->grants[i].hash, g->hash, DIGEST_BYTES))
            return cellar_fail(err, CELLAR_EINVAL, "%s line %u: the same hash as an earlier line",
                               source, lineno);
    return 0;
}

auth_table *auth_table_parse(const char *text, size_t len, auth_file_kind kind,
                             const char *source, cellar_error *err)
{
    if (memchr(text, '\0', len)) {
        cellar_fail(err, CELLAR_EINVAL, "%s holds a NUL byte: not a token file", source);
        return NULL;
    }
    auth_table *t = calloc(1, sizeof *t);
    if (!t || !(t->text = malloc(len + 1))) {
        free(t);
        cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return NULL;
    }
    atomic_init(&t->refs, 1);
    memcpy(t->text, text, len);
    t->text[len] = '\0';
    unsigned lineno = 0;
    for (char *line = t->text; line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        size_t n = strlen(line);
        if (n && line[n - 1] == '\r')
            line[n - 1] = '\0';
        if (parse_line(t, line, ++lineno, kind, source, err)) {
            table_free(t);
            return NULL;
        }
        line = nl ? nl + 1 : NULL;
    }
    for (size_t i = 0; i < t->n; i++)
        t->grants[i].globs = t->globs ? t->globs + t->grants[i].first_glob : NULL;
    return t;
}

/* 1 when the digests are equal, else 0, looking at every byte. */
static size_t digest_equal(const unsigned char *a, const unsigned char *b)
{
    unsigned diff = 0;
    for (size_t i = 0; i < DIGEST_BYTES; i++)
        diff |= (unsigned)(a[i] ^ b[i]);
    return (size_t)(((diff - 1u) >> 8) & 1u);
}

const auth_grant *auth_table_find(const auth_table *t, const char *token, size_t len)
{
    unsigned char digest[DIGEST_BYTES];
    if (!t || gnutls_hash_fast(GNUTLS_DIG_SHA256, token, len, digest) < 0)
        return NULL;
    size_t found = 0, index = 0;
    for (size_t i = 0; i < t->n; i++) {
        size_t eq = digest_equal(digest, t->grants[i].hash);
        size_t mask = (size_t)0 - eq;
        index = (index & ~mask) | (i & mask);
        found |= eq;
    }
    return found ? &t->grants[index] : NULL;
}

int auth_grant_allows(const auth_grant *g, const char *store_name)
{
    if (!g || !store_name)
        return 0;
    for (size_t i = 0; i < g->n_globs; i++)
        if (fnmatch(g->globs[i], store_name, 0) == 0)
            return 1;
    return 0;
}

/* The file's bytes, malloc'd into *out (NUL-terminated). */
static int read_file(const char *path, char **out, size_t *len, cellar_error *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return cellar_fail(err, CELLAR_EIO, "cannot open %s: %s", path, strerror(errno));
    char *data = malloc(MAX_FILE_BYTES + 1);
    size_t n = data ? fread(data, 1, MAX_FILE_BYTES + 1, f) : 0;
    int failed = ferror(f);
    fclose(f);
    if (!data)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    if (failed || n > MAX_FILE_BYTES) {
        free(data);
        return cellar_fail(err, CELLAR_EIO, "cannot read %s: %s", path,
                           failed ? "read error" : "larger than 16 MiB");
    }
    data[n] = '\0';
    *out = data;
    *len = n;
    return 0;
}

static auth_table *load_table(const char *path, auth_file_kind kind, cellar_error *err)
{
    char *text = NULL;
    size_t len = 0;
    if (read_file(path, &text, &len, err))
        return NULL;
    auth_table *t = auth_table_parse(text, len, kind, path, err);
    /* The hashes are not secrets, but leave no copy behind either. */
    explicit_bzero(text, len);
    free(text);
    return t;
}

auth *auth_open(const char *path, auth_file_kind kind, cellar_error *err)
{
    auth *a = calloc(1, sizeof *a);
    if (!a || !(a->path = strdup(path))) {
        free(a);
        cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return NULL;
    }
    a->kind = kind;
    a->current = load_table(path, kind, err);
    if (!a->current) {
        free(a->path);
        free(a);
        return NULL;
    }
    pthread_mutex_init(&a->lock, NULL);
    return a;
}

int auth_reload(auth *a, cellar_error *err)
{
    auth_table *fresh = load_table(a->path, a->kind, err);
    if (!fresh)
        return err && err->code ? err->code : CELLAR_EINVAL;
    pthread_mutex_lock(&a->lock);
    auth_table *old = a->current;
    a->current = fresh;
    pthread_mutex_unlock(&a->lock);
    auth_table_release(old);
    return 0;
}

auth_table *auth_acquire(auth *a)
{
    pthread_mutex_lock(&a->lock);
    auth_table *t = a->current;
    atomic_fetch_add(&t->refs, 1);
    pthread_mutex_unlock(&a->lock);
    return t;
}

void auth_free(auth *a)
{
    if (!a)
        return;
    auth_table_release(a->current);
    pthread_mutex_destroy(&a->lock);
    free(a->path);
    free(a);
}

int auth_bearer_token(const char *header, const char **token, size_t *len)
{
    if (!header)
        return -1;
    while (*header == ' ' || *header == '\t')
        header++;
    if (strncasecmp(header, "Bearer", 6) || (header[6] != ' ' && header[6] != '\t'))
        return -1;
    const char *s = header + 7;
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 0 || memchr(s, ' ', n) || memchr(s, '\t', n))
        return -1;
    *token = s;
    *len = n;
    return 0;
}
