/* test_linear_bf16.c - op_linear's BF16 path (core/cpu/linear_bf16.h), taken
 * on the cpu backend when the arena asks for BF16 products, on each engine
 * this machine has: AMX-BF16 tiles, then VDPBF16PS with AMX forbidden
 * (cpu_set_amx).
 *
 * Weights F32, F16, BF16, Q8_0, Q4_0 and q4_0 / q8_0 packed by linear_pack;
 * rows of x 1..3, 15, 16, 17, 33, 40, 50, 70, 100, 1000 (linear_bf16_min_rows
 * set to 1 so every row count takes the path); N with tails (5, 17, 80,
 * 1043 = 1024 + 16 + 3, 1000), K with tails (40, 72, 80, 96, 1000) and
 * without (64, 128, 256, 1024), bias or not, x contiguous, a view with a row
 * stride past K, or transposed (its elements M floats apart). Per output,
 * with x^ and w^ the F32 operands (w^ the dequantised weight) and bf() the
 * round-to-nearest-even to BF16 (f32_to_bf16):
 *  1. against sum bf(x^) bf(w^) + b in double: only the FP32 summation
 *     differs, |err| <= 1e-5 S + 1e-6 |b| with S = sum |bf(x^) bf(w^)|;
 *     rounding by truncation instead (or a K pair, column or row out of
 *     place) exceeds it by orders of magnitude;
 *  2. against sum x^ w^ + b in double (the F32 product): each product
 *     carries both operands' rounding (<= 2^-9 each), so |err| <=
 *     (2^-8 + 2^-12) S' + 1e-6 |b|, S' = sum |x^ w^| (2^-12 S' for the
 *     FP32 sums, as core_conv_bf16);
 *  3. the F32 op_linear result (arena without the hint: sgemm / dot with
 *     F32 x for float weights, asserted with the bound of 2; the Q8_0-x
 *     quantised GEMM for q4_0 / q8_0, whose own error is not bounded by
 *     it: printed only).
 * Max abs, rel (max abs / max |ref|) and worst error / bound are printed.
 * Without AMX, q4_0 / q8_0 weights go to the quantised GEMM even with the
 * hint (checked bit for bit against the call without it), and the cases
 * then run with linear_bf16_quant_dp set, so the VDPBF16PS GEMM is checked
 * on every weight type.
 * An engine the CPU or OS lack is named as not checked; with neither the
 * test says so and passes unchecked. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/cpu/linear_bf16.h"
#include "core/cpu/linear_kernels.h"
#include "core/cpu_features.h"
#include "core/quant.h"
#include "testutil.h"

static struct backend *cpu;
static struct arena *ab, *af; /* BF16 hint on / off */
static double worst_tight, worst_loose, worst_f32op;

static float bf(float v) { return bf16_to_f32(f32_to_bf16(v)); }

/* One case: weights of type wt ([n, k], packed when asked), x [m, k]
 * (rows ldx >= k floats apart), bias or not. */
