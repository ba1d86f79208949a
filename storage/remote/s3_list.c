/* S3 ListObjectsV2 answers (storage/remote/s3_list.h). */
#include "storage/remote/s3_list.h"

#include <stdlib.h>
#include <string.h>

/* The text between <tag> and </tag> in [p, end), or NULL. */
static const char *element(const char *p, const char *end, const char *tag, size_t *len)
{
    char open[48], close[48];
    size_t tl = strlen(tag);
    if (tl + 3 >= sizeof open)
        return NULL;
    open[0] = '<';
    memcpy(open + 1, tag, tl);
    open[tl + 1] = '>';
    close[0] = '<';
    close[1] = '/';
    memcpy(close + 2, tag, tl);
    close[tl + 2] = '>';
    const char *a = memmem(p, (size_t)(end - p), open, tl + 2);
    if (!a)
        return NULL;
    a += tl + 2;
    const char *b = memmem(a, (size_t)(end - a), close, tl + 3);
    if (!b)
        return NULL;
    *len = (size_t)(b - a);
    return a;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes XML text (the five entities and numeric references below 128;
 * other references and control characters, raw or referenced, refuse the
 * text) into out. */
static int xml_text(const char *s, size_t n, char *out, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        char c = s[i];
        if ((unsigned char)c < 0x20)
            return -1;
        if (c == '&') {
            static const struct { const char *name; char c; } ent[] = {
                {"amp;", '&'}, {"lt;", '<'}, {"gt;", '>'}, {"quot;", '"'}, {"apos;", '\''}};
            int done = 0;
            for (size_t k = 0; k < sizeof ent / sizeof *ent && !done; k++) {
                size_t el = strlen(ent[k].name);
                if (n - i - 1 >= el && !memcmp(s + i + 1, ent[k].name, el)) {
                    c = ent[k].c;
                    i += 1 + el;
                    done = 1;
                }
            }
            if (!done) {
                if (n - i < 4 || s[i + 1] != '#')
                    return -1;
                size_t j = i + 2;
                int hex = j < n && (s[j] == 'x' || s[j] == 'X');
                j += (size_t)hex;
                unsigned v = 0, digits = 0;
                for (; j < n && s[j] != ';' && digits < 6; j++, digits++) {
                    int d = hex ? hexval(s[j]) : (s[j] >= '0' && s[j] <= '9' ? s[j] - '0' : -1);
                    if (d < 0)
                        return -1;
                    v = v * (hex ? 16u : 10u) + (unsigned)d;
                }
                if (j >= n || s[j] != ';' || !digits || v < 0x20 || v >= 128)
                    return -1;
                c = (char)v;
                i = j + 1;
            }
        } else {
            i++;
        }
        if (o + 1 >= size)
            return -1;
        out[o++] = c;
    }
    out[o] = '\0';
    return 0;
}

