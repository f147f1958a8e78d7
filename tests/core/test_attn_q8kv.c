/* test_attn_q8kv.c - attention over a Q8_0 KV cache (ops_nn.c, cpu/nn.c,
 * ref/nn.c) and the Q8_0 cache write (op_copy_into / op_cast into Q8_0).
 *
 * Per case, keys and values are written into a Q8_0 cache of Tmax
 * positions [B, Hk, Tmax, D] by op_copy_into from an F32 [B, T, Hk, D]
 * projection viewed as [B, Hk, T, D] (strided, as gpt2.c writes it), on
 * the cpu backend and on ref:
 *  1. the cache bytes equal quantize_row_q8_0_ref of the same rows
 *     (cpu and ref, exact);
 *  2. cpu attention on the Q8_0 prefix [0, Tk) of the cache, at every SIMD
 *     level (AVX-512: the rows driver reads Q8_0 as stored for Tq <= 4,
 *     longer queries dequantise), against ref attention given the
 *     dequantised keys and values as F32 (printed max abs / rel, rtol 1e-5);
 *  3. ref attention on the Q8_0 cache itself against the same ref on the
 *     dequantised F32 (exact: ref reads d * q as dequantize_row);
 *  4. op_cast of the Q8_0 cache to F32 equals dequantize_row (exact), and
 *     quantising those values again gives the same bytes (what makes
 *     gpt2_kv_save -> restore -> save exact);
 *  5. op_attention refuses Q8_0 k/v whose head dim is not a multiple of 32
 *     and mixed Q8_0 / F32 k, v;
 *  6. op_cast F32 -> Q8_0 on rows made to hit roundf's halfway cases
 *     (2.5 -> 3, -0.5 -> -1, 0.49999997 -> 0), zero blocks, a scale that
 *     underflows F16, a negative extreme, at every SIMD level: the bytes of
 *     quantize_row_q8_0_ref. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/cpu_features.h"
#include "core/ops.h"
#include "core/quant.h"
#include "testutil.h"

static struct arena *ac, *ar; /* cpu and ref arenas */
static uint64_t seed = 7;

struct qcase {
    int64_t B, Hq, Hk, Tq, Tk, D;
    bool causal;
};

/* A Q8_0 cache [B, H, Tmax, D] in arena a holding F32 host data h
 * ([B, T, H, D], T = Tmax, a projection's layout) written by op_copy_into
 * through the permuted view. */
static struct tensor *cache_q8(struct arena *a, const float *h, int64_t B, int64_t H, int64_t Tmax, int64_t D)
{
    static const int perm[4] = {0, 2, 1, 3};
    const int64_t np[4] = {B, Tmax, H, D}, nc[4] = {B, H, Tmax, D};
    struct tensor *src = op_permute(a, op_from_host(a, TYPE_F32, 4, np, h), perm);
    struct tensor *c = arena_tensor(a, TYPE_Q8_0, 4, nc);
    if (!src || !c || op_copy_into(a, c, src) != CBX_OK) return NULL;
    return c;
}

/* bytes of the Q8_0 cache c against quantize_row_q8_0_ref of h's rows */
static void check_bytes(const char *what, const struct tensor *c, const float *h, int64_t B, int64_t H,
                        int64_t Tmax, int64_t D)
{
    if (!c) {
        CHECK(0, "%s: no cache", what);
        return;
    }
    struct block_q8_0 *want = malloc((size_t)(D / QK) * sizeof *want);
    float *row = malloc((size_t)D * sizeof *row);
    int64_t bad = 0;
    for (int64_t b = 0; want && row && b < B; b++)
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t t = 0; t < Tmax; t++) {
                memcpy(row, h + ((b * Tmax + t) * H + hh) * D, (size_t)D * sizeof *row);
                quantize_row_q8_0_ref(row, want, D);
                const char *got = (const char *)c->data + b * c->nb[0] + hh * c->nb[1] + t * c->nb[2];
                bad += memcmp(got, want, (size_t)(D / QK) * sizeof *want) != 0;
            }
    CHECK(want && row && bad == 0, "%s: %lld of %lld rows differ from quantize_row_q8_0_ref", what,
          (long long)bad, (long long)(B * H * Tmax));
    free(want);
    free(row);
}