static void check_case(enum dtype wt, bool packed, int64_t m, int64_t n, int64_t k, bool bias,
                       int64_t ldx, bool transposed, uint64_t seed)
{
    char what[160];
    snprintf(what, sizeof what, "%s%s m=%lld n=%lld k=%lld%s%s", dtype_name(wt), packed ? " packed" : "",
             (long long)m, (long long)n, (long long)k, bias ? " bias" : "",
             transposed ? " transposed x" : ldx > k ? " strided x" : "");
    const size_t wrow = dtype_row_size(wt, k), wbytes = (wrow * (size_t)n + 63) & ~(size_t)63;
    float *wf = malloc((size_t)(n * k) * sizeof *wf), *wd = malloc((size_t)(n * k) * sizeof *wd);
    float *xs = malloc((size_t)(m * ldx) * sizeof *xs), *bb = malloc((size_t)n * sizeof *bb);
    float *y = malloc((size_t)(m * n) * sizeof *y), *yf = malloc((size_t)(m * n) * sizeof *yf);
    char *w0 = aligned_alloc(64, wbytes), *wp = aligned_alloc(64, wbytes);
    float *xt = NULL;
    if (!wf || !wd || !xs || !bb || !y || !yf || !w0 || !wp) {
        CHECK(0, "%s: out of memory", what);
        goto out;
    }
    fill_uniform(wf, (size_t)(n * k), -1.0f, 1.0f, seed);
    for (int64_t i = 0; i < n * k; i += 97) wf[i] *= 8.0f; /* some outliers */
    fill_uniform(xs, (size_t)(m * ldx), -3.0f, 3.0f, seed + 1);
    fill_uniform(bb, (size_t)n, -1.0f, 1.0f, seed + 2);
    for (int64_t r = 0; r < n; r++) {
        quantize_row(wt, wf + r * k, w0 + (size_t)r * wrow, k);
        dequantize_row(wt, w0 + (size_t)r * wrow, wd + r * k, k);
    }
    const int64_t wne[2] = {n, k}, xne[2] = {m, k}, bne[1] = {n};
    struct tensor w = tensor_make(wt, 2, wne, w0, NULL), x = tensor_make(TYPE_F32, 2, xne, xs, NULL);
    x.nb[0] = ldx * 4;
    if (transposed) { /* x's elements m floats apart */
        if (!(xt = malloc((size_t)(m * k) * sizeof *xt))) {
            CHECK(0, "%s: out of memory", what);
            goto out;
        }
        for (int64_t r = 0; r < m; r++)
            for (int64_t i = 0; i < k; i++) xt[i * m + r] = xs[r * ldx + i];
        x.data = xt;
        x.nb[0] = 4;
        x.nb[1] = m * 4;
    }
    struct tensor bt = tensor_make(TYPE_F32, 1, bne, bb, NULL);
    if (packed) {
        bool ok = linear_pack(NULL, &w, wp, &w);
        CHECK(ok, "%s: linear_pack", what);
        if (!ok) goto out;
    }
    CHECK(linear_bf16_supported(&w), "%s: the BF16 path takes these weights", what);
    arena_reset(ab);
    arena_reset(af);
    struct tensor *yt = op_linear(ab, &x, &w, bias ? &bt : NULL);
    struct tensor *yft = op_linear(af, &x, &w, bias ? &bt : NULL);
    if (!yt || !yft || tensor_nelements(yt) != m * n) {
        CHECK(0, "%s: op_linear failed: %s / %s", what, arena_errmsg(ab), arena_errmsg(af));
        goto out;
    }
    memcpy(y, yt->data, (size_t)(m * n) * sizeof *y);
    memcpy(yf, yft->data, (size_t)(m * n) * sizeof *yf);
    double abs_t = 0, abs_l = 0, abs_o = 0, ref_max = 0, rt = 0, rl = 0, ro = 0;
    float *xb = malloc((size_t)k * sizeof *xb), *wb = malloc((size_t)(n * k) * sizeof *wb);
    if (!xb || !wb) {
        CHECK(0, "%s: out of memory", what);
        free(xb);
        free(wb);
        goto out;
    }
    for (int64_t i = 0; i < n * k; i++) wb[i] = bf(wd[i]);
    for (int64_t r = 0; r < m; r++) {
        const float *xr = xs + r * ldx;
        for (int64_t i = 0; i < k; i++) xb[i] = bf(xr[i]);
        for (int64_t c = 0; c < n; c++) {
            const float *wr = wd + c * k, *wbr = wb + c * k;
            double sb = 0, mb = 0, sf = 0, mf = 0;
            for (int64_t i = 0; i < k; i++) {
                double pb = (double)xb[i] * wbr[i], pf = (double)xr[i] * wr[i];
                sb += pb;
                mb += fabs(pb);
                sf += pf;
                mf += fabs(pf);
            }
            double bv = bias ? bb[c] : 0.0;
            sb += bv;
            sf += bv;
            double g = y[r * n + c], e_t = fabs(g - sb), e_l = fabs(g - sf), e_o = fabs(g - yf[r * n + c]);
            double bt_ = 1e-5 * mb + 1e-6 * fabs(bv) + 1e-30;
            double bl = (0x1p-8 + 0x1p-12) * mf + 1e-6 * fabs(bv) + 1e-30;
            abs_t = fmax(abs_t, e_t);
            abs_l = fmax(abs_l, e_l);
            abs_o = fmax(abs_o, e_o);
            ref_max = fmax(ref_max, fabs(sf));
            rt = fmax(rt, e_t / bt_);
            rl = fmax(rl, e_l / bl);
            ro = fmax(ro, e_o / bl);
        }
    }
    free(xb);
    free(wb);
    printf("%-44s bf16 ref: max abs %.3g rel %.3g err/bound %.3f | f32 ref: max abs %.3g rel %.3g "
           "err/bound %.3f | f32 op_linear: max abs %.3g err/bound %.3f\n",
           what, abs_t, abs_t / (ref_max + 1e-30), rt, abs_l, abs_l / (ref_max + 1e-30), rl, abs_o, ro);
    worst_tight = fmax(worst_tight, rt);
    worst_loose = fmax(worst_loose, rl);
    CHECK(rt <= 1.0, "%s: vs the bf16-operand reference err/bound %.3f > 1", what, rt);
    CHECK(rl <= 1.0, "%s: vs the f32 reference err/bound %.3f > 1", what, rl);
    if (wt == TYPE_F32 || wt == TYPE_F16 || wt == TYPE_BF16) {
        worst_f32op = fmax(worst_f32op, ro);
        CHECK(ro <= 1.0, "%s: vs f32 op_linear err/bound %.3f > 1", what, ro);
    }
out:
    free(xt);
    free(wf); free(wd); free(xs); free(bb); free(y); free(yf); free(w0); free(wp);
}

