/* bench_attn.c - the cpu attention kernel (op_attention) at the model's
 * shapes, and the cost of a thread-pool dispatch:
 *
 *   decode       T3 GPT-2 decode: q [1, 16, 1, 64] against the first Tk
 *                positions (410, 660) of a [1, 16, 1000, 64] KV cache,
 *                causal. "hot": one layer's cache (cache-resident, the
 *                kernel's own speed); "cold": 24 layers' caches visited in
 *                turn as a decode step does (about 100 MB, from DRAM).
 *                Figures: microseconds per call, and GB/s of K+V read.
 *   prefill      T3 prefill: [1, 16, 410, 64] causal.
 *   bidir        S3Gen estimator / S3Tokenizer shape: [1, 8, 1000, 64],
 *                bidirectional; "bias" adds a [1, 8, T, T] score bias as the
 *                S3Gen encoder's relative-position attention (T = 500).
 *                GFLOP/s counts 4 Tq Tk D flops per head (2 for QK, 2 for
 *                PV; causal: about half the pairs).
 *   bidir bf16   the same shapes with the arena's BF16 hint: the BF16
 *                kernel (src/core/cpu/attn_bf16.c, AMX-BF16 or AVX512-BF16)
 *                against the F32 AVX-512 kernel as baseline (when neither
 *                is usable both run F32 and the line says so).
 *   dispatch     tp_parallel_for of n = threads tiny items: back to back
 *                ("busy") and after 20 us of serial work on the caller
 *                ("gap", the decode pattern: workers have gone idle).
 *
 * Each attention case runs at the AVX-512 level and at the AVX2 level (bf16
 * cases: AVX-512 with and without the BF16 hint), alternating rep by rep so
 * both see the same load; the second figure is the baseline of the ratio. Every figure is the median over --reps timed
 * repetitions after one untimed warm-up; p10/p90 are of the same samples. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "core/backend.h"
#include "core/cpu_features.h"
#include "core/ops.h"
#include "core/threadpool.h"

static struct bench_opts opt;
static struct backend *cpu;
static struct arena *ar;

static void fill_uniform11(float *x, size_t n, uint32_t seed)
{
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((int32_t)(s >> 8) - (1 << 23)) * (1.0f / (1 << 23));
    }
}

struct attn_case {
    const char *name, *type;
    int64_t H, Tq, Tk, D, cap; /* cap: cache positions (0: k/v are [1, H, Tk, D]) */
    int layers;                /* caches visited in turn */
    bool causal, bias;
    bool bf16; /* paths: BF16 hint (AMX) vs F32, both AVX-512 */
};

static const struct attn_case cases[] = {
    {"decode", "hot", 16, 1, 410, 64, 1000, 1, true, false, false},
    {"decode", "hot", 16, 1, 660, 64, 1000, 1, true, false, false},
    {"decode", "cold", 16, 1, 410, 64, 1000, 24, true, false, false},
    {"decode", "cold", 16, 1, 660, 64, 1000, 24, true, false, false},
    {"prefill", "causal", 16, 410, 410, 64, 1000, 1, true, false, false},
    {"bidir", "plain", 8, 1000, 1000, 64, 0, 1, false, false, false},
    {"bidir", "bias", 8, 500, 500, 64, 0, 1, false, true, false},
    {"bidir", "bf16", 8, 1000, 1000, 64, 0, 1, false, false, true},
    {"bidir", "bf16-bias", 8, 500, 500, 64, 0, 1, false, true, true},
};

