/* rng.c - shared run-time RNG; see rng.h and shared/spec/rng.md. */
#include "rng.h"

#include "core/hash.h"
#include "core/scalar.h"

#include <math.h>
#include <string.h>


uint64_t rng_fnv1a64(const void *bytes, size_t n) { return hash_fnv1a64(bytes, n); }

uint32_t rng_m24(uint64_t key, uint64_t i) { return scalar_rng_m24(key, i); }

void rng_stream_init(struct rng_stream *s, const char *name, uint64_t seed)
{
    s->key = rng_fnv1a64(name, strlen(name)) ^ seed;
    s->counter = 0;
}

uint32_t rng_next_m24(struct rng_stream *s) { return rng_m24(s->key, s->counter++); }

float rng_uniform(struct rng_stream *s) { return (float)rng_next_m24(s) * 0x1p-24f; }

void rng_uniform_fill(struct rng_stream *s, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = rng_uniform(s);
}

float rng_gaussian(struct rng_stream *s)
{
    const float g = scalar_rng_gaussian(s->key, s->counter);
    s->counter += 2;
    return g;
}

void rng_gaussian_fill(struct rng_stream *s, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = rng_gaussian(s);
}

int64_t rng_categorical(struct rng_stream *s, const float *probs, int64_t n)
{
    float u = rng_uniform(s);
    double total = 0.0;
    int64_t last_pos = -1;
    for (int64_t i = 0; i < n; i++) {
        total += (double)probs[i];
        if (probs[i] > 0) last_pos = i;
    }
    if (last_pos < 0) return -1;
    double target = (double)u * total, c = 0.0;
    for (int64_t i = 0; i < n; i++) {
        c += (double)probs[i];
        if (c > target) return i;
    }
    return last_pos;
}
