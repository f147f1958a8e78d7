/* test_linear.c - op_linear and op_matmul: the cpu backend at every SIMD
 * level this CPU has (generic, avx2, avx512) against the ref backend and
 * against its own generic level, on random data with odd sizes (K not a
 * multiple of 64, N odd), strided and transposed x views, with and without
 * bias, one row and a few rows (dot path), many rows (sgemm path).
 *
 * Bound for cpu vs ref, per output y[m, n]: the cpu dot path multiplies
 * the quantised activation x^ = deq(q8(x)) (Q8_0/Q8_1, as ggml), the ref
 * the exact x, both with the same dequantised weights w^, so
 *   |y_cpu - y_ref| <= sum_i |w^_i| |x_i - x^_i|             (x rounding)
 *                      + sum_blocks |m_b| |s_b - d_b sum q|   (Q8_1 s in fp16)
 *                      + 1e-5 sum_i |w^_i x_i|                (float sums)
 * and the check passes when every element is within it (the printed
 * ratio is the worst err / bound). SIMD levels against generic differ
 * only in float summation order: 1e-5 sum |w^ x^|.
 *
 * From linear_qgemm_min_rows rows up, the AVX-512 level takes the
 * quantised GEMM (VNNI tiles; with AMX tiles too as the extra variant
 * "avx512+amx" where the CPU and OS have AMX): the same Q8_0 x as the dot
 * path, so the same bound. Shapes with M not a multiple of the 16-row x
 * group, N not a multiple of the 8/16-row weight tiles, K of 2..128
 * blocks, and M = 160 at K = 4096 (x packed in more than one L2 chunk).
 * Also checked: the GEMM's x packing bit for bit against
 * quantize_row_q8_0_ref, the GEMM against the dot path (summation order
 * only) and AMX against VNNI (bit-identical). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/cpu/linear_kernels.h"
#include "core/cpu_features.h"
#include "core/quant.h"
#include "testutil.h"

static struct backend *cpu;
static struct arena *ac, *ar;

/* The x layouts exercised: how the [M, K] logical matrix sits in memory. */
enum layout { L_CONTIG, L_ROWPAD, L_3D_GAP, L_TRANSPOSED, L_COUNT };
static const char *layout_name[] = {"contiguous", "row-padded", "3d-gapped", "transposed"};

/* Build x as a view of `buf` (allocated here, freed by the caller) holding
 * the values xc[M*K] in the given layout. */
static struct tensor make_x(enum layout l, const float *xc, int64_t m, int64_t k, float **buf)
{
    struct tensor t;
    memset(&t, 0, sizeof t);
    t.type = TYPE_F32;
    size_t cap = (size_t)((m + 2) * (k + 5)) * 2;
    float *b = calloc(cap, sizeof *b);
    *buf = b;
    if (!b) return t;
    t.data = b;
    switch (l) {
    case L_CONTIG:
        t.ndim = 2; t.ne[0] = m; t.ne[1] = k; t.nb[1] = 4; t.nb[0] = 4 * k;
        break;
    case L_ROWPAD:
        t.ndim = 2; t.ne[0] = m; t.ne[1] = k; t.nb[1] = 4; t.nb[0] = 4 * (k + 5);
        break;
    case L_3D_GAP: /* [m, 1, k] with a gap between... use [g, m/g, k] when m even */
        if (m % 2 == 0) {
            t.ndim = 3; t.ne[0] = 2; t.ne[1] = m / 2; t.ne[2] = k;
            t.nb[2] = 4; t.nb[1] = 4 * k; t.nb[0] = 4 * k * (m / 2 + 1);
        } else {
            t.ndim = 3; t.ne[0] = m; t.ne[1] = 1; t.ne[2] = k;
            t.nb[2] = 4; t.nb[1] = 4 * k; t.nb[0] = 4 * (k + 3);
        }
        break;
    case L_TRANSPOSED:
        t.ndim = 2; t.ne[0] = m; t.ne[1] = k; t.nb[0] = 4; t.nb[1] = 4 * m;
        break;
    default: break;
    }
    for (int64_t r = 0; r < m; r++) {
        int64_t off = 0, q = r;
        for (int d = t.ndim - 2; d >= 0; d--) {
            off += (q % t.ne[d]) * t.nb[d];
            q /= t.ne[d];
        }
        for (int64_t i = 0; i < k; i++)
            memcpy((char *)b + off + i * t.nb[t.ndim - 1], xc + r * k + i, 4);
    }
    return t;
}

static void run_linear(struct arena *a, const struct tensor *x, const struct tensor *w,
                       const struct tensor *b, float *dst, size_t n)
{
    arena_reset(a);
    struct tensor *y = op_linear(a, x, w, b);
    if (!y) {
        CHECK(0, "op_linear failed: %s", arena_errmsg(a));
        memset(dst, 0, n * sizeof *dst);
        return;
    }
    CHECK(tensor_nelements(y) == (int64_t)n, "op_linear output size");
    memcpy(dst, y->data, n * sizeof *dst);
}

static double worst_ratio[32];