/* Without AMX and linear_bf16_quant_dp off, q4_0 / q8_0 weights take the
 * quantised GEMM with the hint too: the same output as without it, bit for
 * bit (the hint must not route them to the slower VDPBF16PS GEMM). */
static void check_quant_default(void)
{
    const int64_t m = 100, n = 80, k = 256, wne[2] = {n, k}, xne[2] = {m, k};
    const enum dtype types[2] = {TYPE_Q4_0, TYPE_Q8_0};
    for (int ti = 0; ti < 2; ti++) {
        const size_t wrow = dtype_row_size(types[ti], k);
        float *wf = malloc((size_t)(n * k) * sizeof *wf), *xv = malloc((size_t)(m * k) * sizeof *xv);
        char *w0 = malloc(wrow * (size_t)n);
        if (!wf || !xv || !w0) {
            CHECK(0, "out of memory");
        } else {
            fill_uniform(wf, (size_t)(n * k), -1, 1, 21);
            fill_uniform(xv, (size_t)(m * k), -3, 3, 22);
            for (int64_t r = 0; r < n; r++) quantize_row(types[ti], wf + r * k, w0 + (size_t)r * wrow, k);
            struct tensor w = tensor_make(types[ti], 2, wne, w0, NULL);
            struct tensor x = tensor_make(TYPE_F32, 2, xne, xv, NULL);
            arena_reset(ab);
            arena_reset(af);
            struct tensor *y1 = op_linear(ab, &x, &w, NULL), *y2 = op_linear(af, &x, &w, NULL);
            CHECK(!linear_bf16_supported(&w) && y1 && y2 && !memcmp(y1->data, y2->data, (size_t)(m * n) * 4),
                  "%s without AMX: the quantised GEMM with the hint too, bit for bit", dtype_name(types[ti]));
        }
        free(wf);
        free(xv);
        free(w0);
    }
}

