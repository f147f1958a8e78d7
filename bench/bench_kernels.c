/* bench_kernels.c - linear-algebra kernels of the cpu backend against the
 * machine's own limits, measured in the same run:
 *
 *   copy         STREAM-like copy of two --mem MiB buffers on --threads
 *                threads; GB/s counts bytes read + bytes written (STREAM
 *                convention). The baseline of every bandwidth figure.
 *   fma_peak     independent FMA chains on every thread (GFLOP/s), the
 *                baseline of the sgemm figures.
 *   matvec       op_linear with one row of x (the T3 decode step) at the
 *                T3 / Llama shapes [N, K], F32/F16/Q8_0/Q4_0 weights. The
 *                weights cycle through enough copies to fill --mem MiB so
 *                they come from DRAM as in a real decode step (the whole
 *                model is far larger than the caches); GB/s = weight bytes
 *                read per second, ratio = that / copy GB/s.
 *   matvec_hot   the same with one copy (cache-resident): the kernels'
 *                compute ceiling.
 *   matvec_packed  q4_0 / q8_0 weights packed as T3 loads them
 *                (linear_pack, the decode GEMV layout) at the matvec
 *                shapes, from DRAM, for 1, 2 (the CFG pair), 4 and 8
 *                rows of x (a server batch) through the dot path as a
 *                row-exact arena takes it: weight GB/s, ratio to copy,
 *                and us per call against one row's in the same run (the
 *                group kernel reads the weights once for up to 4 rows).
 *   linear_rows  M = 1..256 rows of x at [4096, 1024] through each path
 *                op_linear has, in the same run: the per-row dot path
 *                ("dot", the only quantised path before the GEMM), the
 *                dequantise + sgemm path ("gemm") and, for q4_0/q8_0 at
 *                the AVX-512 level, the quantised GEMM with VNNI tiles
 *                ("qgemm") and with AMX tiles ("qgemm_amx", where the CPU
 *                and OS have AMX-INT8); weight
 *                GB/s and us per call, and the speed-up of qgemm over dot.
 *                Places the switch-overs (linear_dot_max_rows,
 *                linear_qgemm_min_rows). Above 16 rows fewer weight
 *                copies cycle (the cases are compute-bound there).
 *   sgemm        op_linear with many rows (CFM-like: M = 602 or 1204
 *                frames), F32 weights through OpenBLAS and through our
 *                GEMM (cpu/gemm.c) in the same run (ratio to OpenBLAS), F16
 *                dequantised per tile, Q8_0 through the quantised GEMM at
 *                the AVX-512 level (dequantised per tile below it);
 *                GFLOP/s and ratio to fma_peak (the F32 FMA peak, which
 *                the int8 GEMM can exceed).
 *   dotx         the AVX-512 q4_0/q8_0 row kernels alone, one thread, hot
 *                (a [256, K] matrix in L2): one row per call (dotx) vs four
 *                rows sharing the x loads (dotx4); the best of --reps * 20
 *                short samples (a sample rarely sees a preemption, so the
 *                best is the kernel's own speed even on a loaded machine),
 *                weight GB/s and the 4-row speed-up.
 *   conv1d       op_conv1d at the HiFT decoder's shapes (134 mel frames:
 *                conv_pre, ResBlocks of the three stages, conv_post), F32,
 *                through the AVX-512 direct kernel ("direct") and through
 *                im2col + sgemm (the AVX2 level's path, "im2col"); GFLOP/s,
 *                ratio to fma_peak, and direct / im2col speed-up; with
 *                AMX-BF16 or AVX512-BF16 ready, also with the arena's BF16
 *                hint (conv_bf16.c, "bf16:amx" or "bf16:avx512bf16":
 *                operands rounded to bf16) and its speed-up over the F32
 *                direct kernel in the same run.
 *   linear_bf16  op_linear at the S3Gen estimator's shapes (M = 1000 rows
 *                = 2 x 500 frames; qkv 256->1536, attention out 512->256,
 *                feed-forward 256->1024 and 1024->256, k3 convs 768->256
 *                and 960->256) and at M = 8..128 for 256->1024, q4_0 and
 *                q8_0 weights, and at T3 Turbo's prefill (409 rows;
 *                [3072|1024|4096, 1024], [1024, 4096], packed as T3
 *                packs them): the arena's BF16 hint on (the BF16 path,
 *                linear_bf16.h, on AMX-BF16 or AVX512-BF16) against off
 *                (the quantised GEMM,
 *                AMX-INT8 where there), alternating rep by rep; GFLOP/s
 *                and the speed-up. Places linear_bf16_min_rows.
 * Every figure is the median over --reps timed repetitions after one
 * untimed warm-up; p10/p90 are of the same samples. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "core/backend.h"
#include "core/cpu/blas.h"
#include "core/cpu/linear_bf16.h"
#include "core/cpu/linear_kernels.h"
#include "core/cpu_features.h"
#include "core/quant.h"
#include "core/threadpool.h"

static struct bench_opts opt;
static struct backend *cpu;
static struct arena *ar;
static double copy_gbs, read_gbs, peak_gflops;

/* ---- baselines --------------------------------------------------------- */