static void linear_case(enum dtype wt, int64_t m, int64_t k, int64_t n, enum layout lay,
                        bool bias, uint64_t seed)
{
    int vt = quant_vec_dot_type(wt);
    size_t wrow = dtype_row_size(wt, k), xrow = dtype_row_size((enum dtype)vt, k);
    float *wf = malloc((size_t)(n * k) * sizeof *wf), *wd = malloc((size_t)(n * k) * sizeof *wd);
    float *xc = malloc((size_t)(m * k) * sizeof *xc), *xd = malloc((size_t)(m * k) * sizeof *xd);
    float *bb = malloc((size_t)n * 2 * sizeof *bb);
    char *wq = malloc(wrow * (size_t)n), *xq = malloc(xrow * (size_t)m);
    float *yr = malloc((size_t)(m * n) * sizeof *yr), *yg = malloc((size_t)(m * n) * sizeof *yg);
    float *yc = malloc((size_t)(m * n) * sizeof *yc), *xbuf = NULL;
    double *bound = malloc((size_t)(m * n) * sizeof *bound), *mag = malloc((size_t)(m * n) * sizeof *mag);
    double *xbd = malloc((size_t)(m * n) * sizeof *xbd);
    if (!wf || !wd || !xc || !xd || !bb || !wq || !xq || !yr || !yg || !yc || !bound || !mag || !xbd) {
        CHECK(0, "alloc");
        goto cleanup;
    }
    fill_uniform(wf, (size_t)(n * k), -1.0f, 1.0f, seed);
    for (int64_t i = 0; i < n * k; i += 97) wf[i] *= 8.0f; /* some outliers */
    fill_uniform(xc, (size_t)(m * k), -3.0f, 3.0f, seed + 1);
    fill_uniform(bb, (size_t)n * 2, -1.0f, 1.0f, seed + 2);
    for (int64_t r = 0; r < n; r++) {
        quantize_row(wt, wf + r * k, wq + r * wrow, k);
        dequantize_row(wt, wq + r * wrow, wd + r * k, k);
    }
    for (int64_t r = 0; r < m; r++) {
        quantize_row((enum dtype)vt, xc + r * k, xq + r * xrow, k);
        dequantize_row((enum dtype)vt, xq + r * xrow, xd + r * k, k);
    }
    int64_t wne[2] = {n, k}, bne[1] = {n};
    struct tensor w = tensor_make(wt, 2, wne, wq, NULL);
    struct tensor b = tensor_make(TYPE_F32, 1, bne, bb, NULL);
    b.nb[0] = 8; /* strided bias view: every other value */
    struct tensor x = make_x(lay, xc, m, k, &xbuf);
    if (!xbuf) { CHECK(0, "alloc"); goto cleanup; }
    const struct tensor *bp = bias ? &b : NULL;

    /* per-output bound (see the header comment) */
    const size_t wbs = dtype_traits(wt)->size;
    for (int64_t r = 0; r < m; r++) {
        for (int64_t o = 0; o < n; o++) {
            double bd = 0, mg = 0, mq = 0;
            for (int64_t i = 0; i < k; i++) {
                double wv = fabs(wd[o * k + i]);
                bd += wv * fabs((double)xc[r * k + i] - xd[r * k + i]);
                mg += wv * fabs(xc[r * k + i]);
                mq += wv * fabs(xd[r * k + i]);
            }
            if (vt == TYPE_Q8_1) {
                for (int64_t blk = 0; blk < k / QK; blk++) {
                    uint16_t mh;
                    memcpy(&mh, wq + o * wrow + blk * wbs + 2, 2);
                    const struct block_q8_1 *xb = (const struct block_q8_1 *)(xq + r * xrow) + blk;
                    double sq = 0;
                    for (int j = 0; j < QK; j++) sq += xb->qs[j];
                    bd += fabs(fp16_to_f32(mh)) *
                          fabs(fp16_to_f32(xb->s) - (double)fp16_to_f32(xb->d) * sq);
                }
            }
            xbd[r * n + o] = bd; /* when x is quantised (dot path, quantised GEMM) */
            bound[r * n + o] = 1e-5 * (mg + (bias ? 1 : 0)) + 1e-30;
            mag[r * n + o] = 1e-5 * (mq + (bias ? 1 : 0)) + 1e-30;
        }
    }

    run_linear(ar, &x, &w, bp, yr, (size_t)(m * n));
    enum cpu_level top = cpu_level_detected();
    bool quant_g = linear_x_quantised(wt, m, CPU_GENERIC);
    /* variants: each level, and at AVX-512 with AMX first off, then on
     * (when the CPU and OS have it) */
    int nvar = (int)top + 1 + (top >= CPU_AVX512 && linear_amx_available());
    for (int v = 0; v < nvar; v++) {
        int l = v > (int)top ? (int)top : v;
        linear_qgemm_use_amx = v > (int)top;
        const char *vname = v > (int)top ? "avx512+amx" : cpu_level_name((enum cpu_level)l);
        cpu_set_level((enum cpu_level)l);
        /* x quantised at this level: its rounding is in the bound; against
         * generic too when only one of the two quantises x */
        bool quant = linear_x_quantised(wt, m, (enum cpu_level)l);
        run_linear(ac, &x, &w, bp, yc, (size_t)(m * n));
        if (l == CPU_GENERIC) memcpy(yg, yc, (size_t)(m * n) * sizeof *yg);
        double worst = 0, worst_g = 0;
        for (int64_t i = 0; i < m * n; i++) {
            double e = fabs((double)yc[i] - yr[i]) / (bound[i] + (quant ? xbd[i] : 0));
            double eg = fabs((double)yc[i] - yg[i]) / (mag[i] + (quant != quant_g ? 2 * xbd[i] : 0));
            if (!(e <= worst)) worst = e;
            if (!(eg <= worst_g)) worst_g = eg;
        }
        if (worst > worst_ratio[wt]) worst_ratio[wt] = worst;
        CHECK(worst <= 1.0, "linear %s [%lld,%lld]x[%lld,%lld]^T %s %s %s: cpu vs ref err/bound %.3f",
              dtype_name(wt), (long long)m, (long long)k, (long long)n, (long long)k,
              layout_name[lay], bias ? "bias" : "no-bias", vname, worst);
        CHECK(worst_g <= 1.0, "linear %s m=%lld k=%lld n=%lld %s %s: vs generic err/tol %.3f",
              dtype_name(wt), (long long)m, (long long)k, (long long)n, layout_name[lay],
              vname, worst_g);
    }
    linear_qgemm_use_amx = 1;
    cpu_set_level(CPU_AVX512);
cleanup:
    free(wf); free(wd); free(xc); free(xd); free(bb); free(wq); free(xq);
    free(yr); free(yg); free(yc); free(xbuf); free(bound); free(mag); free(xbd);
}