/* the first Tk positions of Q8_0 cache c (host memory) dequantised, [B, H, Tk, D] */
static float *deq(const struct tensor *c, int64_t Tk)
{
    int64_t B = c->ne[0], H = c->ne[1], D = c->ne[3];
    float *f = malloc((size_t)(B * H * (Tk ? Tk : 1) * D) * sizeof *f);
    for (int64_t b = 0; f && b < B; b++)
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t t = 0; t < Tk; t++)
                dequantize_row(TYPE_Q8_0, (const char *)c->data + b * c->nb[0] + hh * c->nb[1] + t * c->nb[2],
                               f + ((b * H + hh) * Tk + t) * D, D);
    return f;
}

static float *host(struct arena *a, const struct tensor *t)
{
    float *h = test_host_copy(a, t);
    CHECK(h != NULL, "result: %s", arena_errmsg(a));
    return h;
}

static void run_case(const char *lvl, const struct qcase *t, bool first_level)
{
    const int64_t Tmax = t->Tk + 9, nkv = t->B * t->Hk * Tmax * t->D, nq = t->B * t->Hq * t->Tq * t->D;
    float *hk = malloc((size_t)nkv * sizeof *hk), *hv = malloc((size_t)nkv * sizeof *hv);
    float *hq = malloc((size_t)nq * sizeof *hq);
    if (!hk || !hv || !hq) {
        CHECK(0, "out of memory");
        free(hk), free(hv), free(hq);
        return;
    }
    fill_uniform(hk, (size_t)nkv, -2, 2, seed++);
    fill_uniform(hv, (size_t)nkv, -1, 1, seed++);
    fill_uniform(hq, (size_t)nq, -1, 1, seed++);
    /* a few rows of very different magnitude, so blocks differ in scale */
    for (int64_t i = 0; i < nkv; i += 3 * t->D + 5) hk[i] *= 40, hv[i] *= 25;
    char w[200];
    snprintf(w, sizeof w, "%s q8kv B%lld Hq%lld Hk%lld Tq%lld Tk%lld D%lld%s", lvl, (long long)t->B,
             (long long)t->Hq, (long long)t->Hk, (long long)t->Tq, (long long)t->Tk, (long long)t->D,
             t->causal ? " causal" : "");
    struct tensor *kc = cache_q8(ac, hk, t->B, t->Hk, Tmax, t->D), *vc = cache_q8(ac, hv, t->B, t->Hk, Tmax, t->D);
    struct tensor *kr = cache_q8(ar, hk, t->B, t->Hk, Tmax, t->D), *vr = cache_q8(ar, hv, t->B, t->Hk, Tmax, t->D);
    if (first_level) { /* 1. the write is quantize_row_q8_0_ref, on both backends */
        char w2[240];
        snprintf(w2, sizeof w2, "%s: cpu k write", w);
        check_bytes(w2, kc, hk, t->B, t->Hk, Tmax, t->D);
        snprintf(w2, sizeof w2, "%s: cpu v write", w);
        check_bytes(w2, vc, hv, t->B, t->Hk, Tmax, t->D);
        snprintf(w2, sizeof w2, "%s: ref k write", w);
        check_bytes(w2, kr, hk, t->B, t->Hk, Tmax, t->D);
    }
    const int64_t nq4[4] = {t->B, t->Hq, t->Tq, t->D}, nk4[4] = {t->B, t->Hk, t->Tk, t->D};
    float *kd = kc ? deq(kc, t->Tk) : NULL, *vd = vc ? deq(vc, t->Tk) : NULL;
    struct attn_params p = {.scale = 1.0f / sqrtf((float)t->D), .causal = t->causal};
    if (kd && vd && kr && vr) {
        /* 2. cpu on Q8_0 vs ref on the dequantised F32 */
        struct tensor *oc = op_attention(ac, op_from_host(ac, TYPE_F32, 4, nq4, hq), op_slice(ac, kc, 2, 0, t->Tk),
                                         op_slice(ac, vc, 2, 0, t->Tk), NULL, &p);
        struct tensor *qr = op_from_host(ar, TYPE_F32, 4, nq4, hq);
        struct tensor *of = op_attention(ar, qr, op_from_host(ar, TYPE_F32, 4, nk4, kd),
                                         op_from_host(ar, TYPE_F32, 4, nk4, vd), NULL, &p);
        float *yc = oc ? host(ac, oc) : NULL, *yf = of ? host(ar, of) : NULL;
        CHECK(oc && of, "%s: %s / %s", w, arena_errmsg(ac), arena_errmsg(ar));
        if (yc && yf) check_close(w, yc, yf, (size_t)nq, 1e-6, 1e-5);
        if (first_level) {
            /* 3. ref on Q8_0 = ref on the dequantised values */
            struct tensor *o8 = op_attention(ar, qr, op_slice(ar, kr, 2, 0, t->Tk), op_slice(ar, vr, 2, 0, t->Tk),
                                             NULL, &p);
            float *y8 = o8 ? host(ar, o8) : NULL;
            char w2[240];
            snprintf(w2, sizeof w2, "%s: ref q8_0 vs ref f32 of the same values", w);
            if (y8 && yf) check_close(w2, y8, yf, (size_t)nq, 0, 0);
            else CHECK(0, "%s: %s", w2, arena_errmsg(ar));
            free(y8);
            /* 4. cast to F32 = dequantize_row; quantising it again = the same bytes */
            struct tensor *kf = op_cast(ac, op_slice(ac, kc, 2, 0, t->Tk), TYPE_F32);
            float *yk = kf ? host(ac, kf) : NULL;
            snprintf(w2, sizeof w2, "%s: op_cast q8_0 -> f32 vs dequantize_row", w);
            if (yk) check_close(w2, yk, kd, (size_t)(t->B * t->Hk * t->Tk * t->D), 0, 0);
            else CHECK(0, "%s: %s", w2, arena_errmsg(ac));
            struct tensor *k2 = kf ? op_cast(ac, kf, TYPE_Q8_0) : NULL;
            int64_t bad = 0;
            for (int64_t b = 0; k2 && b < t->B; b++)
                for (int64_t hh = 0; hh < t->Hk; hh++)
                    for (int64_t j = 0; j < t->Tk; j++)
                        bad += memcmp((const char *)k2->data + b * k2->nb[0] + hh * k2->nb[1] + j * k2->nb[2],
                                      (const char *)kc->data + b * kc->nb[0] + hh * kc->nb[1] + j * kc->nb[2],
                                      (size_t)k2->nb[2]) != 0;
            CHECK(k2 && bad == 0, "%s: re-quantised dequantised rows: %lld of %lld differ", w, (long long)bad,
                  (long long)(t->B * t->Hk * t->Tk));
            free(yk);
        }
        free(yc);
        free(yf);
    } else {
        CHECK(0, "%s: setup failed: %s / %s", w, arena_errmsg(ac), arena_errmsg(ar));
    }
    free(kd);
    free(vd);
    free(hk);
    free(hv);
    free(hq);
    arena_reset(ac);
    arena_reset(ar);
}

