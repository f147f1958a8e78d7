/* sampler.c - transformers' TemperatureLogitsWarper, TopKLogitsWarper,
 * TopPLogitsWarper, MinPLogitsWarper and RepetitionPenaltyLogitsProcessor
 * (5.2.0), ported to float32 rows. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void sampler_temperature(float *l, int64_t V, float t)
{
    for (int64_t i = 0; i < V; i++) l[i] = l[i] / t;
}

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* k' = min(max(k, 1), V); entries strictly below the k'-th largest value
 * become -inf (ties at the threshold survive). */
void sampler_top_k(float *l, int64_t V, int k, float *scratch)
{
    int64_t kk = k < 1 ? 1 : k;
    if (kk >= V) return;
    memcpy(scratch, l, (size_t)V * sizeof *l);
    qsort(scratch, (size_t)V, sizeof *scratch, cmp_desc);
    float thr = scratch[kk - 1];
    for (int64_t i = 0; i < V; i++)
        if (l[i] < thr) l[i] = -INFINITY;
}

void sampler_softmax(const float *l, float *p, int64_t V)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    float sum = 0;
    for (int64_t i = 0; i < V; i++) {
        p[i] = expf(l[i] - mx);
        sum += p[i];
    }
    for (int64_t i = 0; i < V; i++) p[i] = p[i] / sum;
}

static const float *sort_keys;
static int cmp_idx_asc(const void *a, const void *b)
{
    float x = sort_keys[*(const int32_t *)a], y = sort_keys[*(const int32_t *)b];
    if (x != y) return (x > y) - (x < y);
    return (*(const int32_t *)a > *(const int32_t *)b) - (*(const int32_t *)a < *(const int32_t *)b);
}

/* Sort ascending; cumulative softmax; drop entries with cumulative
 * probability <= 1 - p, always keeping the largest. */
void sampler_top_p(float *l, int64_t V, double p, float *scratch, int32_t *idx)
{
    if (p >= 1.0) return;
    for (int64_t i = 0; i < V; i++) idx[i] = (int32_t)i;
    sort_keys = l;
    qsort(idx, (size_t)V, sizeof *idx, cmp_idx_asc);
    float *sorted = scratch, *probs = scratch + V;
    for (int64_t i = 0; i < V; i++) sorted[i] = l[idx[i]];
    sampler_softmax(sorted, probs, V);
    /* torch.cumsum on CPU accumulates float32 in double and stores float32;
     * 1 - p is a Python float compared against float32 */
    double c = 0;
    float thr = (float)(1.0 - p);
    for (int64_t i = 0; i < V - 1; i++) { /* the last (largest) is kept */
        c += probs[i];
        if ((float)c <= thr) l[idx[i]] = -INFINITY;
    }
}

void sampler_min_p(float *l, int64_t V, double m, float *scratch)
{
    if (m <= 0) return;
    sampler_softmax(l, scratch, V);
    float top = 0;
    int64_t arg = 0;
    for (int64_t i = 0; i < V; i++)
        if (scratch[i] > top) { top = scratch[i]; arg = i; }
    float thr = (float)m * top;
    for (int64_t i = 0; i < V; i++)
        if (scratch[i] < thr && i != arg) l[i] = -INFINITY;
}

void sampler_repetition_penalty(float *l, int64_t V, const int32_t *ids, int64_t n,
                                float theta, uint8_t *seen)
{
    /* torch.gather then scatter: every occurrence reads the original score
     * and writes the same penalised value, so duplicates act once */
    memset(seen, 0, (size_t)V);
    for (int64_t i = 0; i < n; i++) {
        int32_t t = ids[i];
        if (t < 0 || t >= V || seen[t]) continue;
        seen[t] = 1;
        float z = l[t];
        l[t] = z < 0 ? z * theta : z / theta;
    }
}

int sampler_all_neg_inf(const float *l, int64_t V)
{
    for (int64_t i = 0; i < V; i++)
        if (l[i] != -INFINITY) return 0;
    return 1;
}
