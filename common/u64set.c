#include "common/u64set.h"

#include <stdlib.h>

int u64set_add(u64set *s, uint64_t a)
{
    a += 1;
    if ((s->count + 1) * 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        uint64_t *slots = calloc(cap, sizeof *slots);
        if (!slots)
            return -1;
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->slots[i])
                continue;
            size_t j = (size_t)(s->slots[i] * 0x9E3779B97F4A7C15ull) & (cap - 1);
            while (slots[j])
                j = (j + 1) & (cap - 1);
            slots[j] = s->slots[i];
        }
        free(s->slots);
        s->slots = slots;
        s->cap = cap;
    }
    size_t j = (size_t)(a * 0x9E3779B97F4A7C15ull) & (s->cap - 1);
    while (s->slots[j]) {
        if (s->slots[j] == a)
            return 0;
        j = (j + 1) & (s->cap - 1);
    }
    s->slots[j] = a;
    s->count++;
    return 1;
}

void u64set_free(u64set *s)
{
    free(s->slots);
    s->slots = NULL;
    s->cap = s->count = 0;
}
