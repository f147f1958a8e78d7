/* test_attn_probs.c - the optional probability export of op_attention
 * (attn_params.probs, ops.h), which T3's alignment guard reads.
 *
 * Per case (decode-like and prefill-like query counts, grouped-query
 * heads, causal, F32 / F16 / Q8_0 keys and values as a KV cache holds
 * them), for the ref backend and the cpu backend at every SIMD level:
 *  1. the exported rows equal softmax(q k^T * scale) computed naively in
 *     double on the host from the same (dequantised) keys, masked keys 0
 *     (printed max abs error, atol 1e-6);
 *  2. the attention output with the export on equals the output with it
 *     off, bit for bit (the export must not change how the output is
 *     computed);
 *  3. bad requests (a head or query rows outside the call, a stride below
 *     Tk) are refused with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/cpu_features.h"
#include "core/ops.h"
#include "core/quant.h"
#include "testutil.h"

struct pcase {
    int64_t B, Hq, Hk, Tq, Tk, D;
    enum dtype kv;            /* F32, F16 or Q8_0 */
    int64_t b, h, i0, n;      /* the exported (row, head, query rows) */
};

/* h [B, H, T, D] as a tensor of type t in arena a (Q8_0: rows quantised) */
static struct tensor *kv_tensor(struct arena *a, const float *h, const int64_t *ne, enum dtype t)
{
    struct tensor *f = op_from_host(a, TYPE_F32, 4, ne, h);
    return t == TYPE_F32 ? f : op_cast(a, f, t);
}

/* the values a kernel reads from k (dequantised / widened), [B, H, T, D] */
static float *host_values(const struct tensor *k)
{
    const int64_t n = k->ne[0] * k->ne[1] * k->ne[2], D = k->ne[3];
    float *f = malloc((size_t)(n * D) * sizeof *f);
    if (!f) return NULL;
    for (int64_t r = 0; r < n; r++)
        dequantize_row(k->type, (const char *)k->data + r * k->nb[2], f + r * D, D);
    return f;
}

/* naive softmax(q k^T * scale) of row (b, h, i), causal, in double */
static void naive_row(const struct pcase *t, const float *q, const float *k, float scale, int64_t i,
                      double *p)
{
    const int64_t D = t->D, hk = t->h / (t->Hq / t->Hk), last = t->Tk - t->Tq + i;
    const float *qr = q + ((t->b * t->Hq + t->h) * t->Tq + i) * D;
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < t->Tk; j++) {
        p[j] = -INFINITY;
        if (j > last) continue;
        const float *kr = k + ((t->b * t->Hk + hk) * t->Tk + j) * D;
        double dot = 0;
        for (int64_t d = 0; d < D; d++) dot += (double)qr[d] * kr[d];
        p[j] = dot * scale;
        if (p[j] > m) m = p[j];
    }
    for (int64_t j = 0; j < t->Tk; j++) sum += (p[j] = j > last ? 0 : exp(p[j] - m));
    for (int64_t j = 0; j < t->Tk; j++) p[j] /= sum;
}

static void run_case(struct arena *a, const char *who, const struct pcase *t, const float *hq,
                     const float *hk, const float *hv)
{
    arena_reset(a);
    char w[200];
    snprintf(w, sizeof w, "%s %s kv B%lld Hq%lld Hk%lld Tq%lld Tk%lld, head (%lld, %lld) rows [%lld, %lld)", who,
             dtype_name(t->kv), (long long)t->B, (long long)t->Hq, (long long)t->Hk, (long long)t->Tq,
             (long long)t->Tk, (long long)t->b, (long long)t->h, (long long)t->i0, (long long)(t->i0 + t->n));
    const int64_t nq[4] = {t->B, t->Hq, t->Tq, t->D}, nk[4] = {t->B, t->Hk, t->Tk, t->D};
    struct tensor *q = op_from_host(a, TYPE_F32, 4, nq, hq);
    struct tensor *k = kv_tensor(a, hk, nk, t->kv), *v = kv_tensor(a, hv, nk, t->kv);
    const int64_t ld = t->Tk + 3;
    float *dst = malloc((size_t)(t->n * ld) * sizeof *dst);
    double *p = malloc((size_t)t->Tk * sizeof *p);
    float *kval = k ? host_values(k) : NULL;
    if (!q || !k || !v || !dst || !p || !kval) {
        CHECK(0, "%s: setup: %s", w, arena_errmsg(a));
        free(dst), free(p), free(kval);
        return;
    }
    for (int64_t i = 0; i < t->n * ld; i++) dst[i] = NAN; /* every exported value must be written */
    struct attn_probs pr = {t->b, t->h, t->i0, t->n, dst, ld};
    struct attn_params off = {.scale = 1.0f / sqrtf((float)t->D), .causal = true};
    struct attn_params on = off;
    on.probs = &pr;
    float *o_off = test_host_copy(a, op_attention(a, q, k, v, NULL, &off));
    float *o_on = test_host_copy(a, op_attention(a, q, k, v, NULL, &on));
    const size_t no = (size_t)(t->B * t->Hq * t->Tq * t->D);
    CHECK(o_off && o_on && !memcmp(o_off, o_on, no * sizeof *o_on), "%s: output with the export = without, bit for bit",
          w);
    double worst = 0;
    for (int64_t r = 0; r < t->n; r++) {
        naive_row(t, hq, kval, off.scale, t->i0 + r, p);
        for (int64_t j = 0; j < t->Tk; j++) {
            double e = fabs((double)dst[r * ld + j] - p[j]);
            if (!(e <= worst)) worst = e; /* NaN: never written */
        }
    }
    const bool same = o_off && o_on && !memcmp(o_off, o_on, no * sizeof *o_on);
    printf("%s: export vs naive softmax max abs %.3g (atol 1e-6); output on/off %s %s\n", w, worst,
           same ? "bit-identical" : "DIFFER", worst <= 1e-6 && same ? "ok" : "FAIL");
    CHECK(worst <= 1e-6, "%s: export vs naive softmax: max abs %.3g (atol 1e-6)", w, worst);
    free(o_off), free(o_on), free(dst), free(p), free(kval);
}

