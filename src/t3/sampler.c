/* sampler.c - transformers' TemperatureLogitsWarper, TopKLogitsWarper,
 * TopPLogitsWarper, MinPLogitsWarper and RepetitionPenaltyLogitsProcessor
 * (5.2.0), ported to float32 rows. */
#include "sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void sampler_temperature(float *l, int64_t V, float t)
{
    for (int64_t i = 0; i < V; i++) l[i] = l[i] / t;
}

/* The k-th largest (k from 0, duplicates counted) of v[0..n), n > k:
 * quickselect (Hoare partition around a median of three), reordering v. */
static float kth_largest(float *v, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        float a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi];
        float piv = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
        int64_t i = lo, j = hi;
        while (i <= j) { /* descending: larger values to the left */
            while (v[i] > piv) i++;
            while (v[j] < piv) j--;
            if (i <= j) {
                float t = v[i];
                v[i++] = v[j];
                v[j--] = t;
            }
        }
        /* v[lo..j] >= piv, v[j+1..i-1] == piv, v[i..hi] <= piv */
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return piv;
    }
    return v[k];
}

/* k' = min(max(k, 1), V); entries strictly below the k'-th largest value
 * become -inf (ties at the threshold survive). The threshold is the entry
 * a descending sort would put at k' - 1, found without sorting. */
void sampler_top_k(float *l, int64_t V, int k, float *scratch)
{
    int64_t kk = k < 1 ? 1 : k;
    if (kk >= V) return;
    memcpy(scratch, l, (size_t)V * sizeof *l);
    float thr = kth_largest(scratch, V, kk - 1);
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
