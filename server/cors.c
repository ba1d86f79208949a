#include "server/cors.h"

#include <stdlib.h>
#include <string.h>

struct cors_policy {
    char *text;     /* the flag, split in place */
    char **origins; /* the listed origins, `*` left out */
    size_t n;
    int any;        /* the list holds `*` */
};

void cors_free(cors_policy *p)
{
    if (!p)
        return;
    free(p->origins);
    free(p->text);
    free(p);
}

/* scheme "://" host [":" port], the serialization browsers send (RFC 6454
 * 6.2): no path, query, blanks or credentials.  "null" is refused: it is
 * what sandboxed and file:// pages send, and allowing it allows them all. */
static int origin_is_valid(const char *o)
{
    const char *sep = strstr(o, "://");
    if (!sep || sep == o || !sep[3])
        return 0;
    for (const char *c = o; c < sep; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '+' || *c == '-' ||
              *c == '.'))
            return 0;
    for (const char *c = sep + 3; *c; c++)
        if (*c == '/' || *c == '?' || *c == '#' || *c == '@' || (unsigned char)*c <= ' ' ||
            *c == 0x7f)
            return 0;
    return 1;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

cors_policy *cors_new(const char *spec, cellar_error *err)
{
    cors_policy *p = calloc(1, sizeof *p);
    size_t entries = 1;
    for (const char *c = spec; *c; c++)
        entries += *c == ',';
    if (!p || !(p->text = strdup(spec)) || !(p->origins = calloc(entries, sizeof *p->origins))) {
        cors_free(p);
        cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return NULL;
    }
    for (char *save = NULL, *tok = strtok_r(p->text, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *o = trim(tok);
        if (!*o)
            continue;
        if (!strcmp(o, "*")) {
            p->any = 1;
        } else if (origin_is_valid(o)) {
            p->origins[p->n++] = o;
        } else {
            cellar_fail(err, CELLAR_EINVAL,
                        "--cors-origin: '%.200s' is not an origin (scheme://host[:port]) or *", o);
            cors_free(p);
            return NULL;
        }
    }
    return p;
}

cors_answer cors_decide(const cors_policy *p, const char *origin)
{
    cors_answer a = {NULL, 0, 0, 0};
    if (p->n + (size_t)p->any == 1) {
        a.allow_origin = p->n ? p->origins[0] : "*";
        a.credentials = p->n == 1;
        a.variant = 1;
        return a;
    }
    a.vary = p->n > 0;
    for (size_t i = 0; origin && i < p->n; i++) {
        if (!strcmp(p->origins[i], origin)) {
            a.allow_origin = p->origins[i];
            a.credentials = 1;
            a.variant = 2 + (unsigned)i;
            return a;
        }
    }
    if (p->any) {
        a.allow_origin = "*";
        a.variant = 1;
    }
    return a;
}
