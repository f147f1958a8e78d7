/* u64map.c - see u64map.h */
#include "u64map.h"

#include <stdlib.h>

static bool grow(struct u64map *m)
{
    struct u64map g = {NULL, m->cap ? m->cap * 2 : 256, m->used};
    if (!(g.slot = calloc(g.cap, sizeof *g.slot))) return false;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slot[i].used) continue;
        size_t j = u64map_home(&g, m->slot[i].key);
        while (g.slot[j].used) j = (j + 1) & (g.cap - 1);
        g.slot[j] = m->slot[i];
    }
    free(m->slot);
    *m = g;
    return true;
}

bool u64map_put(struct u64map *m, uint64_t k, int64_t v, bool replace)
{
    if ((m->used + 1) * 2 > m->cap && !grow(m)) return false;
    size_t i = u64map_home(m, k);
    for (; m->slot[i].used; i = (i + 1) & (m->cap - 1))
        if (m->slot[i].key == k) {
            if (replace) m->slot[i].val = v;
            return true;
        }
    m->slot[i] = (struct u64map_slot){k, v, true};
    m->used++;
    return true;
}

void u64map_free(struct u64map *m)
{
    free(m->slot);
    *m = (struct u64map){0};
}
