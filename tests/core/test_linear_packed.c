/* test_linear_packed.c - q4_0 / q8_0 weights packed for the decode GEMV
 * (linear_pack, core/cpu/linear_kernels.h) through op_linear on the cpu
 * backend, against a naive reference computed here in double:
 *   y[r, j] = sum_i w^[j, i] x^[r, i] + b[j]
 * with w^ the dequantised weight row and x^ = deq(q8_0(x)), the Q8_0
 * activation the kernels multiply (each product of the kernels is then
 * exact in integers; only float rounding of the per-block scales and
 * sums differs). Bound per output: 1e-5 sum_i |w^ x^| + 1e-6 |b|.
 *
 * Rows of x: 1, 3, 4 (packed dot path: 16-row groups and the dotx tail
 * rows) and 7, 21 (quantised GEMM with tiles unpacked from the packed
 * groups; VNNI and, where there, AMX). Shapes with N not a multiple of 16
 * (tail rows left in the ggml layout), K of 64..4096, packed in place and
 * into another buffer, the packed bytes checked against the layout
 * spelled out here; the packed results are also compared with the
 * plain weights' (float summation order only). Also: what cannot be
 * packed is refused (K % 64, types, fewer than 16 rows, misaligned, already
 * packed) and leaves the output descriptor as it was. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/cpu/cpu_weight.h"
#include "core/cpu/linear_kernels.h"
#include "core/cpu_features.h"
#include "core/quant.h"
#include "testutil.h"

static struct backend *cpu;
static struct arena *ac;

static bool run(const struct tensor *x, const struct tensor *w, const struct tensor *b, float *dst, size_t n)
{
    arena_reset(ac);
    struct tensor *y = op_linear(ac, x, w, b);
    if (!y || (size_t)tensor_nelements(y) != n) {
        CHECK(0, "op_linear failed: %s", arena_errmsg(ac));
        return false;
    }
    memcpy(dst, y->data, n * sizeof *dst);
    return true;
}

static double worst[2]; /* err / bound per type (q4_0, q8_0) */

/* The layout of linear_kernels.h spelled out byte by byte: the packed
 * bytes of w0 ([n, k] rows of type t) must equal these. */
static bool layout_matches(enum dtype t, const char *w0, const uint8_t *pk, int64_t n, int64_t k)
{
    const size_t rs = dtype_row_size(t, k), bs = dtype_traits(t)->size;
    const size_t pair = t == TYPE_Q4_0 ? LINEAR_PK_PAIR_Q4_0 : LINEAR_PK_PAIR_Q8_0;
    const int64_t groups = n / 16;
    for (int64_t g = 0; g < groups; g++)
        for (int64_t b = 0; b < k / QK; b++) {
            const uint8_t *rec = pk + (size_t)g * 16 * rs + (size_t)(b / 2) * pair;
            int h = (int)(b % 2);
            for (int r = 0; r < 16; r++) {
                const uint8_t *blk = (const uint8_t *)w0 + (size_t)(16 * g + r) * rs + (size_t)b * bs;
                if (memcmp(rec + 2 * (16 * h + r), blk, 2)) return false;
                for (int v = 0; v < (t == TYPE_Q4_0 ? 4 : 8); v++)
                    for (int e = 0; e < 4; e++) {
                        uint8_t want = blk[2 + 4 * v + e];
                        if (t == TYPE_Q8_0) want ^= 0x80;
                        size_t off = 64 + (size_t)((t == TYPE_Q4_0 ? 256 : 512) * h) + 64 * (size_t)v +
                                     4 * (size_t)r + (size_t)e;
                        if (rec[off] != want) return false;
                    }
            }
        }
    /* tail rows as they were */
    return !memcmp(pk + (size_t)groups * 16 * rs, w0 + (size_t)groups * 16 * rs, (size_t)(n - 16 * groups) * rs);
}