static void bench_copy(void)
{
    copy_gbs = bench_copy_baseline(cpu->tp, &opt);
    read_gbs = bench_read_baseline(cpu->tp, &opt);
}

#define FMA_CHAINS 12
#define FMA_ITERS 2000000

__attribute__((target("avx512f"))) static double fma_avx512(void)
{
    __m512 a[FMA_CHAINS], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm512_set1_ps((float)i);
    for (int it = 0; it < FMA_ITERS; it++)
        for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    __m512 s = a[0];
    for (int i = 1; i < FMA_CHAINS; i++) s = _mm512_add_ps(s, a[i]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (double)FMA_ITERS * FMA_CHAINS * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double fma_avx2(void)
{
    __m256 a[FMA_CHAINS], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm256_set1_ps((float)i);
    for (int it = 0; it < FMA_ITERS; it++)
        for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    float out[8];
    __m256 s = a[0];
    for (int i = 1; i < FMA_CHAINS; i++) s = _mm256_add_ps(s, a[i]);
    _mm256_storeu_ps(out, s);
    volatile float sink = out[0];
    (void)sink;
    return (double)FMA_ITERS * FMA_CHAINS * 8 * 2;
}

static void fma_part(void *ctx, int64_t b, int64_t e, int ith)
{
    (void)ith;
    double *flops = ctx;
    for (int64_t i = b; i < e; i++)
        flops[i] = cpu_level() >= CPU_AVX512 ? fma_avx512() : cpu_level() >= CPU_AVX2 ? fma_avx2() : 0;
}

static void bench_fma_peak(void)
{
    int reps = opt.reps < 5 ? opt.reps : 5; /* long and very stable */
    double v[5], *flops = calloc((size_t)opt.threads, sizeof *flops);
    if (!flops) return;
    for (int r = -1; r < reps; r++) {
        double t0 = bench_now();
        tp_parallel_for(cpu->tp, opt.threads, 1, fma_part, flops);
        double t = bench_now() - t0, total = 0;
        for (int i = 0; i < opt.threads; i++) total += flops[i];
        if (r >= 0) v[r] = total / t * 1e-9;
    }
    struct bench_stats s = bench_stats(v, reps);
    peak_gflops = s.median;
    int64_t shape[1] = {FMA_CHAINS};
    bench_emit("fma_peak", cpu_level_name(cpu_level()), shape, 1, opt.threads, reps, "GFLOP/s",
               s, NULL, 0);
    fprintf(stderr, "fma peak (%s): %.1f GFLOP/s\n", cpu_level_name(cpu_level()), s.median);
    free(flops);
}

/* ---- weights ------------------------------------------------------------ */

static void fill_random(float *x, size_t n, uint32_t seed)
{
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((int32_t)(s >> 8) - (1 << 23)) * (1.0f / (1 << 23)) * 0.05f;
    }
}

/* `copies` back-to-back copies of one random [n, k] matrix of type t. */
static void *make_weights(enum dtype t, int64_t n, int64_t k, int64_t copies, size_t *bytes)
{
    size_t row = dtype_row_size(t, k), sz = row * (size_t)n;
    char *w = aligned_alloc(64, (sz * (size_t)copies + 63) & ~(size_t)63);
    float *f = malloc((size_t)k * sizeof *f);
    if (!w || !f) { free(w); free(f); return NULL; }
    for (int64_t r = 0; r < n; r++) {
        fill_random(f, (size_t)k, (uint32_t)r);
        quantize_row(t, f, w + (size_t)r * row, k);
    }
    for (int64_t c = 1; c < copies; c++) memcpy(w + (size_t)c * sz, w, sz);
    free(f);
    *bytes = sz;
    return w;
}

/* Median weight GB/s of op_linear over x[m, k] with `copies` weights. */
static struct bench_stats time_linear(enum dtype t, int64_t m, int64_t n, int64_t k,
                                      int64_t copies, const char *w, size_t wbytes,
                                      const float *xv, double *per_call_us)
{
    double *v = calloc((size_t)opt.reps, sizeof *v), *us = calloc((size_t)opt.reps, sizeof *us);
    struct bench_stats s = {0, 0, 0};
    *per_call_us = 0;
    if (!v || !us) goto cleanup;
    int64_t xne[2] = {m, k}, wne[2] = {n, k};
    struct tensor x = tensor_make(TYPE_F32, 2, xne, (void *)xv, NULL);
    for (int r = -1; r < opt.reps; r++) {
        double t0 = bench_now();
        for (int64_t c = 0; c < copies; c++) {
            struct tensor wt = tensor_make(t, 2, wne, (char *)w + (size_t)c * wbytes, NULL);
            arena_reset(ar);
            if (!op_linear(ar, &x, &wt, NULL)) {
                fprintf(stderr, "op_linear: %s\n", arena_errmsg(ar));
                goto cleanup;
            }
        }
        double dt = bench_now() - t0;
        if (r >= 0) {
            v[r] = (double)wbytes * (double)copies / dt * 1e-9;
            us[r] = dt / (double)copies * 1e6;
        }
    }
    s = bench_stats(v, opt.reps);
    *per_call_us = bench_stats(us, opt.reps).median;
cleanup:
    free(v);
    free(us);
    return s;
}

/* ---- matrix-vector ------------------------------------------------------ */

static const struct { int64_t n, k; const char *what; } mv_shapes[] = {
    {1024, 1024, "T3 attn (q,k,v,o) [1024,1024]"},
    {4096, 1024, "T3 mlp up / Llama gate,up [4096,1024]"},
    {1024, 4096, "T3 mlp down / Llama down [1024,4096]"},
    {6563, 1024, "T3 speech head [6563,1024]"},
};
static const enum dtype mv_types[] = {TYPE_F32, TYPE_F16, TYPE_Q8_0, TYPE_Q4_0};

static void bench_matvec(bool hot)
{
    const char *name = hot ? "matvec_hot" : "matvec";
    for (size_t ti = 0; ti < sizeof mv_types / sizeof mv_types[0]; ti++) {
        enum dtype t = mv_types[ti];
        char sel[64];
        snprintf(sel, sizeof sel, "%s/%s", name, dtype_name(t));
        if (!bench_selected(&opt, sel)) continue;
        for (size_t si = 0; si < sizeof mv_shapes / sizeof mv_shapes[0]; si++) {
            int64_t n = mv_shapes[si].n, k = mv_shapes[si].k;
            size_t one = dtype_row_size(t, k) * (size_t)n;
            int64_t copies = hot ? 1 : (int64_t)(((opt.mem_mib << 20) + one - 1) / one);
            size_t wbytes;
            char *w = make_weights(t, n, k, copies, &wbytes);
            float *x = malloc((size_t)k * sizeof *x);
            if (!w || !x) { fprintf(stderr, "%s: out of memory\n", name); free(w); free(x); return; }
            fill_random(x, (size_t)k, 7);
            /* hot: repeat the one matrix enough times for a measurable sample */
            int64_t loops = hot ? (int64_t)((64u << 20) / wbytes) + 1 : copies;
            double us;
            struct bench_stats s;
            if (hot) {
                /* reuse the copies loop with a stride of 0 by timing `loops` calls */
                double *v = calloc((size_t)opt.reps, sizeof *v), *u = calloc((size_t)opt.reps, sizeof *u);
                int64_t xne[2] = {1, k}, wne[2] = {n, k};
                struct tensor xt = tensor_make(TYPE_F32, 2, xne, x, NULL);
                struct tensor wt = tensor_make(t, 2, wne, w, NULL);
                for (int r = -1; v && u && r < opt.reps; r++) {
                    double t0 = bench_now();
                    for (int64_t c = 0; c < loops; c++) {
                        arena_reset(ar);
                        op_linear(ar, &xt, &wt, NULL);
                    }
                    double dt = bench_now() - t0;
                    if (r >= 0) {
                        v[r] = (double)wbytes * (double)loops / dt * 1e-9;
                        u[r] = dt / (double)loops * 1e6;
                    }
                }
                s = v ? bench_stats(v, opt.reps) : (struct bench_stats){0, 0, 0};
                us = u ? bench_stats(u, opt.reps).median : 0;
                free(v);
                free(u);
            } else {
                s = time_linear(t, 1, n, k, copies, w, wbytes, x, &us);
            }
            int64_t shape[2] = {n, k};
            bench_emit(name, dtype_name(t), shape, 2, opt.threads, opt.reps, "GB/s", s, "read",
                       read_gbs);
            fprintf(stderr, "%-10s %-5s %-40s %7.1f us  %6.1f GB/s  %4.0f%% of read, %4.0f%% of copy\n", name,
                    dtype_name(t), mv_shapes[si].what, us, s.median, read_gbs > 0 ? 100 * s.median / read_gbs : 0,
                    copy_gbs > 0 ? 100 * s.median / copy_gbs : 0);
            free(w);
            free(x);
        }
    }
}

/* ---- packed decode GEMV, 1..8 rows --------------------------------------- */

static void bench_matvec_packed(void)
{
    static const enum dtype types[] = {TYPE_Q4_0, TYPE_Q8_0};
    static const int64_t rows[] = {1, 2, 4, 8};
    if (cpu_level() < CPU_AVX512) return;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        enum dtype t = types[ti];
        char sel[64];
        snprintf(sel, sizeof sel, "matvec_packed/%s", dtype_name(t));
        if (!bench_selected(&opt, sel)) continue;
        for (size_t si = 0; si < sizeof mv_shapes / sizeof mv_shapes[0]; si++) {
            int64_t n = mv_shapes[si].n, k = mv_shapes[si].k;
            size_t one = dtype_row_size(t, k) * (size_t)n;
            int64_t copies = (int64_t)(((opt.mem_mib << 20) + one - 1) / one);
            size_t wbytes;
            char *w = make_weights(t, n, k, copies, &wbytes);
            float *x = malloc((size_t)(8 * k) * sizeof *x);
            struct tensor *wt = calloc((size_t)copies, sizeof *wt);
            double *v = calloc((size_t)opt.reps, sizeof *v), *u = calloc((size_t)opt.reps, sizeof *u);
            bool ok = w && x && wt && v && u;
            const int64_t wne[2] = {n, k};
            for (int64_t c = 0; ok && c < copies; c++) {
                wt[c] = tensor_make(t, 2, wne, w + (size_t)c * wbytes, NULL);
                ok = linear_pack(cpu->tp, &wt[c], wt[c].data, &wt[c]);
            }
            if (!ok) {
                fprintf(stderr, "matvec_packed: out of memory or not packable\n");
                free(w); free(x); free(wt); free(v); free(u);
                return;
            }
            fill_random(x, (size_t)(8 * k), 11);
            arena_set_row_exact(ar, true);
            double us1 = 0;
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
                const int64_t m = rows[ri], xne[2] = {m, k};
                struct tensor xt = tensor_make(TYPE_F32, 2, xne, x, NULL);
                for (int r = -1; r < opt.reps; r++) {
                    double t0 = bench_now();
                    for (int64_t c = 0; c < copies; c++) {
                        arena_reset(ar);
                        if (!op_linear(ar, &xt, &wt[c], NULL)) {
                            fprintf(stderr, "op_linear: %s\n", arena_errmsg(ar));
                            break;
                        }
                    }
                    double dt = bench_now() - t0;
                    if (r >= 0) {
                        v[r] = (double)wbytes * (double)copies / dt * 1e-9;
                        u[r] = dt / (double)copies * 1e6;
                    }
                }
                struct bench_stats s = bench_stats(v, opt.reps);
                double us = bench_stats(u, opt.reps).median;
                if (m == 1) us1 = us;
                char ty[32];
                snprintf(ty, sizeof ty, "%s:rows%lld", dtype_name(t), (long long)m);
                int64_t shape[2] = {n, k};
                bench_emit("matvec_packed", ty, shape, 2, opt.threads, opt.reps, "GB/s", s, "read", read_gbs);
                fprintf(stderr, "matvec_packed %-5s %-40s rows %lld %7.1f us  %6.1f GB/s  %4.0f%% of read, %4.0f%% "
                        "of copy  x%.2f one row's time\n", dtype_name(t), mv_shapes[si].what, (long long)m, us,
                        s.median, read_gbs > 0 ? 100 * s.median / read_gbs : 0,
                        copy_gbs > 0 ? 100 * s.median / copy_gbs : 0, us1 > 0 ? us / us1 : 0);
            }
            arena_set_row_exact(ar, false);
            free(w); free(x); free(wt); free(v); free(u);
        }
    }
}

