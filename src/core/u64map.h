/* u64map.h - open-addressing hash map from 64-bit keys to 64-bit values
 * (linear probing, power-of-two capacity, at most half full), for id
 * tables built once at load and read on every lookup after: the grapheme
 * BPE's merges ((left, right) -> (rank, merged id)), the Cangjie table's
 * glyphs. No deletion.
 * Thread safety: concurrent u64map_get on a map nobody writes; writes by
 * one thread at a time. */
#ifndef CBX_CORE_U64MAP_H
#define CBX_CORE_U64MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct u64map_slot { uint64_t key; int64_t val; bool used; };
struct u64map { struct u64map_slot *slot; size_t cap, used; }; /* {0}: empty */

static inline size_t u64map_home(const struct u64map *m, uint64_t k)
{
    k ^= k >> 33; /* murmur3 fmix64 */
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k & (m->cap - 1);
}

/* The value of k into *val; false when k is absent. */
static inline bool u64map_get(const struct u64map *m, uint64_t k, int64_t *val)
{
    if (!m->cap) return false;
    for (size_t i = u64map_home(m, k);; i = (i + 1) & (m->cap - 1)) {
        const struct u64map_slot *e = &m->slot[i];
        if (!e->used) return false;
        if (e->key == k) {
            *val = e->val;
            return true;
        }
    }
}

/* Set k -> v; a present k is overwritten only when `replace`. false: out
 * of memory (the map is unchanged). */
bool u64map_put(struct u64map *m, uint64_t k, int64_t v, bool replace);
void u64map_free(struct u64map *m); /* back to empty */

#endif