static void packed_case(enum dtype wt, int64_t m, int64_t k, int64_t n, bool in_place, bool bias,
                        uint64_t seed)
{
    const size_t wrow = dtype_row_size(wt, k), wbytes = wrow * (size_t)n;
    const size_t xrow = dtype_row_size(TYPE_Q8_0, k);
    float *wf = malloc((size_t)(n * k) * sizeof *wf), *wd = malloc((size_t)(n * k) * sizeof *wd);
    float *xc = malloc((size_t)(m * k) * sizeof *xc), *xd = malloc((size_t)(m * k) * sizeof *xd);
    float *bb = malloc((size_t)n * sizeof *bb), *yp = malloc((size_t)(m * n) * sizeof *yp);
    float *yu = malloc((size_t)(m * n) * sizeof *yu);
    char *xq = malloc(xrow);
    char *w0 = aligned_alloc(64, (wbytes + 63) & ~(size_t)63), *wp = aligned_alloc(64, (wbytes + 63) & ~(size_t)63);
    if (!wf || !wd || !xc || !xd || !bb || !yp || !yu || !xq || !w0 || !wp) {
        CHECK(0, "alloc");
        goto cleanup;
    }
    fill_uniform(wf, (size_t)(n * k), -1.0f, 1.0f, seed);
    for (int64_t i = 0; i < n * k; i += 97) wf[i] *= 8.0f; /* some outliers */
    fill_uniform(xc, (size_t)(m * k), -3.0f, 3.0f, seed + 1);
    fill_uniform(bb, (size_t)n, -1.0f, 1.0f, seed + 2);
    for (int64_t r = 0; r < n; r++) {
        quantize_row(wt, wf + r * k, w0 + (size_t)r * wrow, k);
        dequantize_row(wt, w0 + (size_t)r * wrow, wd + r * k, k);
    }
    for (int64_t r = 0; r < m; r++) {
        quantize_row(TYPE_Q8_0, xc + r * k, xq, k);
        dequantize_row(TYPE_Q8_0, xq, xd + r * k, k);
    }
    const int64_t wne[2] = {n, k}, xne[2] = {m, k}, bne[1] = {n};
    struct tensor w = tensor_make(wt, 2, wne, w0, NULL), x = tensor_make(TYPE_F32, 2, xne, xc, NULL);
    struct tensor bt = tensor_make(TYPE_F32, 1, bne, bb, NULL);
    run(&x, &w, bias ? &bt : NULL, yu, (size_t)(m * n)); /* plain weights first */
    struct tensor wpk = w;
    bool packed;
    if (in_place) {
        memcpy(wp, w0, wbytes);
        wpk.data = wp;
        packed = linear_pack(cpu->tp, &wpk, wp, &wpk);
    } else {
        packed = linear_pack(NULL, &w, wp, &wpk);
    }
    CHECK(packed, "linear_pack%s %s [%lld, %lld]", in_place ? " in place" : "", dtype_name(wt), (long long)n,
          (long long)k);
    if (!packed) goto cleanup;
    CHECK(cpu_weight_is(&wpk, CPU_WEIGHT_GEMV16) && wpk.data == wp && wpk.type == wt && wpk.ne[0] == n && wpk.ne[1] == k && !w.extra,
          "the packed descriptor: flag, data, type and shape; the plain one unflagged");
    CHECK(!linear_pack_supported(&wpk), "a packed tensor is not packed again");
    CHECK(layout_matches(wt, w0, (const uint8_t *)wp, n, k), "packed %s [%lld, %lld] bytes follow the layout",
          dtype_name(wt), (long long)n, (long long)k);
    const int amx_runs = m >= linear_qgemm_min_rows && linear_amx_available() ? 2 : 1;
    for (int amx = 0; amx < amx_runs; amx++) {
        linear_qgemm_use_amx = amx;
        if (!run(&x, &wpk, bias ? &bt : NULL, yp, (size_t)(m * n))) break;
        double max_abs = 0, ymax = 0, ratio = 0, vs_plain = 0;
        for (int64_t r = 0; r < m; r++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0, mag = 0;
                for (int64_t i = 0; i < k; i++) {
                    double p = (double)wd[j * k + i] * xd[r * k + i];
                    s += p;
                    mag += fabs(p);
                }
                if (bias) s += bb[j];
                double y = yp[r * n + j], e = fabs(y - s);
                double bound = 1e-5 * mag + (bias ? 1e-6 * fabs(bb[j]) : 0) + 1e-30;
                if (e > max_abs) max_abs = e;
                if (fabs(s) > ymax) ymax = fabs(s);
                if (e / bound > ratio) ratio = e / bound;
                double d = fabs(y - yu[r * n + j]);
                if (d > vs_plain) vs_plain = d;
            }
        int ti = wt == TYPE_Q8_0;
        if (ratio > worst[ti]) worst[ti] = ratio;
        const char *path = m < linear_qgemm_min_rows ? "dot" : amx ? "qgemm amx" : "qgemm vnni";
        printf("packed %s m=%lld [%lld,%lld]%s%s %s: max abs %.3g, rel (max abs / max |y|) %.3g, "
               "err/bound %.3f; vs plain weights max abs %.3g\n",
               dtype_name(wt), (long long)m, (long long)n, (long long)k, in_place ? " in place" : "",
               bias ? " bias" : "", path, max_abs, max_abs / (ymax + 1e-30), ratio, vs_plain);
        CHECK(ratio <= 1.0, "packed %s m=%lld [%lld,%lld] %s: err/bound %.3f > 1", dtype_name(wt), (long long)m,
              (long long)n, (long long)k, path, ratio);
        CHECK(vs_plain <= 1e-5 * (ymax + 1.0), "packed %s m=%lld %s vs plain weights: max abs %.3g",
              dtype_name(wt), (long long)m, path, vs_plain);
    }
    linear_qgemm_use_amx = 1;
cleanup:
    free(wf); free(wd); free(xc); free(xd); free(bb); free(yp); free(yu); free(xq); free(w0); free(wp);
}