/* ---- rows: dot path vs sgemm path --------------------------------------- */

static void bench_rows(void)
{
    const enum dtype types[] = {TYPE_Q4_0, TYPE_Q8_0, TYPE_F16, TYPE_F32};
    const int64_t rows[] = {1, 2, 4, 8, 16, 32, 64, 256};
    const int64_t n = 4096, k = 1024, max_rows = 256;
    static const char *const path_name[] = {"dot", "gemm", "qgemm", "qgemm_amx"};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        enum dtype t = types[ti];
        char sel[64];
        snprintf(sel, sizeof sel, "linear_rows/%s", dtype_name(t));
        if (!bench_selected(&opt, sel)) continue;
        size_t one = dtype_row_size(t, k) * (size_t)n;
        int64_t copies = (int64_t)(((opt.mem_mib << 20) / 4 + one - 1) / one);
        size_t wbytes;
        char *w = make_weights(t, n, k, copies, &wbytes);
        float *x = malloc((size_t)(max_rows * k) * sizeof *x);
        if (!w || !x) { free(w); free(x); return; }
        fill_random(x, (size_t)(max_rows * k), 9);
        int saved_dot = linear_dot_max_rows, saved_qg = linear_qgemm_min_rows;
        bool has_qg = linear_x_quantised(t, 1 << 20, cpu_level());
        int npath = has_qg ? 3 + (linear_amx_available() ? 1 : 0) : 2;
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            int64_t m = rows[ri], cm = m <= 16 ? copies : (copies * 16 + m - 1) / m;
            double us[4] = {0, 0, 0, 0};
            for (int path = 0; path < npath; path++) {
                linear_dot_max_rows = path == 0 ? 1 << 30 : 0;
                linear_qgemm_min_rows = path >= 2 ? 1 : 1 << 30;
                linear_qgemm_use_amx = path == 3;
                struct bench_stats s = time_linear(t, m, n, k, cm, w, wbytes, x, &us[path]);
                char ty[32];
                snprintf(ty, sizeof ty, "%s:%s", dtype_name(t), path_name[path]);
                int64_t shape[3] = {m, n, k};
                bench_emit("linear_rows", ty, shape, 3, opt.threads, opt.reps, "GB/s", s,
                           "copy", copy_gbs);
            }
            int best = us[1] < us[0] ? 1 : 0;
            for (int p = 2; p < npath; p++)
                if (us[p] < us[best]) best = p;
            fprintf(stderr, "linear_rows %-5s m=%-3lld [%lld,%lld]: dot %8.1f us, dequant+sgemm %8.1f us",
                    dtype_name(t), (long long)m, (long long)n, (long long)k, us[0], us[1]);
            if (has_qg)
                fprintf(stderr, ", qgemm %8.1f us (%.2fx dot)", us[2], us[2] > 0 ? us[0] / us[2] : 0);
            if (npath > 3)
                fprintf(stderr, ", qgemm_amx %8.1f us (%.2fx dot)", us[3], us[3] > 0 ? us[0] / us[3] : 0);
            fprintf(stderr, " -> %s\n", path_name[best]);
        }
        linear_dot_max_rows = saved_dot;
        linear_qgemm_min_rows = saved_qg;
        linear_qgemm_use_amx = 1;
        free(w);
        free(x);
    }
}