static void run_cases(void)
{
    uint64_t seed = 11;
    const enum dtype types[5] = {TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_Q8_0, TYPE_Q4_0};
    const int64_t rows[8] = {1, 2, 3, 15, 16, 17, 33, 100};
    for (int ti = 0; ti < 7; ti++) {
        enum dtype t = types[ti < 5 ? ti : ti - 2];
        bool packed = ti >= 5, quant = t == TYPE_Q8_0 || t == TYPE_Q4_0;
        for (int i = 0; i < 8; i++) /* row tails, N tail of 16, bias on odd */
            check_case(t, packed, rows[i], 80, 256, i % 2, 256, false, seed += 3);
        check_case(t, packed, 1000, 80, 256, true, 256, false, seed += 3);
        check_case(t, packed, 33, 1043, 1024, true, 1024, false, seed += 3); /* N tail 16 + 3 */
        check_case(t, packed, 17, 1000, quant ? (packed ? 128 : 96) : 1000, false,
                   quant ? (packed ? 128 : 96) : 1000, false, seed += 3); /* K tail / odd blocks */
        check_case(t, packed, 100, 1043, quant ? 64 : 80, true, quant ? 64 : 80, false, seed += 3);
        check_case(t, packed, 50, 200, 256, true, 256 + 7, false, seed += 3); /* strided rows */
        check_case(t, packed, 40, 48, quant ? 64 : 72, true, quant ? 64 : 72, true, seed += 3);
        check_case(t, packed, 70, packed ? 17 : 5, quant ? 64 : 40, true, quant ? 64 : 40, false,
                   seed += 3); /* one column block, or one packed group + a row */
    }
}

int main(void)
{
    if (!test_bf16_usable("op_linear")) return 0;
    cpu = backend_cpu_create(2);
    ab = cpu ? arena_create(cpu, 0) : NULL;
    af = cpu ? arena_create(cpu, 0) : NULL;
    if (!ab || !af) {
        CHECK(0, "backend/arena creation");
        return test_summary();
    }
    arena_set_bf16(ab, true);
    const int min_rows = linear_bf16_min_rows;
    linear_bf16_min_rows = 1;
    for (int e = 0; e < 2; e++) { /* AMX tiles, then VDPBF16PS */
        if (!test_bf16_engine(e)) continue;
        if (e == 1) { /* quantised weights: the default routing, then the kernel itself */
            check_quant_default();
            linear_bf16_quant_dp = true;
        }
        run_cases();
        linear_bf16_quant_dp = false;
    }
    cpu_set_amx(true);
    printf("worst err/bound: bf16-operand ref %.3f, f32 ref %.3f, f32 op_linear (float weights) %.3f\n",
           worst_tight, worst_loose, worst_f32op);
    /* below the threshold the hint changes nothing: the F32 paths, bit for bit */
    linear_bf16_min_rows = min_rows;
    if (min_rows > 1) {
        const int64_t m = min_rows - 1, n = 48, k = 64, wne[2] = {n, k}, xne[2] = {m, k};
        float *wv = malloc((size_t)(n * k) * sizeof *wv), *xv = malloc((size_t)(m * k) * sizeof *xv);
        if (wv && xv) {
            fill_uniform(wv, (size_t)(n * k), -1, 1, 5);
            fill_uniform(xv, (size_t)(m * k), -1, 1, 6);
            struct tensor w = tensor_make(TYPE_F32, 2, wne, wv, NULL);
            struct tensor x = tensor_make(TYPE_F32, 2, xne, xv, NULL);
            arena_reset(ab);
            arena_reset(af);
            struct tensor *y1 = op_linear(ab, &x, &w, NULL), *y2 = op_linear(af, &x, &w, NULL);
            CHECK(y1 && y2 && !memcmp(y1->data, y2->data, (size_t)(m * n) * 4),
                  "%lld rows (below linear_bf16_min_rows): same result with and without the hint",
                  (long long)m);
        } else {
            CHECK(0, "out of memory");
        }
        free(wv);
        free(xv);
    }
    arena_free(ab);
    arena_free(af);
    backend_cpu_free(cpu);
    return test_summary();
}
