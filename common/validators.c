#include "common/validators.h"

#include <string.h>

void http_date(struct timespec ts, char *out, size_t n)
{
    struct tm tm;
    time_t t = ts.tv_sec;
    gmtime_r(&t, &tm);
    strftime(out, n, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

int http_date_parse(const char *text, time_t *out)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = text ? strptime(text, "%a, %d %b %Y %H:%M:%S GMT", &tm) : NULL;
    if (!end)
        return -1;
    *out = timegm(&tm);
    return 0;
}

int etag_list_holds(const char *header, const char *etag, int strong)
{
    if (!header)
        return 0;
    if (!strncmp(etag, "W/", 2)) {
        if (strong)
            return 0;
        etag += 2;
    }
    size_t elen = strlen(etag);
    const char *s = header;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == ',')
            s++;
        if (*s == '*')
            return 1;
        int weak = !strncmp(s, "W/", 2);
        if (weak)
            s += 2;
        const char *e = s;
        if (*e == '"') {
            e = strchr(e + 1, '"');
            e = e ? e + 1 : s + strlen(s);
        } else {
            while (*e && *e != ',')
                e++;
        }
        if ((size_t)(e - s) == elen && !memcmp(s, etag, elen) && !(strong && weak))
            return 1;
        s = e;
        while (*s && *s != ',')
            s++;
    }
    return 0;
}


char *etag_join(arena *a, const char *tag, const char *suffix)
{
    size_t tl = strlen(tag), sl = strlen(suffix);
    if (tl < 2 || tag[tl - 1] != '"')
        return NULL;
    char *out = arena_alloc(a, tl + sl + 2);
    if (!out)
        return NULL;
    memcpy(out, tag, tl - 1);
    out[tl - 1] = '-';
    memcpy(out + tl, suffix, sl);
    out[tl + sl] = '"';
    out[tl + sl + 1] = '\0';
    return out;
}