static void test_linear_hand(void)
{
    /* y = x @ w^T + b with x = [1, 2, 3], w = [[1, 0, 0], [0, 1, 1]], b = [0.5, -1] */
    float xv[3] = {1, 2, 3}, wv[6] = {1, 0, 0, 0, 1, 1}, bv[2] = {0.5f, -1};
    int64_t xne[1] = {3}, wne[2] = {2, 3}, bne[1] = {2};
    struct tensor x = tensor_make(TYPE_F32, 1, xne, xv, NULL);
    struct tensor w = tensor_make(TYPE_F32, 2, wne, wv, NULL);
    struct tensor b = tensor_make(TYPE_F32, 1, bne, bv, NULL);
    struct arena *as[2] = {ar, ac};
    for (int i = 0; i < 2; i++) {
        arena_reset(as[i]);
        struct tensor *y = op_linear(as[i], &x, &w, &b);
        CHECK(y && y->ndim == 1 && y->ne[0] == 2 && ((float *)y->data)[0] == 1.5f &&
              ((float *)y->data)[1] == 4.0f, "%s: hand linear [1.5, 4]",
              arena_backend(as[i])->name);
    }
    /* q8_0 weights holding integers (amax 127 -> d = 1) times integer x:
     * every step is exact, y = sum w x computed in integers here */
    float wq[64], xq[64];
    for (int i = 0; i < 64; i++) {
        wq[i] = (float)((i * 37) % 255 - 127);
        xq[i] = (float)((i * 11) % 21 - 10);
    }
    wq[0] = 127; wq[32] = -127; /* scale 1 in both blocks */
    xq[5] = 127; xq[40] = -127; /* and in x's blocks */
    struct block_q8_0 blk[2];
    quantize_row(TYPE_Q8_0, wq, blk, 64);
    long want = 0;
    for (int i = 0; i < 64; i++) want += (long)wq[i] * (long)xq[i];
    int64_t x2ne[1] = {64}, w2ne[2] = {1, 64};
    struct tensor x2 = tensor_make(TYPE_F32, 1, x2ne, xq, NULL);
    struct tensor w2 = tensor_make(TYPE_Q8_0, 2, w2ne, blk, NULL);
    for (int i = 0; i < 2; i++) {
        for (int l = CPU_GENERIC; l <= (int)cpu_level_detected(); l++) {
            cpu_set_level((enum cpu_level)l);
            arena_reset(as[i]);
            struct tensor *y = op_linear(as[i], &x2, &w2, NULL);
            CHECK(y && ((float *)y->data)[0] == (float)want, "%s %s: exact q8_0 dot %g want %ld",
                  arena_backend(as[i])->name, cpu_level_name((enum cpu_level)l),
                  y ? (double)((float *)y->data)[0] : 0.0, want);
        }
    }
    cpu_set_level(CPU_AVX512);
}

/* The quantised GEMM against the dot path on the same quantised x: the
 * integer block sums are the same, only the float sums differ in order
 * (and the -off sum(x) term is applied in integers instead of floats), so
 * the difference is bounded by 1e-5 sum |w^ x^|. */
