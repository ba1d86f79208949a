/* S3 ListObjectsV2 answers, parsed with our own code (the XML is
 * untrusted: every name, number and count is bounded), and the sorted
 * listing of a prefix they make. */
#ifndef CELLAR_S3_LIST_H
#define CELLAR_S3_LIST_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/error.h"

#define S3_KEY_MAX 1024
#define S3_LIST_MAX_OBJECTS 1000000

typedef struct s3_object {
    char *key;           /* malloc'd, the whole key (prefix included) */
    uint64_t size;
    char etag[160];      /* quotes included, as S3 sends it in ETag headers */
    time_t mtime;
} s3_object;

typedef struct s3_listing {
    s3_object *objs;     /* sorted by key once s3_listing_sort ran */
    size_t n, cap;
} s3_listing;

/* Appends the <Contents> of one ListObjectsV2 page to l.  *truncated is
 * set from <IsTruncated>, *next_token (malloc'd, NULL when none) from
 * <NextContinuationToken>.  CELLAR_EFORMAT when the document is not a
 * listing or an entry is malformed (a key over S3_KEY_MAX, a size that is
 * not a number), CELLAR_ETOOBIG past S3_LIST_MAX_OBJECTS, CELLAR_ENOMEM. */
int s3_list_parse(const char *xml, size_t len, s3_listing *l, int *truncated,
                  char **next_token, cellar_error *err);

/* Sorts by key; a key listed twice (S3 lists each once) keeps one entry. */
void s3_listing_sort(s3_listing *l);

void s3_listing_free(s3_listing *l);

/* The object named key, or NULL (l sorted). */
const s3_object *s3_listing_find(const s3_listing *l, const char *key);

/* The index of the first key >= prefix (l sorted). */
size_t s3_listing_lower_bound(const s3_listing *l, const char *prefix);

/* Appends s percent-encoded as S3 wants it (RFC 3986 unreserved kept, and
 * '/' too when keep_slash) to out (size bytes, NUL-terminated); -1 when it
 * does not fit. */
int s3_encode(const char *s, int keep_slash, char *out, size_t size);

#endif
