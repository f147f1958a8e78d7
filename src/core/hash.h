/* hash.h - FNV-1a 64 (Fowler/Noll/Vo, the 64-bit offset basis and prime):
 * the string hash of the library's name tables (model_dir, model_file,
 * the tokenizers) and the key of the run-time RNG streams (rng.c).
 * The synthetic-weights generator uses the same function by spec
 * (spec/synthetic-weights.md, tools/lib/synth.c). Thread safety: any. */
#ifndef CBX_CORE_HASH_H
#define CBX_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t hash_fnv1a64(const void *bytes, size_t n)
{
    const unsigned char *p = bytes;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001B3ULL;
    }
    return h;
}

#endif