/* 3. requests outside the call are refused */
static void refusals(struct arena *a)
{
    const int64_t nq[4] = {1, 2, 3, 64}, nk[4] = {1, 2, 10, 64};
    float dst[64];
    const struct attn_probs bad[] = {
        {0, 2, 0, 1, dst, 10}, /* head 2 of 2 */
        {1, 0, 0, 1, dst, 10}, /* batch row 1 of 1 */
        {0, 0, 2, 2, dst, 10}, /* query rows [2, 4) of 3 */
        {0, 0, 0, 1, dst, 9},  /* stride 9 < Tk 10 */
        {0, 0, 0, 1, NULL, 10},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        arena_reset(a);
        struct attn_params p = {.scale = 0.125f, .causal = true, .probs = &bad[i]};
        struct tensor *o = op_attention(a, op_fill(a, 4, nq, 0.5f), op_fill(a, 4, nk, 0.25f), op_fill(a, 4, nk, 1.0f),
                                        NULL, &p);
        printf("%s: bad request %zu: %s\n", arena_backend(a)->name, i, o ? "ACCEPTED" : arena_errmsg(a));
        CHECK(o == NULL && arena_status(a) != CBX_OK, "bad request %zu refused: %s", i, arena_errmsg(a));
    }
    arena_reset(a);
}

int main(void)
{
    struct backend *cpu = backend_cpu_create(2);
    struct arena *ac = cpu ? arena_create(cpu, 0) : NULL, *ar = arena_create(backend_ref(), 0);
    if (!ac || !ar) {
        CHECK(0, "backend/arena creation");
        return test_summary();
    }
    static const struct pcase cases[] = {
        /* the T3 decode step: one query row over the cache (CFG pair: B 2) */
        {2, 4, 4, 1, 37, 64, TYPE_F32, 0, 3, 0, 1},
        {2, 4, 4, 1, 300, 64, TYPE_Q8_0, 0, 1, 0, 1},
        {1, 4, 2, 1, 70, 64, TYPE_F16, 0, 3, 0, 1},
        /* the prefill: its last two rows (the start-of-speech positions) */
        {2, 4, 4, 9, 45, 64, TYPE_F32, 0, 2, 7, 2},
        {1, 4, 4, 80, 80, 64, TYPE_F32, 0, 1, 78, 2},
        {1, 2, 2, 70, 100, 64, TYPE_Q8_0, 0, 0, 0, 70},
    };
    const int nc = (int)(sizeof cases / sizeof cases[0]);
    uint64_t seed = 11;
    for (int c = 0; c < nc; c++) {
        const struct pcase *t = &cases[c];
        const size_t nq = (size_t)(t->B * t->Hq * t->Tq * t->D), nk = (size_t)(t->B * t->Hk * t->Tk * t->D);
        float *hq = malloc(nq * sizeof *hq), *hk = malloc(nk * sizeof *hk), *hv = malloc(nk * sizeof *hv);
        if (!hq || !hk || !hv) {
            CHECK(0, "out of memory");
            free(hq), free(hk), free(hv);
            continue;
        }
        fill_uniform(hq, nq, -2, 2, seed++);
        fill_uniform(hk, nk, -2, 2, seed++);
        fill_uniform(hv, nk, -1, 1, seed++);
        run_case(ar, "ref", t, hq, hk, hv);
        const int top = (int)cpu_level_detected();
        for (int lvl = 0; lvl <= top; lvl++) {
            cpu_set_level((enum cpu_level)lvl);
            char who[32];
            snprintf(who, sizeof who, "cpu/%s", cpu_level_name((enum cpu_level)lvl));
            run_case(ac, who, t, hq, hk, hv);
        }
        cpu_set_level(CPU_AVX512);
        free(hq), free(hk), free(hv);
    }
    refusals(ar);
    refusals(ac);
    arena_free(ac);
    arena_free(ar);
    backend_cpu_free(cpu);
    return test_summary();
}
