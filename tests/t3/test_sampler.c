/* test_sampler.c - sampler_top_k (radix select) and sampler_top_p (sort of
 * the entries not already -inf) against naive references that fully sort
 * the V logits as transformers does: the rows must be identical bit for
 * bit, on rows with many ties, -inf entries and the real vocabulary size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t3/sampler.h"
#include "testutil.h"

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* TopKLogitsWarper: below the k-th largest of a full descending sort */
static void ref_top_k(float *l, int64_t V, int k)
{
    int64_t kk = k < 1 ? 1 : k;
    if (kk >= V) return;
    float *s = malloc(sizeof *s * (size_t)V);
    CHECK(s != NULL, "out of memory");
    memcpy(s, l, sizeof *s * (size_t)V);
    qsort(s, (size_t)V, sizeof *s, cmp_desc);
    float thr = s[kk - 1];
    for (int64_t i = 0; i < V; i++)
        if (l[i] < thr) l[i] = -INFINITY;
    free(s);
}

static const float *keys;
static int cmp_idx_asc(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (keys[i] != keys[j]) return (keys[i] > keys[j]) - (keys[i] < keys[j]);
    return (i > j) - (i < j);
}

/* TopPLogitsWarper: stable ascending sort of all V, softmax, cumsum */
static void ref_top_p(float *l, int64_t V, double p)
{
    int32_t *idx = malloc(sizeof *idx * (size_t)V);
    float *sorted = malloc(sizeof *sorted * (size_t)V), *probs = malloc(sizeof *probs * (size_t)V);
    CHECK(idx && sorted && probs, "out of memory");
    for (int64_t i = 0; i < V; i++) idx[i] = (int32_t)i;
    keys = l;
    qsort(idx, (size_t)V, sizeof *idx, cmp_idx_asc);
    for (int64_t i = 0; i < V; i++) sorted[i] = l[idx[i]];
    sampler_softmax(sorted, probs, V);
    double c = 0;
    float thr = (float)(1.0 - p);
    for (int64_t i = 0; i < V - 1; i++) {
        c += probs[i];
        if ((float)c <= thr) l[idx[i]] = -INFINITY;
    }
    free(idx);
    free(sorted);
    free(probs);
}

static uint64_t rng = 88172645463325252ull;
static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

/* a logit row: kind 0 continuous, 1 few distinct values (ties), 2 with
 * -inf entries, 3 all equal */
static void make_row(float *l, int64_t V, int kind)
{
    for (int64_t i = 0; i < V; i++) {
        float u = (float)(next() % 2000001) / 100000.0f - 10.0f;
        if (kind == 1) u = (float)(next() % 7) - 3.0f;
        if (kind == 2 && next() % 3 == 0) u = -INFINITY;
        if (kind == 3) u = 0.5f;
        l[i] = u;
    }
}

static int64_t differing(const float *a, const float *b, int64_t V)
{
    int64_t d = 0;
    for (int64_t i = 0; i < V; i++) d += memcmp(&a[i], &b[i], sizeof *a) != 0;
    return d;
}

int main(void)
{
    const int64_t sizes[] = {1, 2, 7, 100, 6563};
    const int ks[] = {0, 1, 2, 5, 50, 1000, 7000};
    const double ps[] = {0.0, 0.5, 0.9, 0.95, 0.999};
    int64_t V = 6563, worst_k = 0, worst_p = 0, worst_kp = 0, cases = 0;
    float *l = malloc(sizeof *l * (size_t)V), *want = malloc(sizeof *l * (size_t)V);
    float *got = malloc(sizeof *l * (size_t)V), *scratch = malloc(sizeof *l * 2 * (size_t)V);
    int32_t *idx = malloc(sizeof *idx * (size_t)V);
    CHECK(l && want && got && scratch && idx, "out of memory");
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        int64_t n = sizes[si];
        for (int kind = 0; kind < 4; kind++) {
            for (int rep = 0; rep < 3; rep++) {
                make_row(l, n, kind);
                for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                    memcpy(want, l, sizeof *l * (size_t)n);
                    memcpy(got, l, sizeof *l * (size_t)n);
                    ref_top_k(want, n, ks[ki]);
                    sampler_top_k(got, n, ks[ki]);
                    int64_t d = differing(got, want, n);
                    if (d > worst_k) worst_k = d;
                    CHECK(d == 0, "top_k V=%lld kind %d k=%d: %lld entries differ", (long long)n, kind,
                          ks[ki], (long long)d);
                    /* top-p after top-k, as T3 runs them */
                    for (size_t pi = 0; pi < sizeof ps / sizeof *ps; pi++) {
                        float *g2 = malloc(sizeof *l * (size_t)n), *w3 = malloc(sizeof *l * (size_t)n);
                        CHECK(g2 && w3, "out of memory");
                        memcpy(g2, got, sizeof *l * (size_t)n);
                        memcpy(w3, want, sizeof *l * (size_t)n);
                        sampler_top_p(g2, n, ps[pi], scratch, idx);
                        ref_top_p(w3, n, ps[pi]);
                        d = differing(g2, w3, n);
                        if (d > worst_kp) worst_kp = d;
                        CHECK(d == 0, "top_k+top_p V=%lld kind %d k=%d p=%g: %lld entries differ",
                              (long long)n, kind, ks[ki], ps[pi], (long long)d);
                        /* top-p alone on the raw row */
                        memcpy(w3, l, sizeof *l * (size_t)n);
                        memcpy(g2, l, sizeof *l * (size_t)n);
                        ref_top_p(w3, n, ps[pi]);
                        sampler_top_p(g2, n, ps[pi], scratch, idx);
                        d = differing(g2, w3, n);
                        if (d > worst_p) worst_p = d;
                        CHECK(d == 0, "top_p V=%lld kind %d p=%g: %lld entries differ", (long long)n, kind,
                              ps[pi], (long long)d);
                        free(g2);
                        free(w3);
                        cases += 3;
                    }
                }
            }
        }
    }
    printf("sampler: %lld cases; most differing entries vs full-sort reference: top_k %lld, top_p %lld, "
           "top_k+top_p %lld\n",
           (long long)cases, (long long)worst_k, (long long)worst_p, (long long)worst_kp);
    free(l);
    free(want);
    free(got);
    free(scratch);
    free(idx);
    return test_summary();
}