static void test_qgemm_vs_dot(void)
{
    if (cpu_level() < CPU_AVX512) {
        printf("qgemm vs dot: level %s has no quantised GEMM, skipped\n", cpu_level_name(cpu_level()));
        return;
    }
    const enum dtype types[] = {TYPE_Q4_0, TYPE_Q8_0};
    const int64_t m = 37, k = 1056, n = 67;
    for (size_t t = 0; t < 2; t++) {
        enum dtype wt = types[t];
        size_t wrow = dtype_row_size(wt, k);
        float *wf = malloc((size_t)(n * k) * sizeof *wf), *xc = malloc((size_t)(m * k) * sizeof *xc);
        float *yd = malloc((size_t)(m * n) * sizeof *yd), *yq = malloc((size_t)(m * n) * sizeof *yq);
        char *wq = malloc(wrow * (size_t)n);
        if (!wf || !xc || !yd || !yq || !wq) {
            CHECK(0, "alloc");
            free(wf); free(xc); free(yd); free(yq); free(wq);
            return;
        }
        fill_uniform(wf, (size_t)(n * k), -1.0f, 1.0f, 77 + t);
        fill_uniform(xc, (size_t)(m * k), -3.0f, 3.0f, 78 + t);
        for (int64_t r = 0; r < n; r++) quantize_row(wt, wf + r * k, wq + r * wrow, k);
        int64_t wne[2] = {n, k}, xne[2] = {m, k};
        struct tensor w = tensor_make(wt, 2, wne, wq, NULL), x = tensor_make(TYPE_F32, 2, xne, xc, NULL);
        int saved_dot = linear_dot_max_rows, saved_qg = linear_qgemm_min_rows;
        linear_dot_max_rows = 1 << 30;
        linear_qgemm_min_rows = 1 << 30;
        run_linear(ac, &x, &w, NULL, yd, (size_t)(m * n));
        linear_qgemm_min_rows = 1;
        linear_qgemm_use_amx = 0;
        run_linear(ac, &x, &w, NULL, yq, (size_t)(m * n));
        if (linear_amx_available()) {
            /* the AMX tiles do the VNNI kernel's integer and float steps:
             * bit-identical (n = 67: four 16-row AMX tiles and a VNNI tail) */
            float *ya = malloc((size_t)(m * n) * sizeof *ya);
            if (ya) {
                linear_qgemm_use_amx = 1;
                run_linear(ac, &x, &w, NULL, ya, (size_t)(m * n));
                int64_t differ = 0;
                for (int64_t i = 0; i < m * n; i++) differ += memcmp(&ya[i], &yq[i], 4) != 0;
                printf("qgemm amx vs vnni %s: %lld of %lld outputs differ\n", dtype_name(wt),
                       (long long)differ, (long long)(m * n));
                CHECK(differ == 0, "qgemm amx vs vnni %s: %lld outputs differ", dtype_name(wt),
                      (long long)differ);
            } else {
                CHECK(0, "alloc");
            }
            free(ya);
        } else {
            printf("qgemm amx: not available (CPU, OS or CBX_AMX=0), skipped\n");
        }
        linear_qgemm_use_amx = 1;
        linear_dot_max_rows = saved_dot;
        linear_qgemm_min_rows = saved_qg;
        double max_abs = 0, max_rel = 0, ymax = 0;
        int64_t differ = 0;
        for (int64_t i = 0; i < m * n; i++) {
            double e = fabs((double)yq[i] - yd[i]);
            if (e > max_abs) max_abs = e;
            if (fabs(yd[i]) > ymax) ymax = fabs(yd[i]);
            if (yq[i] != yd[i]) differ++;
        }
        /* relative to the scale of the outputs (sum |w^ x^| ~ k * E|w x|) */
        max_rel = max_abs / (ymax + 1e-30);
        printf("qgemm vs dot %s [%lld,%lld]x[%lld,%lld]^T: %lld of %lld outputs differ, max abs %.3g, "
               "max abs / max |y| %.3g\n", dtype_name(wt), (long long)m, (long long)k, (long long)n,
               (long long)k, (long long)differ, (long long)(m * n), max_abs, max_rel);
        CHECK(max_rel <= 1e-5, "qgemm vs dot %s: max abs / max |y| %.3g > 1e-5", dtype_name(wt), max_rel);
        free(wf); free(xc); free(yd); free(yq); free(wq);
    }
}

/* The GEMM's x packing quantises bit for bit as quantize_row_q8_0_ref:
 * random rows plus rows of exact halves (roundf ties: amax 127 gives
 * d = 1), tiny values (fp16 subnormal d), zeros and a lone spike; the
 * records built here from quantize_row's blocks must equal the kernel's. */
static void test_qgemm_pack(void)
{
    struct linear_qgemm g;
    if (cpu_level_detected() < CPU_AVX512 || !linear_qgemm_avx512(TYPE_Q4_0, &g)) {
        printf("qgemm pack: no AVX-512 VNNI, skipped\n");
        return;
    }
    enum { LANES = LINEAR_QG_LANES, NB = 5, K = NB * QK };
    static float x[LANES][K];
    static struct block_q8_0 q[LANES][NB];
    static uint8_t got[NB * LINEAR_QG_REC], want[NB * LINEAR_QG_REC];
    fill_uniform(&x[0][0], (size_t)LANES * K, -3.0f, 3.0f, 4242);
    for (int i = 0; i < K; i++) {
        x[1][i] = (float)((i % 255) - 127) / 2.0f * 2.0f + ((i % 3) ? 0.5f : -0.5f); /* ties */
        x[2][i] = x[0][i] * 1e-7f;                                                   /* tiny d */
        x[3][i] = 0.0f;
        x[4][i] = (i == 77) ? 1000.0f : x[0][i] * 1e-3f;
    }
    for (int b = 0; b < NB; b++) x[1][b * QK] = 127.0f; /* d = 1 in every block of row 1 */
    for (int lanes = LANES; lanes >= 1; lanes -= 7) {
        const float *rows[LANES];
        for (int l = 0; l < lanes; l++) {
            rows[l] = x[l];
            quantize_row(TYPE_Q8_0, x[l], q[l], K);
        }
        memset(want, 0, sizeof want);
        for (int b = 0; b < NB; b++) {
            uint8_t *rec = want + b * LINEAR_QG_REC;
            for (int l = 0; l < lanes; l++) {
                int sum = 0;
                for (int i = 0; i < QK; i++) sum += q[l][b].qs[i];
                for (int gi = 0; gi < 8; gi++) memcpy(rec + 64 * gi + 4 * l, q[l][b].qs + 4 * gi, 4);
                float d = fp16_to_f32(q[l][b].d);
                int32_t c = -g.off * sum;
                memcpy(rec + 512 + 4 * l, &d, 4);
                memcpy(rec + 576 + 4 * l, &c, 4);
            }
        }
        memset(got, 0xa5, sizeof got);
        g.pack(rows, lanes, NB, g.off, got);
        int64_t bad = 0;
        for (size_t i = 0; i < sizeof got; i++) bad += got[i] != want[i];
        printf("qgemm pack, %2d lanes: %lld of %zu record bytes differ from quantize_row_q8_0_ref\n",
               lanes, (long long)bad, sizeof got);
        CHECK(bad == 0, "qgemm pack, %d lanes: %lld of %zu bytes differ from quantize_row_q8_0_ref",
              lanes, (long long)bad, sizeof got);
    }
}