/* A row-exact arena (arena_set_row_exact) keeps the packed dot path at
 * any row count; the group kernel takes up to four rows a pass (then 2,
 * 1). Each row of m = 1..13 rows (every split of the passes, two calls of
 * eight rows) must be bit for bit that row computed alone. */
static void row_exact_case(enum dtype wt, int64_t k, int64_t n, uint64_t seed)
{
    enum { M = 13 };
    const size_t wrow = dtype_row_size(wt, k), wbytes = wrow * (size_t)n;
    float *wf = malloc((size_t)(n * k) * sizeof *wf), *xc = malloc((size_t)(M * k) * sizeof *xc);
    float *bb = malloc((size_t)n * sizeof *bb), *alone = malloc((size_t)(M * n) * sizeof *alone);
    float *all = malloc((size_t)(M * n) * sizeof *all);
    char *w0 = aligned_alloc(64, (wbytes + 63) & ~(size_t)63);
    if (!wf || !xc || !bb || !alone || !all || !w0) {
        CHECK(0, "alloc");
        goto cleanup;
    }
    fill_uniform(wf, (size_t)(n * k), -1.0f, 1.0f, seed);
    fill_uniform(xc, (size_t)(M * k), -3.0f, 3.0f, seed + 1);
    fill_uniform(bb, (size_t)n, -1.0f, 1.0f, seed + 2);
    for (int64_t r = 0; r < n; r++) quantize_row(wt, wf + r * k, w0 + (size_t)r * wrow, k);
    const int64_t wne[2] = {n, k}, bne[1] = {n};
    struct tensor w = tensor_make(wt, 2, wne, w0, NULL), bt = tensor_make(TYPE_F32, 1, bne, bb, NULL);
    if (!linear_pack(cpu->tp, &w, w0, &w)) {
        CHECK(0, "linear_pack %s [%lld, %lld]", dtype_name(wt), (long long)n, (long long)k);
        goto cleanup;
    }
    arena_set_row_exact(ac, true);
    const int64_t one[2] = {1, k};
    for (int64_t r = 0; r < M; r++) {
        struct tensor x = tensor_make(TYPE_F32, 2, one, xc + r * k, NULL);
        if (!run(&x, &w, &bt, alone + r * n, (size_t)n)) goto done;
    }
    int bad = 0;
    for (int64_t m = 2; m <= M; m++) {
        const int64_t xne[2] = {m, k};
        struct tensor x = tensor_make(TYPE_F32, 2, xne, xc, NULL);
        if (!run(&x, &w, &bt, all, (size_t)(m * n))) goto done;
        if (memcmp(all, alone, (size_t)(m * n) * sizeof *all)) bad++;
    }
    printf("packed %s [%lld,%lld] row-exact: %d of %d row counts differ from each row alone\n",
           dtype_name(wt), (long long)n, (long long)k, bad, M - 1);
    CHECK(bad == 0, "packed %s [%lld, %lld]: rows of a batch differ from the rows alone", dtype_name(wt),
          (long long)n, (long long)k);
done:
    arena_set_row_exact(ac, false);
cleanup:
    free(wf); free(xc); free(bb); free(alone); free(all); free(w0);
}

