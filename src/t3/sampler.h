/* sampler.h - logits processors and the categorical draw of T3
 * (transformers 5.2.0 semantics, spec/t3.md §8), on host float rows.
 * Thread safety: pure functions over caller buffers. */
#ifndef CBX_T3_SAMPLER_H
#define CBX_T3_SAMPLER_H

#include <stdint.h>

#include "core/rng.h"

/* Parameters are doubles as upstream passes Python floats. */
struct sampler_params {
    double temperature;        /* <= 0 or 1: no scaling */
    int top_k;                 /* <= 0: off */
    double top_p;              /* >= 1: off */
    double min_p;              /* <= 0: off */
    double repetition_penalty; /* 1: off */
};

/* In place on l[V]; scratch: 2*V floats, idx: V ints, seen: V bytes
 * (caller-owned). */
void sampler_temperature(float *l, int64_t V, float t);
void sampler_top_k(float *l, int64_t V, int k);
void sampler_top_p(float *l, int64_t V, double p, float *scratch, int32_t *idx);
void sampler_min_p(float *l, int64_t V, double m, float *scratch);
/* each distinct id in ids[n] penalised once (z < 0 ? z*theta : z/theta) */
void sampler_repetition_penalty(float *l, int64_t V, const int32_t *ids, int64_t n,
                                float theta, uint8_t *seen);
/* float32 softmax of l into p (max subtraction, as torch) */
void sampler_softmax(const float *l, float *p, int64_t V);
/* true when every entry is -inf */
int sampler_all_neg_inf(const float *l, int64_t V);

#endif