static void test_linear_errors(void)
{
    float buf[64] = {0};
    int64_t xne[2] = {2, 32}, wne[2] = {3, 31}, w2ne[2] = {3, 32}, bne[1] = {4};
    struct tensor x = tensor_make(TYPE_F32, 2, xne, buf, NULL);
    struct tensor w = tensor_make(TYPE_F32, 2, wne, buf, NULL);
    arena_reset(ac);
    CHECK(!op_linear(ac, &x, &w, NULL) && arena_status(ac) != CBX_OK, "K mismatch fails: %s",
          arena_errmsg(ac));
    struct tensor wi = tensor_make(TYPE_I32, 2, w2ne, buf, NULL);
    arena_reset(ac);
    CHECK(!op_linear(ac, &x, &wi, NULL) && arena_status(ac) != CBX_OK, "I32 weight fails: %s",
          arena_errmsg(ac));
    struct tensor w2 = tensor_make(TYPE_F32, 2, w2ne, buf, NULL);
    struct tensor b = tensor_make(TYPE_F32, 1, bne, buf, NULL);
    arena_reset(ac);
    CHECK(!op_linear(ac, &x, &w2, &b) && arena_status(ac) != CBX_OK, "bias size fails: %s",
          arena_errmsg(ac));
    arena_reset(ac);
    CHECK(!op_linear(ac, NULL, &w2, NULL) && arena_status(ac) == CBX_OK, "NULL x -> NULL, no error");
    int64_t yne[2] = {31, 4};
    struct tensor y = tensor_make(TYPE_F32, 2, yne, buf, NULL);
    arena_reset(ac);
    CHECK(!op_matmul(ac, &x, &y) && arena_status(ac) != CBX_OK, "matmul K mismatch fails: %s",
          arena_errmsg(ac));
    int64_t x3[3] = {2, 2, 4}, y3[3] = {3, 4, 2};
    struct tensor xb = tensor_make(TYPE_F32, 3, x3, buf, NULL), yb = tensor_make(TYPE_F32, 3, y3, buf, NULL);
    arena_reset(ac);
    CHECK(!op_matmul(ac, &xb, &yb) && arena_status(ac) != CBX_OK, "matmul batch 2 vs 3 fails: %s",
          arena_errmsg(ac));
}

/* A view over fresh memory of an [.., r, c] operand with the given layout
 * of its last two dims: 0 row-major, 1 transposed, 2 neither dim unit. */
static struct tensor mat_view(int ndim, const int64_t *ne, int lay, float **buf, uint64_t seed)
{
    int64_t r = ne[ndim - 2], c = ne[ndim - 1], batch = 1;
    for (int d = 0; d < ndim - 2; d++) batch *= ne[d];
    size_t cap = (size_t)(batch * r * c) * 2 + 8;
    float *b = calloc(cap, sizeof *b);
    *buf = b;
    struct tensor t = tensor_make(TYPE_F32, ndim, ne, b, NULL);
    if (!b) return t;
    fill_uniform(b, cap, -1.0f, 1.0f, seed);
    int64_t es = lay == 2 ? 8 : 4; /* element stride */
    if (lay == 1) { t.nb[ndim - 2] = es; t.nb[ndim - 1] = es * r; }
    else { t.nb[ndim - 1] = es; t.nb[ndim - 2] = es * c; }
    int64_t s = r * c * es;
    for (int d = ndim - 3; d >= 0; d--) { t.nb[d] = s; s *= ne[d]; }
    return t;
}