static void quant_edges(const char *lvl)
{
    enum { NB = 8, N = NB * QK };
    float x[N];
    fill_uniform(x, N, -127, 127, seed++);
    const float ties[] = {127, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, -1.5f, 0.49999997f, -0.49999997f,
                          126.5f, -126.5f, 3.5f, -3.5f, 0.0f, -0.0f, 64.5f};
    for (int j = 0; j < 16; j++) x[j] = ties[j];         /* block 0: d = 1, ties */
    for (int j = QK; j < 2 * QK; j++) x[j] = 0;          /* block 1: zeros */
    for (int j = 2 * QK; j < 3 * QK; j++) x[j] *= 1e-33f; /* block 2: d underflows F16 */
    x[3 * QK + 5] = -300;                                /* block 3: negative extreme */
    for (int j = 4 * QK; j < 5 * QK; j++) x[j] *= 1e-4f; /* block 4: small scale */
    for (int j = 5 * QK; j < 6 * QK; j++) x[j] = (float)(j % 7) * 0.5f - 1.5f; /* halves, amax 1.5 */
    const int64_t ne[2] = {1, N};
    struct tensor *q = op_cast(ac, op_from_host(ac, TYPE_F32, 2, ne, x), TYPE_Q8_0);
    struct block_q8_0 want[NB];
    quantize_row_q8_0_ref(x, want, N);
    int bad = 0;
    for (int b = 0; q && b < NB; b++) bad += memcmp((const struct block_q8_0 *)q->data + b, &want[b], sizeof *want) != 0;
    CHECK(q && bad == 0, "%s op_cast f32 -> q8_0 edge rows: %d of %d blocks differ from quantize_row_q8_0_ref", lvl,
          bad, NB);
    printf("%s op_cast f32 -> q8_0 edge rows: %d of %d blocks differ from quantize_row_q8_0_ref\n", lvl, bad, NB);
    arena_reset(ac);
}