/* ---- sgemm --------------------------------------------------------------- */

static void bench_sgemm(void)
{
    static const int64_t shapes[][3] = { /* M (frames), K, N */
        {1204, 256, 256}, {1204, 256, 1024}, {1204, 1024, 256}, {1204, 512, 512},
        {1204, 1024, 1024}, {602, 256, 1024}, {602, 1024, 256}, {602, 512, 512},
    };
    const enum dtype types[] = {TYPE_F32, TYPE_F16, TYPE_Q8_0};
    for (size_t ti = 0; ti < 3; ti++) {
        enum dtype t = types[ti];
        char sel[64];
        snprintf(sel, sizeof sel, "sgemm/%s", dtype_name(t));
        if (!bench_selected(&opt, sel)) continue;
        if (peak_gflops == 0) bench_fma_peak();
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            int64_t m = shapes[si][0], k = shapes[si][1], n = shapes[si][2];
            size_t wbytes;
            char *w = make_weights(t, n, k, 1, &wbytes);
            float *x = malloc((size_t)(m * k) * sizeof *x);
            if (!w || !x) { free(w); free(x); return; }
            fill_random(x, (size_t)(m * k), 11);
            /* F32: OpenBLAS, then our kernels (where the CPU level has
             * them) against it; other types as op_linear runs them */
            const enum cpu_sgemm_impl impls[] = {SGEMM_BLAS, SGEMM_OWN};
            const int n_impl = t == TYPE_F32 && cpu_level() >= CPU_AVX2 ? 2 : 1;
            double blas_gflops = 0;
            for (int ii = 0; ii < n_impl; ii++) {
                const enum cpu_sgemm_impl prev = cpu_sgemm_set_impl(t == TYPE_F32 ? impls[ii] : SGEMM_AUTO);
                char ty[64];
                snprintf(ty, sizeof ty, "%s%s%s", dtype_name(t), t == TYPE_F32 ? " " : "",
                         t == TYPE_F32 ? cpu_sgemm_name() : "");
                double us;
                struct bench_stats s = time_linear(t, m, n, k, 1, w, wbytes, x, &us);
                cpu_sgemm_set_impl(prev);
                /* convert weight GB/s samples to GFLOP/s: flops per weight byte */
                double f = 2.0 * (double)(m * n * k) / (double)wbytes;
                s.median *= f; s.p10 *= f; s.p90 *= f;
                int64_t shape[3] = {m, k, n};
                if (ii == 0) blas_gflops = s.median;
                bench_emit("sgemm", ty, shape, 3, opt.threads, opt.reps, "GFLOP/s", s, ii ? "openblas" : "fma_peak",
                           ii ? blas_gflops : peak_gflops);
                fprintf(stderr, "sgemm %-22s M=%-5lld K=%-5lld N=%-5lld %8.0f us  %6.1f GFLOP/s  %4.0f%% of peak",
                        ty, (long long)m, (long long)k, (long long)n, us, s.median,
                        peak_gflops > 0 ? 100 * s.median / peak_gflops : 0);
                if (ii) fprintf(stderr, "  x%.2f of openblas", blas_gflops > 0 ? s.median / blas_gflops : 0);
                fputc('\n', stderr);
            }
            free(w);
            free(x);
        }
    }
}