static void test_matmul(void)
{
    struct { int nx, ny; int64_t xne[4], yne[4]; } cases[] = {
        {2, 2, {5, 33}, {33, 7}},
        {4, 3, {2, 3, 5, 33}, {3, 33, 7}},
        {3, 3, {4, 1, 65}, {4, 65, 1}},
        {3, 2, {3, 17, 9}, {9, 130}},
        {2, 4, {70, 64}, {2, 1, 64, 71}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int lx = 0; lx < 3; lx++) {
            for (int ly = 0; ly < 3; ly++) {
                float *bx = NULL, *by = NULL;
                struct tensor x = mat_view(cases[c].nx, cases[c].xne, lx, &bx, 100 + c);
                struct tensor y = mat_view(cases[c].ny, cases[c].yne, ly, &by, 200 + c);
                if (!bx || !by) { CHECK(0, "alloc"); free(bx); free(by); return; }
                arena_reset(ar);
                arena_reset(ac);
                struct tensor *zr = op_matmul(ar, &x, &y), *zc = op_matmul(ac, &x, &y);
                char what[96], s1[64], s2[64];
                snprintf(what, sizeof what, "matmul %s(%d) @ %s(%d)", tensor_shape_str(&x, s1, sizeof s1),
                         lx, tensor_shape_str(&y, s2, sizeof s2), ly);
                if (!zr || !zc || !tensor_same_shape(zr, zc)) {
                    CHECK(0, "%s failed: %s %s", what, arena_errmsg(ar), arena_errmsg(ac));
                } else {
                    check_close(what, zc->data, zr->data, (size_t)tensor_nelements(zr), 1e-5, 1e-5);
                }
                free(bx);
                free(by);
            }
        }
    }
    /* hand: [[1, 2], [3, 4]] @ [[5], [6]] = [[17], [39]] */
    float xv[4] = {1, 2, 3, 4}, yv[2] = {5, 6};
    int64_t xne[2] = {2, 2}, yne[2] = {2, 1};
    struct tensor x = tensor_make(TYPE_F32, 2, xne, xv, NULL), y = tensor_make(TYPE_F32, 2, yne, yv, NULL);
    struct arena *as[2] = {ar, ac};
    for (int i = 0; i < 2; i++) {
        arena_reset(as[i]);
        struct tensor *z = op_matmul(as[i], &x, &y);
        CHECK(z && ((float *)z->data)[0] == 17 && ((float *)z->data)[1] == 39, "%s: hand matmul",
              arena_backend(as[i])->name);
    }
}

/* op_linear_ex on the cpu stores the activation and the residual with
 * the product where its path can (the dot paths, packed or not, and the
 * AMX-BF16 GEMM) and runs the kernels after it elsewhere; either way each
 * element must be bit for bit op_linear, then op_unary, then op_add (the
 * op layer's own composition). Cases: every path (F32 and Q8_0 dot,
 * packed Q4_0 dot and row-exact, F32 GEMM, Q4_0 GEMM, BF16 GEMM), fused
 * ops (GELU, SiLU, GELU-tanh), one that is not (sin), a strided residual. */
static void test_linear_ex(void)
{
    struct arena *ab = arena_create(cpu, 0);
    if (!ab) {
        CHECK(0, "arena");
        return;
    }
    arena_set_bf16(ab, true);
    static const struct { enum dtype t; bool pack, row_exact, bf16, strided; int64_t m, k, n; int act; } cs[] = {
        {TYPE_F32, false, false, false, false, 1, 256, 77, UN_GELU_TANH},
        {TYPE_Q8_0, false, false, false, false, 3, 256, 77, UN_GELU},
        {TYPE_Q4_0, true, false, false, false, 2, 1024, 83, UN_SILU},
        {TYPE_Q4_0, true, true, false, false, 9, 1024, 64, UN_GELU},
        {TYPE_F32, false, false, false, false, 40, 256, 70, UN_SILU},
        {TYPE_Q4_0, false, false, false, false, 40, 256, 70, UN_GELU},
        {TYPE_Q4_0, true, false, true, false, 100, 256, 83, UN_GELU},
        {TYPE_F32, false, false, true, false, 100, 256, 70, -1},
        {TYPE_F32, false, false, false, false, 2, 256, 70, UN_SIN},
        {TYPE_Q4_0, true, false, false, true, 1, 1024, 48, UN_GELU},
    };
    int bad = 0, n_cases = 0;
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        if (cs[c].pack && cpu_level() < CPU_AVX512) continue;
        for (int with_res = 0; with_res < 2; with_res++)
            for (int with_act = 0; with_act < 2; with_act++) {
                const int64_t m = cs[c].m, k = cs[c].k, n = cs[c].n, wne[2] = {n, k}, xne[2] = {m, k};
                const int64_t rne[2] = {m, n}, rtne[2] = {n, m};
                const int act = with_act ? cs[c].act : -1;
                struct arena *a = cs[c].bf16 ? ab : ac;
                const size_t rs = dtype_row_size(cs[c].t, k);
                float *wf = malloc((size_t)(n * k) * sizeof *wf), *xv = malloc((size_t)(m * k) * sizeof *xv);
                float *bv = malloc((size_t)n * sizeof *bv), *rv = malloc((size_t)(m * n) * sizeof *rv);
                float *y1 = malloc((size_t)(m * n) * sizeof *y1);
                char *w0 = aligned_alloc(64, (rs * (size_t)n + 63) & ~(size_t)63);
                if (!wf || !xv || !bv || !rv || !y1 || !w0) {
                    CHECK(0, "out of memory");
                    free(wf), free(xv), free(bv), free(rv), free(y1), free(w0);
                    continue;
                }
                fill_uniform(wf, (size_t)(n * k), -1, 1, 40 + c);
                fill_uniform(xv, (size_t)(m * k), -2, 2, 60 + c);
                fill_uniform(bv, (size_t)n, -1, 1, 80 + c);
                fill_uniform(rv, (size_t)(m * n), -1, 1, 90 + c);
                if (cs[c].t == TYPE_F32) memcpy(w0, wf, (size_t)(n * k) * sizeof *wf);
                else
                    for (int64_t r = 0; r < n; r++) quantize_row(cs[c].t, wf + r * k, w0 + (size_t)r * rs, k);
                struct tensor w = tensor_make(cs[c].t, 2, wne, w0, NULL);
                if (cs[c].pack && !linear_pack(NULL, &w, w0, &w)) {
                    CHECK(0, "linear_pack");
                    free(wf), free(xv), free(bv), free(rv), free(y1), free(w0);
                    continue;
                }
                struct tensor x = tensor_make(TYPE_F32, 2, xne, xv, NULL);
                const int64_t bne[1] = {n};
                struct tensor b = tensor_make(TYPE_F32, 1, bne, bv, NULL);
                struct tensor rt = tensor_make(TYPE_F32, 2, cs[c].strided ? rtne : rne, rv, NULL);
                arena_set_row_exact(a, cs[c].row_exact);
                arena_reset(a);
                const struct tensor *r = NULL;
                if (with_res) r = cs[c].strided ? op_transpose(a, &rt, 0, 1) : &rt;
                struct tensor *y = op_linear(a, &x, &w, &b);
                if (act >= 0) y = op_unary(a, y, (enum unop)act, 0, 0);
                if (r) y = op_add(a, r, y);
                bool ok = y != NULL;
                if (ok) memcpy(y1, y->data, (size_t)(m * n) * sizeof *y1);
                struct tensor *e = op_linear_ex(a, &x, &w, &b, act, r);
                ok = ok && e && !memcmp(e->data, y1, (size_t)(m * n) * sizeof *y1);
                arena_set_row_exact(a, false);
                n_cases++;
                if (!ok) {
                    bad++;
                    CHECK(0, "op_linear_ex %s%s [%lld x %lld, %lld] act %d%s: differs from linear, unary, add (%s)",
                          dtype_name(cs[c].t), cs[c].pack ? " packed" : "", (long long)m, (long long)k,
                          (long long)n, act, r ? " + residual" : "", arena_errmsg(a));
                }
                free(wf), free(xv), free(bv), free(rv), free(y1), free(w0);
            }
    }
    printf("op_linear_ex: %d of %d cases differ from op_linear + op_unary + op_add\n", bad, n_cases);
    arena_free(ab);
}