static void test_refused(void)
{
    char *buf = aligned_alloc(64, 1 << 16);
    if (!buf) {
        CHECK(0, "alloc");
        return;
    }
    memset(buf, 0, 1 << 16);
    const int64_t k96[2] = {32, 96}, few[2] = {15, 64}, ok[2] = {32, 64};
    struct tensor a = tensor_make(TYPE_Q4_0, 2, k96, buf, NULL);   /* K % 64 */
    struct tensor b = tensor_make(TYPE_Q8_0, 2, few, buf, NULL);   /* < 16 rows */
    struct tensor c = tensor_make(TYPE_Q4_1, 2, ok, buf, NULL);    /* type */
    struct tensor d = tensor_make(TYPE_Q4_0, 2, ok, buf + 4, NULL); /* misaligned */
    struct tensor e = tensor_make(TYPE_Q4_0, 2, ok, buf, NULL);
    struct tensor out = e;
    CHECK(!linear_pack_supported(&a) && !linear_pack(NULL, &a, buf, &out), "K = 96 refused");
    CHECK(!linear_pack_supported(&b) && !linear_pack(NULL, &b, buf, &out), "15 rows refused");
    CHECK(!linear_pack_supported(&c) && !linear_pack(NULL, &c, buf, &out), "q4_1 refused");
    CHECK(!linear_pack_supported(&d) && !linear_pack(NULL, &d, buf + 4, &out), "misaligned data refused");
    CHECK(!linear_pack(NULL, &e, buf + 4, &out), "misaligned destination refused");
    linear_pack_enable = 0;
    CHECK(!linear_pack_supported(&e), "linear_pack_enable = 0 refuses");
    linear_pack_enable = 1;
    CHECK(!out.extra && out.data == buf, "a refused pack leaves the output descriptor alone");
    free(buf);
}

int main(void)
{
    cpu = backend_cpu_create(2);
    ac = cpu ? arena_create(cpu, 0) : NULL;
    if (!cpu || !ac) {
        CHECK(0, "backend/arena creation");
        return test_summary();
    }
    if (cpu_level() < CPU_AVX512) {
        printf("packed weights: level %s has no packed kernels (AVX-512 VNNI), skipped\n",
               cpu_level_name(cpu_level()));
        const int64_t ne[2] = {32, 64};
        char buf[32 * 36] __attribute__((aligned(64)));
        struct tensor w = tensor_make(TYPE_Q8_0, 2, ne, buf, NULL);
        CHECK(!linear_pack_supported(&w), "no packing below AVX-512");
        arena_free(ac);
        backend_cpu_free(cpu);
        return test_summary();
    }
    const char *env = getenv("CBX_PACK");
    if (env && !strcmp(env, "0")) {
        const int64_t ne[2] = {32, 64};
        char *buf = aligned_alloc(64, 32 * 36);
        struct tensor w = tensor_make(TYPE_Q8_0, 2, ne, buf, NULL);
        printf("packed weights: CBX_PACK=0, packing off: skipped\n");
        CHECK(buf && !linear_pack_supported(&w), "CBX_PACK=0 turns packing off");
        free(buf);
        arena_free(ac);
        backend_cpu_free(cpu);
        return test_summary();
    }
    test_refused();
    const enum dtype types[] = {TYPE_Q4_0, TYPE_Q8_0};
    struct { int64_t k, n; } shapes[] = {{64, 16}, {128, 67}, {192, 35}, {1024, 48}, {4096, 19}, {1024, 1027}};
    const int64_t ms[] = {1, 3, 4, 7, 21};
    uint64_t seed = 5000;
    for (size_t t = 0; t < 2; t++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                packed_case(types[t], ms[mi], shapes[s].k, shapes[s].n, (s + mi) % 2 == 0, (s + mi) % 3 != 0,
                            seed++);
        printf("packed %s all shapes: worst err/bound %.3f\n", dtype_name(types[t]), worst[t]);
        row_exact_case(types[t], 256, 35, seed++);
        row_exact_case(types[t], 4096, 32, seed++);
    }
    arena_free(ac);
    backend_cpu_free(cpu);
    return test_summary();
}