static int parse_size(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (!n || n > 20)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* "2024-01-02T03:04:05.000Z" (fraction optional) as seconds. */
static time_t parse_iso8601(const char *s, size_t n)
{
    if (n < 20)
        return 0;
    int v[6] = {0};
    static const int at[6] = {0, 5, 8, 11, 14, 17}, len[6] = {4, 2, 2, 2, 2, 2};
    for (int f = 0; f < 6; f++) {
        for (int k = 0; k < len[f]; k++) {
            char c = s[at[f] + k];
            if (c < '0' || c > '9')
                return 0;
            v[f] = v[f] * 10 + (c - '0');
        }
    }
    if (s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':')
        return 0;
    struct tm tm = {0};
    tm.tm_year = v[0] - 1900;
    tm.tm_mon = v[1] - 1;
    tm.tm_mday = v[2];
    tm.tm_hour = v[3];
    tm.tm_min = v[4];
    tm.tm_sec = v[5];
    if (tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
        tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
        return 0;
    time_t t = timegm(&tm);
    return t > 0 ? t : 0;
}

static int push(s3_listing *l, s3_object *o, cellar_error *err)
{
    if (l->n >= S3_LIST_MAX_OBJECTS)
        return cellar_fail(err, CELLAR_ETOOBIG, "the listing holds over %d objects",
                           S3_LIST_MAX_OBJECTS);
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        s3_object *g = realloc(l->objs, cap * sizeof *g);
        if (!g)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory listing objects");
        l->objs = g;
        l->cap = cap;
    }
    l->objs[l->n++] = *o;
    return 0;
}

static int parse_contents(const char *p, const char *end, s3_listing *l, cellar_error *err)
{
    size_t n = 0;
    const char *v = element(p, end, "Key", &n);
    char key[S3_KEY_MAX + 1];
    s3_object o = {0};
    if (!v || xml_text(v, n, key, sizeof key) != 0 || !key[0])
        return cellar_fail(err, CELLAR_EFORMAT, "a listed object has no usable key");
    if (!(v = element(p, end, "Size", &n)) || parse_size(v, n, &o.size) != 0)
        return cellar_fail(err, CELLAR_EFORMAT, "listed object '%.200s' has no size", key);
    if ((v = element(p, end, "ETag", &n)) != NULL && xml_text(v, n, o.etag, sizeof o.etag) != 0)
        o.etag[0] = '\0';
    if ((v = element(p, end, "LastModified", &n)) != NULL)
        o.mtime = parse_iso8601(v, n);
    o.key = strdup(key);
    if (!o.key)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory listing objects");
    int rc = push(l, &o, err);
    if (rc)
        free(o.key);
    return rc;
}

int s3_list_parse(const char *xml, size_t len, s3_listing *l, int *truncated,
                  char **next_token, cellar_error *err)
{
    *truncated = 0;
    *next_token = NULL;
    const char *end = xml + len;
    if (!memmem(xml, len, "<ListBucketResult", 17))
        return cellar_fail(err, CELLAR_EFORMAT, "the answer is not an S3 object listing");
    for (const char *p = xml;;) {
        const char *a = memmem(p, (size_t)(end - p), "<Contents>", 10);
        if (!a)
            break;
        const char *b = memmem(a, (size_t)(end - a), "</Contents>", 11);
        if (!b)
            return cellar_fail(err, CELLAR_EFORMAT, "the object listing is cut short");
        int rc = parse_contents(a + 10, b, l, err);
        if (rc)
            return rc;
        p = b + 11;
    }
    size_t n = 0;
    const char *v = element(xml, end, "IsTruncated", &n);
    *truncated = v && n == 4 && !memcmp(v, "true", 4);
    if (*truncated && (v = element(xml, end, "NextContinuationToken", &n)) != NULL) {
        if (n > 4096)
            return cellar_fail(err, CELLAR_EFORMAT, "the listing's continuation token is too long");
        char *tok = malloc(n + 1);
        if (!tok)
            return cellar_fail(err, CELLAR_ENOMEM, "out of memory listing objects");
        if (xml_text(v, n, tok, n + 1) != 0 || !tok[0]) {
            free(tok);
            return cellar_fail(err, CELLAR_EFORMAT, "the listing's continuation token is malformed");
        }
        *next_token = tok;
    } else if (*truncated) {
        return cellar_fail(err, CELLAR_EFORMAT, "a truncated listing has no continuation token");
    }
    return 0;
}

static int obj_cmp(const void *a, const void *b)
{
    return strcmp(((const s3_object *)a)->key, ((const s3_object *)b)->key);
}

void s3_listing_sort(s3_listing *l)
{
    if (l->n < 2)
        return;
    qsort(l->objs, l->n, sizeof *l->objs, obj_cmp);
    size_t w = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (w && !strcmp(l->objs[w - 1].key, l->objs[i].key)) {
            free(l->objs[w - 1].key);
            l->objs[w - 1] = l->objs[i];
        } else {
            l->objs[w++] = l->objs[i];
        }
    }
    l->n = w;
}

void s3_listing_free(s3_listing *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->objs[i].key);
    free(l->objs);
    memset(l, 0, sizeof *l);
}

size_t s3_listing_lower_bound(const s3_listing *l, const char *prefix)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(l->objs[mid].key, prefix) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const s3_object *s3_listing_find(const s3_listing *l, const char *key)
{
    size_t i = s3_listing_lower_bound(l, key);
    return i < l->n && !strcmp(l->objs[i].key, key) ? &l->objs[i] : NULL;
}

int s3_encode(const char *s, int keep_slash, char *out, size_t size)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = strlen(out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                    (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_' ||
                    *p == '~' || (keep_slash && *p == '/');
        if (o + (plain ? 1 : 3) >= size)
            return -1;
        if (plain) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = '\0';
    return 0;
}