/* op_linear_cat on the cpu against its definition: the norm op, then
 * op_linear_ex per weight and op_concat, byte for byte. Cases: the packed
 * decode GEMV (one dispatch over every weight: Llama's q, k, v after an
 * RMS norm, gate and up with SiLU, GPT-2's c_attn and c_fc after a layer
 * norm, a row-exact batch of 9) and the per-weight fallback (F32, a BF16
 * batch of 100 rows, an activation the store cannot apply). */
static void test_linear_cat(void)
{
    struct arena *ab = arena_create(cpu, 0);
    if (!ab) {
        CHECK(0, "arena");
        return;
    }
    arena_set_bf16(ab, true);
    static const struct {
        enum dtype t; bool pack, row_exact, bf16; int nw; int64_t m, k; int64_t n[3]; int act; int norm;
    } cs[] = {
        {TYPE_Q4_0, true, false, false, 3, 2, 1024, {1024, 256, 256}, -1, LINEAR_NORM_RMS},
        {TYPE_Q4_0, true, false, false, 2, 1, 1024, {2048, 2048, 0}, UN_SILU, LINEAR_NORM_RMS},
        {TYPE_Q8_0, true, false, false, 1, 1, 1024, {3072, 0, 0}, -1, LINEAR_NORM_LAYER},
        {TYPE_Q4_0, true, false, false, 1, 2, 1024, {4096, 0, 0}, UN_GELU_TANH, LINEAR_NORM_LAYER},
        {TYPE_Q4_0, true, true, false, 3, 9, 1024, {1024, 1024, 40}, -1, -1},
        {TYPE_Q4_0, true, false, false, 2, 1, 1024, {64, 83, 0}, UN_SIN, LINEAR_NORM_RMS},
        {TYPE_F32, false, false, false, 3, 2, 256, {77, 64, 64}, UN_GELU, LINEAR_NORM_LAYER},
        {TYPE_Q4_0, true, false, true, 2, 100, 256, {96, 83, 0}, UN_SILU, LINEAR_NORM_RMS},
    };
    int bad = 0, n_cases = 0;
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        if (cs[c].pack && cpu_level() < CPU_AVX512) continue;
        const int64_t m = cs[c].m, k = cs[c].k, xne[2] = {m, k}, kne[1] = {k};
        const size_t rs = dtype_row_size(cs[c].t, k);
        int64_t ntot = 0;
        for (int i = 0; i < cs[c].nw; i++) ntot += cs[c].n[i];
        float *xv = malloc((size_t)(m * k) * sizeof *xv), *gv = malloc((size_t)(2 * k) * sizeof *gv);
        float *y1 = malloc((size_t)(m * ntot) * sizeof *y1), *wf = malloc((size_t)(4096 * k) * sizeof *wf);
        float *bv = malloc((size_t)ntot * sizeof *bv);
        char *wd[3] = {NULL, NULL, NULL};
        struct tensor wt[3], bt[3];
        const struct tensor *wp[3], *bp[3];
        int acts[3];
        bool ok = xv && gv && y1 && wf && bv;
        fill_uniform(xv, (size_t)(m * k), -2, 2, 300 + c);
        fill_uniform(gv, (size_t)(2 * k), 0.5f, 1.5f, 310 + c);
        fill_uniform(bv, (size_t)ntot, -1, 1, 320 + c);
        for (int i = 0; ok && i < cs[c].nw; i++) {
            const int64_t n = cs[c].n[i], wne[2] = {n, k}, bne[1] = {n};
            fill_uniform(wf, (size_t)(n * k), -1, 1, 330 + 10 * c + (uint64_t)i);
            if (!(wd[i] = aligned_alloc(64, (rs * (size_t)n + 63) & ~(size_t)63))) {
                ok = false;
                break;
            }
            if (cs[c].t == TYPE_F32) memcpy(wd[i], wf, (size_t)(n * k) * sizeof *wf);
            else
                for (int64_t r = 0; r < n; r++) quantize_row(cs[c].t, wf + r * k, wd[i] + (size_t)r * rs, k);
            wt[i] = tensor_make(cs[c].t, 2, wne, wd[i], NULL);
            if (cs[c].pack && !linear_pack(NULL, &wt[i], wd[i], &wt[i])) ok = false;
            bt[i] = tensor_make(TYPE_F32, 1, bne, bv, NULL);
            wp[i] = &wt[i];
            bp[i] = i == 1 ? NULL : &bt[i];
            acts[i] = i == 2 ? -1 : cs[c].act;
        }
        if (!ok) {
            CHECK(0, "linear_cat case %zu set-up", c);
        } else {
            struct tensor x = tensor_make(TYPE_F32, 2, xne, xv, NULL);
            struct tensor g = tensor_make(TYPE_F32, 1, kne, gv, NULL), bb = tensor_make(TYPE_F32, 1, kne, gv + k, NULL);
            const struct linear_norm nm = {(enum linear_norm_kind)(cs[c].norm < 0 ? 0 : cs[c].norm), &g,
                                           cs[c].norm == LINEAR_NORM_LAYER ? &bb : NULL, 1e-5f};
            struct arena *a = cs[c].bf16 ? ab : ac;
            arena_set_row_exact(a, cs[c].row_exact);
            arena_reset(a);
            const struct tensor *h = &x;
            if (cs[c].norm == LINEAR_NORM_LAYER) h = op_layer_norm(a, &x, &g, &bb, 1e-5f);
            else if (cs[c].norm == LINEAR_NORM_RMS) h = op_rms_norm(a, &x, &g, 1e-5f);
            struct tensor *y = NULL;
            for (int i = 0; h && i < cs[c].nw; i++) {
                struct tensor *p = op_linear_ex(a, h, wp[i], bp[i], acts[i], NULL);
                y = i == 0 ? p : op_concat(a, y, p, 1);
            }
            ok = y && arena_status(a) == CBX_OK;
            if (ok) memcpy(y1, y->data, (size_t)(m * ntot) * sizeof *y1);
            struct tensor *e = op_linear_cat(a, &x, cs[c].norm < 0 ? NULL : &nm, cs[c].nw, wp, bp, acts);
            ok = ok && e && arena_status(a) == CBX_OK && e->ne[1] == ntot &&
                 !memcmp(e->data, y1, (size_t)(m * ntot) * sizeof *y1);
            arena_set_row_exact(a, false);
            n_cases++;
            if (!ok) {
                bad++;
                CHECK(0, "op_linear_cat case %zu (%s%s, %d weights, %lld rows): differs from norm, linear_ex, concat "
                      "(%s)", c, dtype_name(cs[c].t), cs[c].pack ? " packed" : "", cs[c].nw, (long long)m,
                      arena_errmsg(a));
            }
        }
        for (int i = 0; i < 3; i++) free(wd[i]);
        free(xv), free(gv), free(y1), free(wf), free(bv);
    }
    printf("op_linear_cat: %d of %d cases differ from the norm, op_linear_ex per weight and op_concat\n", bad,
           n_cases);
    arena_free(ab);
}