static void bench_attention(const struct attn_case *c)
{
    char name[64];
    snprintf(name, sizeof name, "%s:%s", c->name, c->type);
    if (!bench_selected(&opt, name)) return;
    int64_t rows = c->cap ? c->cap : c->Tk;
    size_t nkv = (size_t)(c->H * rows * c->D), nq = (size_t)(c->H * c->Tq * c->D);
    size_t nb = c->bias ? (size_t)(c->H * c->Tq * c->Tk) : 0;
    float *kv = malloc(2 * nkv * (size_t)c->layers * sizeof *kv);
    float *qh = malloc(nq * sizeof *qh), *bh = malloc((nb + 1) * sizeof *bh);
    double *v = calloc(2 * (size_t)opt.reps, sizeof *v);
    if (!kv || !qh || !bh || !v) {
        free(kv); free(qh); free(bh); free(v);
        return;
    }
    fill_uniform11(kv, 2 * nkv * (size_t)c->layers, 11);
    fill_uniform11(qh, nq, 12);
    fill_uniform11(bh, nb, 13);
    const int64_t qne[4] = {1, c->H, c->Tq, c->D}, cne[4] = {1, c->H, rows, c->D};
    const int64_t bne[4] = {1, c->H, c->Tq, c->Tk};
    struct tensor q = tensor_make(TYPE_F32, 4, qne, qh, NULL);
    struct tensor b = tensor_make(TYPE_F32, 4, bne, bh, NULL);
    struct attn_params p = {.scale = 1.0f / sqrtf((float)c->D), .causal = c->causal};
    /* pairs (i, j) with j <= Tk - Tq + i when causal */
    double pairs = (double)c->Tq * (double)c->Tk;
    if (c->causal) pairs -= (double)c->Tq * (double)(c->Tq - 1) / 2;
    double flops = 4.0 * (double)c->H * pairs * (double)c->D;
    double kv_bytes = 2.0 * (double)c->H * (double)c->Tk * (double)c->D * sizeof(float);
    int calls = c->layers; /* one timed sample = one visit of every layer */
    int layer = 0;
    for (int r = -1; r < opt.reps; r++)
        for (int path = 0; path < 2; path++) {
            cpu_set_level(path == 0 || c->bf16 ? CPU_AVX512 : CPU_AVX2);
            arena_set_bf16(ar, c->bf16 && path == 0);
            double t0 = bench_now();
            for (int i = 0; i < calls; i++, layer = (layer + 1) % c->layers) {
                arena_reset(ar);
                float *base = kv + 2 * nkv * (size_t)layer;
                struct tensor kc = tensor_make(TYPE_F32, 4, cne, base, NULL);
                struct tensor vc = tensor_make(TYPE_F32, 4, cne, base + nkv, NULL);
                const struct tensor *k = c->cap ? op_slice(ar, &kc, 2, 0, c->Tk) : &kc;
                const struct tensor *vv = c->cap ? op_slice(ar, &vc, 2, 0, c->Tk) : &vc;
                if (!op_attention(ar, &q, k, vv, c->bias ? &b : NULL, &p))
                    fprintf(stderr, "op_attention: %s\n", arena_errmsg(ar));
            }
            if (r >= 0) v[path * opt.reps + r] = (bench_now() - t0) / calls * 1e6;
        }
    cpu_set_level(CPU_AVX512);
    arena_set_bf16(ar, false);
    const char *bf16_name = cpu_amx_bf16_ready() ? "amx-bf16" : "avx512-bf16";
    const char *pn[2] = {c->bf16 ? bf16_name : "avx512", c->bf16 ? "f32" : "avx2"};
    double us[2], best[2];
    for (int path = 0; path < 2; path++) {
        struct bench_stats s = bench_stats(v + path * opt.reps, opt.reps);
        us[path] = s.median;
        best[path] = s.p10;
    }
    for (int path = 0; path < 2; path++) {
        struct bench_stats s = bench_stats(v + path * opt.reps, opt.reps);
        char type[48];
        snprintf(type, sizeof type, "%s:%s", c->type, pn[path]);
        int64_t shape[4] = {c->H, c->Tq, c->Tk, c->D};
        bench_emit(c->name, type, shape, 4, opt.threads, opt.reps, "us", s,
                   path == 0 ? pn[1] : NULL, path == 0 ? us[1] : 0);
    }
    fprintf(stderr, "%-8s %-6s H%-2lld Tq%-5lld Tk%-5lld D%lld  us median (p10): %s %8.1f (%8.1f),"
            " %s %8.1f (%8.1f); %s %6.1f GFLOP/s, %5.1f GB/s K+V; speed-up %.2fx%s\n",
            c->name, c->type, (long long)c->H, (long long)c->Tq, (long long)c->Tk, (long long)c->D,
            pn[0], us[0], best[0], pn[1], us[1], best[1], pn[0], flops / us[0] * 1e-3,
            kv_bytes / us[0] * 1e-3, us[0] > 0 ? us[1] / us[0] : 0,
            c->bf16 && !cpu_avx512_bf16_ready() ? " (AVX512-BF16 not usable: both F32)" : "");
    free(kv); free(qh); free(bh); free(v);
}

/* ---- thread-pool dispatch ---------------------------------------------- */

static void tiny(void *ctx, int64_t b, int64_t e, int ith)
{
    (void)ith;
    volatile int64_t *sink = ctx;
    for (int64_t i = b; i < e; i++) sink[0] += i;
}

static void spin_us(double us)
{
    double t0 = bench_now();
    while ((bench_now() - t0) * 1e6 < us) {}
}

static void bench_dispatch(void)
{
    if (!bench_selected(&opt, "dispatch")) return;
    int n = tp_n_threads(cpu->tp), inner = 2000;
    double *v = calloc((size_t)opt.reps, sizeof *v);
    if (!v) return;
    volatile int64_t sink = 0;
    for (int mode = 0; mode < 2; mode++) {
        double gap = mode ? 20.0 : 0.0;
        for (int r = -1; r < opt.reps; r++) {
            double t0 = bench_now(), serial = 0;
            for (int i = 0; i < inner; i++) {
                if (gap > 0) {
                    double s0 = bench_now();
                    spin_us(gap);
                    serial += bench_now() - s0;
                }
                tp_parallel_for(cpu->tp, n, 1, tiny, (void *)&sink);
            }
            if (r >= 0) v[r] = (bench_now() - t0 - serial) / inner * 1e6;
        }
        struct bench_stats s = bench_stats(v, opt.reps);
        int64_t shape[1] = {n};
        bench_emit("dispatch", mode ? "gap20us" : "busy", shape, 1, opt.threads, opt.reps, "us", s,
                   NULL, 0);
        fprintf(stderr, "dispatch %-8s %d items: %.2f us per tp_parallel_for (p10 %.2f, p90 %.2f)\n",
                mode ? "gap20us" : "busy", n, s.median, s.p10, s.p90);
    }
    free(v);
}

int main(int argc, char **argv)
{
    if (!bench_parse(argc, argv, &opt, 20)) return 2;
    cpu = backend_cpu_create(opt.threads);
    ar = cpu ? arena_create(cpu, 0) : NULL;
    if (!ar) {
        fprintf(stderr, "bench_attn: cannot create the cpu backend\n");
        backend_cpu_free(cpu);
        return 1;
    }
    fprintf(stderr, "bench_attn: %d threads, %d reps, cpu level %s\n", opt.threads, opt.reps,
            cpu_level_name(cpu_level()));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) bench_attention(&cases[i]);
    bench_dispatch();
    arena_free(ar);
    backend_cpu_free(cpu);
    return 0;
}