static void errors(void)
{
    const int64_t nq[4] = {1, 2, 1, 48}, nk[4] = {1, 2, 5, 48}, nq64[4] = {1, 2, 1, 64}, nk64[4] = {1, 2, 5, 64};
    struct tensor *q = arena_tensor(ac, TYPE_F32, 4, nq), *k = arena_tensor(ac, TYPE_F32, 4, nk);
    struct attn_params p = {.scale = 1, .causal = false};
    /* a Q8_0 row of 48 is not whole blocks: arena_tensor itself cannot make
     * one, so a descriptor is made by hand */
    struct tensor k8 = *k;
    k8.type = TYPE_Q8_0;
    struct tensor *kd = arena_desc(ac, &k8);
    CHECK(op_attention(ac, q, kd, kd, NULL, &p) == NULL && arena_status(ac) != CBX_OK,
          "q8_0 k, v with head dim 48 refused: %s", arena_errmsg(ac));
    arena_reset(ac);
    q = arena_tensor(ac, TYPE_F32, 4, nq64);
    struct tensor *k32 = arena_tensor(ac, TYPE_F32, 4, nk64), *kq = arena_tensor(ac, TYPE_Q8_0, 4, nk64);
    CHECK(op_attention(ac, q, kq, k32, NULL, &p) == NULL && arena_status(ac) != CBX_OK,
          "q8_0 k with f32 v refused: %s", arena_errmsg(ac));
    arena_reset(ac);
}

int main(void)
{
    struct backend *cpu = backend_cpu_create(3);
    ac = cpu ? arena_create(cpu, 64 << 20) : NULL;
    ar = arena_create(backend_ref(), 64 << 20);
    if (!ac || !ar) {
        CHECK(0, "backend/arena creation");
        return test_summary();
    }
    static const struct qcase cases[] = {
        /* decode (Tq = 1, the T3 step) across 16-key and ZRB = 256 segment tails */
        {1, 4, 4, 1, 1, 64, true},
        {1, 4, 4, 1, 15, 64, true},
        {1, 4, 4, 1, 16, 64, true},
        {1, 4, 4, 1, 17, 64, true},
        {1, 4, 4, 1, 256, 64, true},
        {1, 4, 4, 1, 257, 64, true},
        {1, 16, 16, 1, 600, 64, true},
        {2, 4, 4, 1, 257, 64, false}, /* CFG-like batch of 2 */
        /* grouped heads, other head dims (1, 3, 4 blocks), several rows */
        {1, 8, 2, 1, 600, 64, true},
        {1, 4, 2, 3, 257, 32, true},
        {1, 2, 2, 4, 100, 96, true},
        {2, 4, 4, 2, 17, 128, false},
        /* prefill / long queries (tiles or AMX: dequantised K, V) */
        {1, 4, 4, 16, 16, 64, true},
        {1, 4, 4, 257, 257, 64, true},
        {1, 4, 2, 17, 600, 64, true}, /* a chunk on a cache, grouped */
        {1, 2, 2, 5, 15, 96, false},
    };
    const int nc = (int)(sizeof cases / sizeof cases[0]), top = (int)cpu_level();
    for (int lvl = top; lvl >= 0; lvl--) {
        cpu_set_level((enum cpu_level)lvl);
        quant_edges(cpu_level_name((enum cpu_level)lvl));
        for (int i = 0; i < nc; i++) run_case(cpu_level_name((enum cpu_level)lvl), &cases[i], lvl == top);
    }
    cpu_set_level(CPU_AVX512);
    errors();
    arena_free(ac);
    arena_free(ar);
    backend_cpu_free(cpu);
    return test_summary();
}
