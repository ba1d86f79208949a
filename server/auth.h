/* Bearer tokens: --auth-file (which stores a token may read) and
 * --metrics-token-file (who may read /metrics).
 *
 * A token file holds one token per line as the hex SHA-256 of the token
 * (`printf %s "$token" | sha256sum`), then, in an --auth-file, the store
 * names or fnmatch(3) globs the token may read, separated by blanks; `#`
 * starts a comment (README, "Tokens", is the users' description).
 *
 * A file is parsed into an immutable auth_table.  An auth holds the
 * current table; a reload parses the file again and, only when it parses,
 * swaps the new table in.  A request takes a reference on the table it is
 * checked against (auth_acquire) and keeps it until it completes, so the
 * grant it uses stays valid across a reload, and the old table is freed
 * when its last request lets go.  Every function is thread-safe. */
#ifndef CELLAR_AUTH_H
#define CELLAR_AUTH_H

#include <stddef.h>

#include "common/error.h"

typedef struct auth_table auth_table;
typedef struct auth_grant auth_grant;
typedef struct auth auth;

/* What the lines of a token file hold after the hash. */
typedef enum auth_file_kind {
    AUTH_FILE_STORES, /* --auth-file: one or more store names or globs */
    AUTH_FILE_TOKENS  /* --metrics-token-file: nothing */
} auth_file_kind;

/* Parses a token file's text (len bytes; NUL bytes are refused).  Returns
 * a table holding one reference, or NULL with err saying which line is
 * wrong and why (CELLAR_EINVAL; CELLAR_ENOMEM).  Details never quote a
 * hash.  source names the file in details. */
auth_table *auth_table_parse(const char *text, size_t len, auth_file_kind kind,
                             const char *source, cellar_error *err);

/* Drops a reference (auth_table_parse's or auth_acquire's).  NULL is fine. */
void auth_table_release(auth_table *t);

/* Tokens in t. */
size_t auth_table_count(const auth_table *t);

/* The grant of the token [token, token+len), or NULL when t has none for
 * it.  The token's SHA-256 is compared with every entry's, all the way
 * through (no early exit), so the time taken does not depend on which
 * entry, or how much of one, matched.  The grant lives as long as t. */
const auth_grant *auth_table_find(const auth_table *t, const char *token, size_t len);

/* Whether grant g may read the store named store_name (one of its names
 * or globs matches the whole name; `*` matches `/` too). */
int auth_grant_allows(const auth_grant *g, const char *store_name);

/* Loads the token file at path.  NULL with err filled when it cannot be
 * read or parsed.  The path is copied. */
auth *auth_open(const char *path, auth_file_kind kind, cellar_error *err);

/* Reads the file again.  0 when the new table replaced the old one, else
 * the old table stays in use and err says why. */
int auth_reload(auth *a, cellar_error *err);

/* A reference on the current table; drop it with auth_table_release. */
auth_table *auth_acquire(auth *a);

/* Frees a and drops its reference on the current table (requests still
 * holding one keep it).  NULL is fine. */
void auth_free(auth *a);

/* The token of an Authorization header value of the Bearer scheme (RFC
 * 6750 2.1; the scheme name in any case), pointing into header: 0 with
 * *token and *len set, -1 when header is NULL, another scheme or has no
 * token. */
int auth_bearer_token(const char *header, const char **token, size_t *len);

#endif