/* ---- dotx kernels --------------------------------------------------------- */

static void bench_dotx(void)
{
    if (!bench_selected(&opt, "dotx") || cpu_level() < CPU_AVX512) return;
    const enum dtype types[] = {TYPE_Q8_0, TYPE_Q4_0};
    const int64_t ks[] = {1024, 4096}, n = 256;
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t ki = 0; ki < 2; ki++) {
            enum dtype t = types[ti];
            int64_t k = ks[ki], nb = k / QK;
            size_t wbytes, row = dtype_row_size(t, k);
            char *w = make_weights(t, n, k, 1, &wbytes);
            float *x = malloc((size_t)k * sizeof *x), *out = malloc((size_t)n * sizeof *out);
            struct block_q8_0 *xq = malloc((size_t)nb * sizeof *xq);
            int8_t *qs = malloc((size_t)k);
            float *d = malloc((size_t)(2 * nb) * sizeof *d);
            if (!w || !x || !out || !xq || !qs || !d) {
                free(w); free(x); free(out); free(xq); free(qs); free(d);
                return;
            }
            fill_random(x, (size_t)k, 7);
            quantize_row(TYPE_Q8_0, x, xq, k);
            struct linear_xq xp = {.q = xq};
            linear_xq_prepare(&xp, qs, d, d + nb, k);
            linear_dotx_fn f1 = linear_dotx_avx512(t);
            linear_dotx4_fn f4 = linear_dotx4_avx512(t);
            double best[2] = {1e30, 1e30};
            volatile float sink = 0;
            for (int r = 0; r < opt.reps * 20; r++)
                for (int v = 0; v < 2; v++) {
                    double t0 = bench_now();
                    if (v == 0)
                        for (int64_t i = 0; i < n; i++) out[i] = f1(w + (size_t)i * row, &xp, k);
                    else
                        for (int64_t i = 0; i < n; i += 4) f4(w + (size_t)i * row, row, &xp, k, out + i);
                    double dt = bench_now() - t0;
                    sink += out[n - 1];
                    if (dt < best[v]) best[v] = dt;
                }
            (void)sink;
            for (int v = 0; v < 2; v++) {
                double g = (double)wbytes / best[v] * 1e-9;
                struct bench_stats s = {g, g, g};
                char ty[32];
                snprintf(ty, sizeof ty, "%s:%s", dtype_name(t), v == 0 ? "dotx" : "dotx4");
                int64_t shape[2] = {n, k};
                bench_emit("dotx", ty, shape, 2, 1, opt.reps * 20, "GB/s", s, "copy", copy_gbs);
            }
            fprintf(stderr, "dotx %-5s [%lld,%lld] hot, 1 thread, best: 1 row %6.1f GB/s, 4 rows "
                    "%6.1f GB/s, speed-up %.2fx\n", dtype_name(t), (long long)n, (long long)k,
                    (double)wbytes / best[0] * 1e-9, (double)wbytes / best[1] * 1e-9,
                    best[0] / best[1]);
            free(w); free(x); free(out); free(xq); free(qs); free(d);
        }
}

