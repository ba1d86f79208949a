/* The one place an error becomes an HTTP answer: RFC 9457 problem+json. */
#ifndef CELLAR_PROBLEM_H
#define CELLAR_PROBLEM_H

#include "common/buf.h"
#include "common/error.h"

#define PROBLEM_CONTENT_TYPE "application/problem+json"

/* Writes {"type","title","status","detail","instance"} for err into out
 * (which must be empty) and returns the HTTP status.  A code without a
 * detail gets its title as detail. */
int problem_render(const cellar_error *err, const char *instance, buf *out);

/* The same with the detail also as "message" (h5grove's error body, which
 * h5web shows), for the /h5grove/ routes. */
int problem_render_with_message(const cellar_error *err, const char *instance, buf *out);

#endif