int main(void)
{
    cpu = backend_cpu_create(2);
    ac = cpu ? arena_create(cpu, 0) : NULL;
    ar = arena_create(backend_ref(), 0);
    if (!cpu || !ac || !ar) {
        CHECK(0, "backend/arena creation");
        return test_summary();
    }
    printf("cpu level detected: %s (CBX_CPU=%s)\n", cpu_level_name(cpu_level_detected()),
           getenv("CBX_CPU") ? getenv("CBX_CPU") : "unset");
    test_linear_hand();
    test_linear_errors();
    test_qgemm_pack();
    test_qgemm_vs_dot();
    test_linear_ex();
    test_linear_cat();
    const enum dtype types[] = {TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_Q8_0,
                                TYPE_Q4_0, TYPE_Q4_1, TYPE_Q5_0, TYPE_Q5_1};
    struct { int64_t m, k, n; } shapes[] = {
        {1, 1056, 67}, {1, 32, 1}, {3, 96, 131}, {1, 4096, 33}, {6, 1056, 67}, {37, 160, 45},
        {20, 1056, 67}, {17, 1056, 67}, {48, 64, 8}, {160, 4096, 20},
    };
    uint64_t seed = 1000;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int lay = 0; lay < L_COUNT; lay++)
                for (int bias = 0; bias < 2; bias++)
                    linear_case(types[t], shapes[s].m, shapes[s].k, shapes[s].n,
                                (enum layout)lay, bias, seed++);
        printf("linear %-5s all shapes/layouts/levels: worst cpu-vs-ref err/bound %.3f\n",
               dtype_name(types[t]), worst_ratio[types[t]]);
    }
    test_matmul();
    arena_free(ac);
    arena_free(ar);
    backend_cpu_free(cpu);
    return test_summary();
}
