/* HTTP validators (RFC 9110 8.8, 13.1): dates and entity-tag lists, for
 * the conditional requests every route answers (server/http.c and the raw
 * zarr keys, which have validators of their own). */
#ifndef CELLAR_VALIDATORS_H
#define CELLAR_VALIDATORS_H

#include <stddef.h>
#include <time.h>

#include "common/arena.h"

/* ts as an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") in out. */
void http_date(struct timespec ts, char *out, size_t n);

/* Parses an IMF-fixdate: 0 with *out, -1 when it is not one. */
int http_date_parse(const char *text, time_t *out);

/* Whether the entity-tag list of an If-None-Match (strong = 0: weak
 * comparison, a W/ prefix on either side ignored) or If-Match / If-Range
 * (strong = 1: a weak tag never matches) header holds etag; "*" matches
 * any. */
int etag_list_holds(const char *header, const char *etag, int strong);

/* The entity tag "<tag without its closing quote>-<suffix>" in a's memory:
 * a representation's own tag made from its store version's (tag quoted,
 * as store_etag gives it); NULL when out of memory or tag is not quoted. */
char *etag_join(arena *a, const char *tag, const char *suffix);

#endif
