/* Which origins a browser may read answers from (--cors-origin).
 *
 * The flag is a comma-separated list of origins (`https://a.org`,
 * `http://localhost:5173`) and may hold `*`.  One entry is sent as it is on
 * every answer (an origin with credentials allowed, `*` without).  With
 * several, an answer to a listed origin names that origin and allows
 * credentials; any other origin gets `*` when the list holds it (never with
 * credentials), else no Access-Control-Allow-Origin; and since the answer
 * then depends on the request's Origin, it says so (Vary: Origin). */
#ifndef CELLAR_CORS_H
#define CELLAR_CORS_H

#include "common/error.h"

typedef struct cors_policy cors_policy;

/* What to answer one request's Origin. */
typedef struct cors_answer {
    const char *allow_origin; /* Access-Control-Allow-Origin, or NULL for none; lives
                                 as long as the policy */
    int credentials;          /* send Access-Control-Allow-Credentials: true */
    int vary;                 /* send Vary: Origin */
    unsigned variant;         /* which of the answers above: 0 none, 1 `*`, 2 + the
                                 listed origin's index (kept answers are per variant) */
} cors_answer;

/* Parses the flag's value (copied).  NULL with err (CELLAR_EINVAL) for an
 * entry that is not an origin (scheme://host[:port], no path) or `*`. */
cors_policy *cors_new(const char *spec, cellar_error *err);

void cors_free(cors_policy *p);

/* The answer to a request whose Origin header is origin (NULL when it
 * sent none). */
cors_answer cors_decide(const cors_policy *p, const char *origin);

#endif
