/* What every key source shares (storage/zarr/zarr_source.h). */
#include "storage/zarr/zarr_source.h"

#include <stdlib.h>

int zarr_key_read_all(zarr_source *s, zarr_key *k, uint64_t max, char **out, const char *what,
                      cellar_error *err)
{
    *out = NULL;
    if (k->size > max)
        return cellar_fail(err, CELLAR_EFORMAT, "%s is larger than %llu bytes", what,
                           (unsigned long long)max);
    char *buf = malloc((size_t)k->size + 1);
    if (!buf)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory reading %s", what);
    int rc = s->ops->read_key(s, k, 0, (size_t)k->size, buf, what, err);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[k->size] = '\0';
    *out = buf;
    return 0;
}
