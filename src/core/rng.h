/* rng.h - the shared counter-based run-time generator of
 * shared/spec/rng.md (also the synthetic weight values of
 * spec/synthetic-weights.md §3, which use the same mixer).
 *
 * A stream is (name, seed): key = FNV-1a-64(name) ^ seed, and raw draw j is
 * splitmix64(key + (j+1)*GOLDEN) >> 40, a 24-bit integer. Streams are
 * independent; each keeps its own counter.
 * Thread safety: a stream is owned by one thread at a time. */
#ifndef CBX_RNG_H
#define CBX_RNG_H

#include <stddef.h>
#include <stdint.h>

uint64_t rng_fnv1a64(const void *bytes, size_t n);
/* 24-bit value number i (0-based) of the sequence keyed by key. */
uint32_t rng_m24(uint64_t key, uint64_t i);

struct rng_stream {
    uint64_t key;
    uint64_t counter; /* next raw draw index j */
};

void rng_stream_init(struct rng_stream *s, const char *name, uint64_t seed);
uint32_t rng_next_m24(struct rng_stream *s);
/* uniform in [0, 1): m * 2^-24 (exact in float) */
float rng_uniform(struct rng_stream *s);
void rng_uniform_fill(struct rng_stream *s, float *dst, size_t n);
/* gaussian, two draws per value, cosine branch only (rng.md §2) */
float rng_gaussian(struct rng_stream *s);
void rng_gaussian_fill(struct rng_stream *s, float *dst, size_t n);
/* torch.multinomial(probs, 1) replacement of rng.md §4: one uniform per
 * call; probs need not be normalised. Returns -1 if every p is <= 0. */
int64_t rng_categorical(struct rng_stream *s, const float *probs, int64_t n);

#endif
