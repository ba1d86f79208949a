#include "storage/budget.h"

#include <inttypes.h>
#include <stdatomic.h>

#include "common/satmath.h"

static _Atomic uint64_t whole_bytes = BUDGET_DEFAULT_BYTES;

void budget_set_whole(uint64_t bytes)
{
    atomic_store(&whole_bytes, bytes ? bytes : BUDGET_DEFAULT_BYTES);
}

uint64_t budget_whole(void)
{
    return atomic_load(&whole_bytes);
}

int budget_check_whole(int64_t count, uint64_t per_item, const char *what, cellar_error *err)
{
    uint64_t limit = budget_whole();
    uint64_t need = sat_mul_u64(count < 0 ? UINT64_MAX : (uint64_t)count, per_item);
    if (need <= limit)
        return 0;
    return cellar_fail(err, CELLAR_ETOOBIG,
                       "%s: %" PRId64 " values, about %" PRIu64 " bytes once read, over the "
                       "limit of %" PRIu64 " bytes (--max-response-bytes) for an element read "
                       "whole",
                       what, count, need, limit);
}