/* ---- conv1d ------------------------------------------------------------ */

/* the engine of the BF16 kernels now: AMX tiles or VDPBF16PS */
static const char *bf16_engine(void) { return cpu_amx_bf16_ready() ? "amx" : "avx512bf16"; }


static void bench_conv1d(void)
{
    static const int64_t shapes[][5] = { /* Cin, Cout, K, dilation, T */
        {80, 512, 7, 1, 134},     {256, 256, 3, 1, 1072},  {256, 256, 11, 5, 1072},
        {128, 128, 7, 3, 5360},   {128, 128, 11, 1, 5360}, {64, 64, 3, 1, 16080},
        {64, 64, 11, 5, 16080},   {64, 18, 7, 1, 16080},
    };
    if (!bench_selected(&opt, "conv1d")) return;
    if (peak_gflops == 0) bench_fma_peak();
    const bool bf16 = cpu_avx512_bf16_ready();
    char bf16_name[32];
    snprintf(bf16_name, sizeof bf16_name, "bf16:%s", bf16_engine());
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t cin = shapes[si][0], cout = shapes[si][1], K = shapes[si][2];
        int64_t dil = shapes[si][3], T = shapes[si][4];
        float *xv = malloc((size_t)(cin * T) * sizeof *xv);
        float *wv = malloc((size_t)(cout * cin * K) * sizeof *wv);
        float *bv = malloc((size_t)cout * sizeof *bv);
        double *v = calloc(3 * (size_t)opt.reps, sizeof *v);
        if (!xv || !wv || !bv || !v) { free(xv); free(wv); free(bv); free(v); return; }
        fill_random(xv, (size_t)(cin * T), 3);
        fill_random(wv, (size_t)(cout * cin * K), 4);
        fill_random(bv, (size_t)cout, 5);
        int64_t xne[3] = {1, cin, T}, wne[3] = {cout, cin, K}, bne[1] = {cout};
        struct tensor x = tensor_make(TYPE_F32, 3, xne, xv, NULL);
        struct tensor w = tensor_make(TYPE_F32, 3, wne, wv, NULL);
        struct tensor b = tensor_make(TYPE_F32, 1, bne, bv, NULL);
        struct conv1d_params p = {.stride = 1, .dilation = (int)dil, .groups = 1,
                                  .pad_left = (int)(dil * (K - 1) / 2),
                                  .pad_right = (int)(dil * (K - 1) / 2)};
        double flops = 2.0 * (double)(cout * cin * K * T), gf[3] = {0, 0, 0}, best[3] = {0, 0, 0};
        int npath = bf16 ? 3 : 2;
        /* the paths alternate rep by rep, so all see the same load */
        for (int r = -1; r < opt.reps; r++)
            for (int path = 0; path < npath; path++) {
                cpu_set_level(path == 1 ? CPU_AVX2 : CPU_AVX512);
                arena_reset(ar);
                arena_set_bf16(ar, path == 2);
                double t0 = bench_now();
                if (!op_conv1d(ar, &x, &w, &b, &p)) fprintf(stderr, "op_conv1d: %s\n", arena_errmsg(ar));
                if (r >= 0) v[path * opt.reps + r] = flops / (bench_now() - t0) * 1e-9;
            }
        const char *const names[3] = {"f32:direct", "f32:im2col", bf16_name};
        for (int path = 0; path < npath; path++) {
            struct bench_stats s = bench_stats(v + path * opt.reps, opt.reps);
            gf[path] = s.median;
            best[path] = s.p90;
            int64_t shape[5] = {cin, cout, K, dil, T};
            bench_emit("conv1d", names[path], shape, 5, opt.threads, opt.reps, "GFLOP/s", s,
                       path == 2 ? "f32:direct" : "fma_peak", path == 2 ? gf[0] : peak_gflops);
        }
        cpu_set_level(CPU_AVX512);
        arena_set_bf16(ar, false);
        fprintf(stderr, "conv1d %4lld->%-4lld K%-2lld d%lld T%-6lld GFLOP/s median (p90): direct %5.1f"
                " (%5.1f), im2col %5.1f (%5.1f); speed-up %.2fx (p90 %.2fx); direct %3.0f%% of peak\n",
                (long long)cin, (long long)cout, (long long)K, (long long)dil, (long long)T, gf[0],
                best[0], gf[1], best[1], gf[1] > 0 ? gf[0] / gf[1] : 0,
                best[1] > 0 ? best[0] / best[1] : 0, peak_gflops > 0 ? 100 * gf[0] / peak_gflops : 0);
        if (bf16)
            fprintf(stderr, "       %s GFLOP/s median %6.1f (p90 %6.1f): %.2fx the f32 direct kernel\n",
                    bf16_name, gf[2], best[2], gf[0] > 0 ? gf[2] / gf[0] : 0);
        free(xv); free(wv); free(bv); free(v);
    }
}

