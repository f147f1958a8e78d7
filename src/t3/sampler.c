/* sampler.c - transformers' TemperatureLogitsWarper, TopKLogitsWarper,
 * TopPLogitsWarper, MinPLogitsWarper and RepetitionPenaltyLogitsProcessor
 * (5.2.0), ported to float32 rows. */
#include "sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void sampler_temperature(float *l, int64_t V, float t)
{
    for (int64_t i = 0; i < V; i++) l[i] = l[i] / t;
}

/* order-preserving bits of a float (larger value, larger key) and back */
static uint32_t okey(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

static float okey_value(uint32_t k)
{
    const uint32_t u = k & 0x80000000u ? k & 0x7fffffffu : ~k;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* The k-th largest (from 0) of v[0..n), k < n: a radix select on the
 * order-preserving keys, 11, 11 and 10 bits a pass from the top. The
 * value is the one a sort gives (0.0 and -0.0 may come back for each
 * other, which compare equal). */
static float kth_largest(const float *v, int64_t n, int64_t k)
{
    static const int shift[3] = {21, 10, 0}, bits[3] = {11, 11, 10};
    uint32_t prefix = 0, mask = 0, cnt[1 << 11];
    int64_t r = k; /* rank among the keys under prefix, from the top */
    for (int p = 0; p < 3; p++) {
        const uint32_t dm = (1u << bits[p]) - 1;
        memset(cnt, 0, sizeof(uint32_t) << bits[p]);
        for (int64_t i = 0; i < n; i++) {
            const uint32_t u = okey(v[i]);
            if ((u & mask) == prefix) cnt[(u >> shift[p]) & dm]++;
        }
        uint32_t d = dm;
        while (d > 0 && r >= (int64_t)cnt[d]) r -= cnt[d--];
        prefix |= d << shift[p];
        mask |= dm << shift[p];
    }
    return okey_value(prefix);
}

/* k' = min(max(k, 1), V); entries strictly below the k'-th largest value
 * become -inf (ties at the threshold survive). The threshold is the entry
 * a descending sort would put at k' - 1, found without sorting. */
void sampler_top_k(float *l, int64_t V, int k)
{
    int64_t kk = k < 1 ? 1 : k;
    if (kk >= V) return;
    float thr = kth_largest(l, V, kk - 1);
    for (int64_t i = 0; i < V; i++)
        if (l[i] < thr) l[i] = -INFINITY;
}

void sampler_softmax(const float *l, float *p, int64_t V)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    float sum = 0;
    for (int64_t i = 0; i < V; i++) { /* exp(-inf) is 0: no call (the same sum) */
        p[i] = l[i] == -INFINITY && mx != -INFINITY ? 0.0f : expf(l[i] - mx);
        sum += p[i];
    }
    for (int64_t i = 0; i < V; i++) p[i] = p[i] / sum;
}

/* idx[0..n) sorted by (l[idx], idx) ascending: bottom-up merge sort with
 * tmp[n] (no shared state, so concurrent calls are safe). */
static void sort_by_value(int32_t *idx, int32_t *tmp, int64_t n, const float *l)
{
    int32_t *src = idx, *dst = tmp;
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                int32_t a = src[i], b = src[j];
                bool b_first = l[b] < l[a] || (l[b] == l[a] && b < a);
                dst[o++] = b_first ? src[j++] : src[i++];
            }
            while (i < mid) dst[o++] = src[i++];
            while (j < hi) dst[o++] = src[j++];
        }
        int32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != idx) memcpy(idx, src, sizeof *idx * (size_t)n);
}

/* Sort ascending; cumulative softmax; drop entries with cumulative
 * probability <= 1 - p, always keeping the largest. Entries already -inf
 * (top-k leaves most of them so) would sort first with probability 0,
 * adding exactly nothing to the softmax sum or the cumulative sum and
 * being set to -inf again, so only the others are sorted: the result is
 * that of the sort over all V. */
void sampler_top_p(float *l, int64_t V, double p, float *scratch, int32_t *idx)
{
    if (p >= 1.0) return;
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++)
        if (l[i] != -INFINITY) idx[n++] = (int32_t)i;
    sort_by_value(idx, (int32_t *)scratch, n, l);
    float *sorted = scratch, *probs = scratch + V;
    for (int64_t i = 0; i < n; i++) sorted[i] = l[idx[i]];
    sampler_softmax(sorted, probs, n);
    /* torch.cumsum on CPU accumulates float32 in double and stores float32;
     * 1 - p is a Python float compared against float32 */
    double c = 0;
    float thr = (float)(1.0 - p);
    for (int64_t i = 0; i < n - 1; i++) { /* the last (largest) is kept */
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