/* ---- BF16 products vs the quantised GEMM ---------------------------------- */


static void bench_linear_bf16(void)
{
    static const int64_t shapes[][4] = { /* M, K, N, packed */
        {1000, 256, 1536, 0}, {1000, 512, 256, 0}, {1000, 256, 1024, 0}, {1000, 1024, 256, 0},
        {1000, 768, 256, 0},  {1000, 960, 256, 0}, {8, 256, 1024, 0},    {16, 256, 1024, 0},
        {24, 256, 1024, 0},   {32, 256, 1024, 0},  {48, 256, 1024, 0},   {64, 256, 1024, 0},
        {128, 256, 1024, 0},
        /* T3 Turbo prefill (409 positions), weights packed as T3 loads them */
        {409, 1024, 3072, 1}, {409, 1024, 1024, 1}, {409, 1024, 4096, 1}, {409, 4096, 1024, 1},
    };
    const enum dtype types[] = {TYPE_Q4_0, TYPE_Q8_0};
    if (!linear_bf16_available()) {
        if (bench_selected(&opt, "linear_bf16"))
            fprintf(stderr, "linear_bf16: neither AMX-BF16 nor AVX512-BF16 usable here, skipped\n");
        return;
    }
    const int saved = linear_bf16_min_rows;
    linear_bf16_min_rows = 1;
    linear_bf16_quant_dp = true; /* time this GEMM for quantised weights without AMX too */
    for (size_t ti = 0; ti < 2; ti++) {
        enum dtype t = types[ti];
        char sel[64];
        snprintf(sel, sizeof sel, "linear_bf16/%s", dtype_name(t));
        if (!bench_selected(&opt, sel)) continue;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            int64_t m = shapes[si][0], k = shapes[si][1], n = shapes[si][2];
            bool packed = shapes[si][3];
            size_t wbytes;
            char *w = make_weights(t, n, k, 1, &wbytes);
            float *xv = malloc((size_t)(m * k) * sizeof *xv);
            double *v = calloc(2 * (size_t)opt.reps, sizeof *v);
            if (!w || !xv || !v) { free(w); free(xv); free(v); break; }
            fill_random(xv, (size_t)(m * k), 11);
            int64_t xne[2] = {m, k}, wne[2] = {n, k};
            struct tensor x = tensor_make(TYPE_F32, 2, xne, xv, NULL), wt = tensor_make(t, 2, wne, w, NULL);
            if (packed && !linear_pack(cpu->tp, &wt, w, &wt)) packed = false;
            double flops = 2.0 * (double)(m * n * k), gf[2];
            /* the two paths alternate rep by rep, so both see the same load */
            for (int r = -1; r < opt.reps; r++)
                for (int path = 0; path < 2; path++) {
                    arena_reset(ar);
                    arena_set_bf16(ar, path == 1);
                    double t0 = bench_now();
                    if (!op_linear(ar, &x, &wt, NULL)) fprintf(stderr, "op_linear: %s\n", arena_errmsg(ar));
                    if (r >= 0) v[path * opt.reps + r] = flops / (bench_now() - t0) * 1e-9;
                }
            arena_set_bf16(ar, false);
            char bf16_name[32];
            snprintf(bf16_name, sizeof bf16_name, "bf16:%s", bf16_engine());
            const char *const names[2] = {"qgemm", bf16_name};
            for (int path = 0; path < 2; path++) {
                char ty[32];
                snprintf(ty, sizeof ty, "%s%s:%s", dtype_name(t), packed ? "-packed" : "", names[path]);
                struct bench_stats s = bench_stats(v + path * opt.reps, opt.reps);
                gf[path] = s.median;
                int64_t shape[3] = {m, k, n};
                bench_emit("linear_bf16", ty, shape, 3, opt.threads, opt.reps, "GFLOP/s", s,
                           path ? "qgemm" : NULL, path ? gf[0] : 0);
            }
            fprintf(stderr, "linear_bf16 %-5s%s M=%-5lld K=%-5lld N=%-5lld GFLOP/s median: qgemm%s %7.1f, "
                    "%s %7.1f: %.2fx\n", dtype_name(t), packed ? " packed" : "", (long long)m, (long long)k, (long long)n,
                    linear_qgemm_use_amx && linear_amx_available() ? " (amx-int8)" : "", gf[0], bf16_name, gf[1],
                    gf[0] > 0 ? gf[1] / gf[0] : 0);
            free(w); free(xv); free(v);
        }
    }
    linear_bf16_min_rows = saved;
    linear_bf16_quant_dp = false;
}

int main(int argc, char **argv)
{
    if (!bench_parse(argc, argv, &opt, 20)) return 2;
    cpu = backend_cpu_create(opt.threads);
    ar = cpu ? arena_create(cpu, 0) : NULL;
    if (!ar) {
        fprintf(stderr, "bench_kernels: cannot create the cpu backend\n");
        backend_cpu_free(cpu);
        return 1;
    }
    fprintf(stderr, "bench_kernels: %d threads, %d reps, cpu level %s, working set %zu MiB\n",
            opt.threads, opt.reps, cpu_level_name(cpu_level()), opt.mem_mib);
    bench_copy(); /* always: the baseline of the bandwidth figures */
    bench_matvec(false);
    bench_matvec(true);
    bench_matvec_packed();
    bench_rows();
    bench_sgemm();
    bench_dotx();
    bench_conv1d();
    bench_linear_bf16();
    arena_free(ar);
    backend_cpu_free(cpu);
    return 0;
}
