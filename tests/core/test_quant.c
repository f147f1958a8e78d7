/* test_quant.c - block formats, half/bfloat16 conversion and the row dot
 * kernels (src/core/quant.c, src/core/cpu/linear_*.c).
 *
 * 1. fp16/bf16: exact IEEE values (normals, subnormals, overflow, inf,
 *    nan, ties to even), worked out by hand from the formats.
 * 2. Hand-computed blocks: inputs whose ggml quantisation is exact on
 *    paper, checked byte by byte (layout, scale, nibble order, qh bits).
 * 3. Round trip on random data, per element against the bound of each
 *    format (d, m the block's fp16 scale/min as stored, d* the exact one):
 *      q8_0, q8_1   |err| <= |d*| / 2 + 127 |d* - d|
 *      q4_0 (q5_0)  |err| <= |d*| / 2 + 8 (16) |d* - d|, except the one value
 *                   opposite to the block maximum, clamped to q = 15 (31),
 *                   where the rounding part grows to |d*|
 *      q4_1 (q5_1)  |err| <= d* / 2 + 15 (31) |d* - d| + |m* - m|
 *      f16 / bf16   relative 2^-11 / 2^-8 (round to nearest)
 *    with 1e-6 relative slack for the float products.
 * 4. Dot kernels (generic and every SIMD level this CPU has) against the
 *    double-precision dot of the dequantised operands: the integer block
 *    sums are exact, so only float accumulation differs (rel 1e-5 of
 *    sum |w x|). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu/linear_kernels.h"
#include "core/cpu_features.h"
#include "core/quant.h"
#include "testutil.h"

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static void test_half(void)
{
    /* f32 -> fp16 */
    struct { float f; uint16_t h; const char *what; } to16[] = {
        {0.0f, 0x0000, "+0"},
        {-0.0f, 0x8000, "-0"},
        {1.0f, 0x3c00, "1"},
        {-2.0f, 0xc000, "-2"},
        {65504.0f, 0x7bff, "max normal"},
        {65519.99f, 0x7bff, "just below overflow rounds down"},
        {65520.0f, 0x7c00, "tie at max rounds to even = inf"},
        {1e10f, 0x7c00, "overflow -> inf"},
        {0x1p-14f, 0x0400, "min normal"},
        {0x1p-24f, 0x0001, "min subnormal"},
        {0x1p-25f, 0x0000, "half of min subnormal ties to even 0"},
        {0x1.8p-25f, 0x0001, "0.75 of min subnormal rounds up"},
        {0x3p-24f, 0x0003, "subnormal 3 * 2^-24"},
        {0x1.ff8p-15f, 0x03ff, "max subnormal"},
        {0x1.ffcp-15f, 0x0400, "tie between max subnormal and min normal to even"},
        {1.0f + 0x1p-11f, 0x3c00, "tie 1 + 2^-11 to even (down)"},
        {1.0f + 0x3p-11f, 0x3c02, "tie 1 + 3 * 2^-11 to even (up)"},
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01, "above tie rounds up"},
        {INFINITY, 0x7c00, "+inf"},
        {-INFINITY, 0xfc00, "-inf"},
    };
    for (size_t i = 0; i < sizeof to16 / sizeof to16[0]; i++) {
        uint16_t h = f32_to_fp16(to16[i].f);
        CHECK(h == to16[i].h, "f32_to_fp16(%a) %s = 0x%04x want 0x%04x", (double)to16[i].f,
              to16[i].what, h, to16[i].h);
    }
    uint16_t hn = f32_to_fp16(NAN);
    CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff), "f32_to_fp16(nan) is nan (0x%04x)", hn);
    /* fp16 -> f32 */
    struct { uint16_t h; float f; } from16[] = {
        {0x0001, 0x1p-24f}, {0x03ff, 0x1.ff8p-15f}, {0x0400, 0x1p-14f}, {0x3555, 0x1.554p-2f},
        {0x7bff, 65504.0f}, {0xfbff, -65504.0f}, {0x8001, -0x1p-24f}, {0x7c00, INFINITY},
        {0xfc00, -INFINITY}, {0x8000, -0.0f},
    };
    for (size_t i = 0; i < sizeof from16 / sizeof from16[0]; i++) {
        float f = fp16_to_f32(from16[i].h);
        CHECK(fbits(f) == fbits(from16[i].f), "fp16_to_f32(0x%04x) = %a want %a", from16[i].h,
              (double)f, (double)from16[i].f);
    }
    CHECK(isnan(fp16_to_f32(0x7e00)), "fp16_to_f32(0x7e00) is nan");
    /* every finite half survives the round trip */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++)
        if ((h & 0x7c00) != 0x7c00 && f32_to_fp16(fp16_to_f32((uint16_t)h)) != h) bad++;
    CHECK(bad == 0, "fp16 -> f32 -> fp16 identity on all finite halves (%d differ)", bad);

    /* bfloat16: the top 16 bits, rounded to nearest even */
    struct { float f; uint16_t h; const char *what; } tob[] = {
        {1.0f, 0x3f80, "1"},
        {-1.0f, 0xbf80, "-1"},
        {1.0f + 0x1p-8f, 0x3f80, "tie 1 + 2^-8 to even (down)"},
        {1.0f + 0x3p-8f, 0x3f82, "tie 1 + 3 * 2^-8 to even (up)"},
        {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81, "above tie rounds up"},
        {bitsf(0x00010000u), 0x0001, "subnormal kept"},
        {bitsf(0x00008000u), 0x0000, "subnormal tie to even 0"},
        {bitsf(0x7f7fffffu), 0x7f80, "max float rounds to inf"},
        {INFINITY, 0x7f80, "+inf"},
        {-INFINITY, 0xff80, "-inf"},
    };
    for (size_t i = 0; i < sizeof tob / sizeof tob[0]; i++) {
        uint16_t h = f32_to_bf16(tob[i].f);
        CHECK(h == tob[i].h, "f32_to_bf16(%a) %s = 0x%04x want 0x%04x", (double)tob[i].f,
              tob[i].what, h, tob[i].h);
    }
    uint16_t bn = f32_to_bf16(bitsf(0x7f800001u)); /* nan whose payload is in the low bits */
    CHECK((bn & 0x7f80) == 0x7f80 && (bn & 0x7f), "f32_to_bf16(nan 0x7f800001) stays nan (0x%04x)", bn);
    CHECK(fbits(bf16_to_f32(0x0001)) == 0x00010000u, "bf16_to_f32(0x0001) = 2^-133");
    CHECK(bf16_to_f32(0x4049) == 3.140625f, "bf16_to_f32(0x4049) = 3.140625");
}

/* Blocks whose ggml quantisation can be worked out on paper. */
static void test_hand_blocks(void)
{
    float x[QK];
    /* x = j - 16: max |x| at j = 0 (x = -16). q4_0: d = -16 / -8 = 2,
     * q = trunc(x / 2 + 8.5): 0 at x = -16, 8 at x = 0, 16 -> 15 at x = 15. */
    for (int j = 0; j < QK; j++) x[j] = (float)(j - 16);
    struct block_q4_0 b4;
    quantize_row(TYPE_Q4_0, x, &b4, QK);
    const uint8_t *p = (const uint8_t *)&b4;
    CHECK(p[0] == 0x00 && p[1] == 0x40, "q4_0 d bytes = fp16(2.0) little endian (%02x %02x)", p[0], p[1]);
    /* qs[j] = q[j] | q[j+16] << 4; q[j] = trunc((j-16)/2 + 8.5), q[j+16] = trunc(j/2 + 8.5) */
    int ok = 1;
    for (int j = 0; j < 16; j++) {
        int q0 = (int)((j - 16) / 2.0 + 8.5), q1 = (int)(j / 2.0 + 8.5);
        if (q1 > 15) q1 = 15;
        if (p[2 + j] != (q0 | q1 << 4)) ok = 0;
    }
    CHECK(ok && p[2] == 0x80 && p[17] == 0xf8, "q4_0 nibbles: low = element j, high = j + 16");
    float y[QK];
    dequantize_row(TYPE_Q4_0, &b4, y, QK);
    CHECK(y[0] == -16.0f && y[16] == 0.0f && y[31] == 14.0f, "q4_0 dequant -16, 0, 14 (clamped 15)");

    /* q5_0 of the same: d = -16 / -16 = 1, q = trunc(x + 16.5) = j. */
    struct block_q5_0 b5;
    quantize_row(TYPE_Q5_0, x, &b5, QK);
    p = (const uint8_t *)&b5;
    ok = p[0] == 0x00 && p[1] == 0x3c;
    ok &= p[2] == 0x00 && p[3] == 0x00 && p[4] == 0xff && p[5] == 0xff; /* bit 4 of q[j] at bit j */
    for (int j = 0; j < 16; j++) ok &= p[6 + j] == (uint8_t)(j | j << 4);
    CHECK(ok, "q5_0 bytes: d = fp16(1), qh = 0xffff0000, qs[j] = j | j << 4");
    dequantize_row(TYPE_Q5_0, &b5, y, QK);
    ok = 1;
    for (int j = 0; j < QK; j++) ok &= y[j] == x[j];
    CHECK(ok, "q5_0 dequant exact for integers -16..15");

    /* x = j: q4_1 d = 31/15, m = 0; q5_1 d = 1, m = 0, q = j. */
    for (int j = 0; j < QK; j++) x[j] = (float)j;
    struct block_q5_1 b51;
    quantize_row(TYPE_Q5_1, x, &b51, QK);
    p = (const uint8_t *)&b51;
    ok = p[0] == 0x00 && p[1] == 0x3c && p[2] == 0 && p[3] == 0;
    ok &= p[4] == 0x00 && p[5] == 0x00 && p[6] == 0xff && p[7] == 0xff;
    for (int j = 0; j < 16; j++) ok &= p[8 + j] == (uint8_t)(j | j << 4);
    CHECK(ok, "q5_1 bytes: d = fp16(1), m = 0, qh = 0xffff0000, qs[j] = j | j << 4");
    struct block_q4_1 b41;
    quantize_row(TYPE_Q4_1, x, &b41, QK);
    CHECK(b41.d == f32_to_fp16(31.0f / 15.0f) && b41.m == 0 && (b41.qs[0] & 0xf) == 0 &&
          (b41.qs[15] >> 4) == 15, "q4_1: d = fp16(31/15), m = 0, q[0] = 0, q[31] = 15");

    /* q8_0 / q8_1: amax 127 -> d = 1, q = x for integers */
    for (int j = 0; j < QK; j++) x[j] = (float)(3 * j - 50);
    x[0] = -127.0f;
    struct block_q8_0 b8;
    quantize_row(TYPE_Q8_0, x, &b8, QK);
    ok = b8.d == 0x3c00;
    for (int j = 0; j < QK; j++) ok &= b8.qs[j] == (int8_t)x[j];
    CHECK(ok, "q8_0: d = 1, qs = x for integers");
    struct block_q8_1 b81;
    quantize_row(TYPE_Q8_1, x, &b81, QK);
    int sum = 0;
    for (int j = 0; j < QK; j++) sum += (int)x[j];
    CHECK(b81.d == 0x3c00 && b81.s == f32_to_fp16((float)sum), "q8_1: s = fp16(d * sum q) = %d", sum);

    /* zero block: d = 0, everything dequantises to 0 */
    memset(x, 0, sizeof x);
    quantize_row(TYPE_Q4_0, x, &b4, QK);
    dequantize_row(TYPE_Q4_0, &b4, y, QK);
    ok = fp16_to_f32(b4.d) == 0.0f; /* d = 0 / -8 = -0, as ggml */
    for (int j = 0; j < QK; j++) ok &= y[j] == 0.0f;
    CHECK(ok, "q4_0 zero block");

    CHECK(quantize_row(TYPE_Q4_0, x, &b4, 31) == 0, "quantize_row refuses n not a multiple of 32");
    CHECK(quantize_row(TYPE_Q8_0, x, &b8, QK) == 34, "quantize_row returns bytes written");
}

/* Random rows with varied blocks: plain, all-negative, outliers, zero. */
static void random_row(float *x, int64_t n, uint64_t seed)
{
    fill_uniform(x, (size_t)n, -1.0f, 1.0f, seed);
    for (int64_t b = 0; b < n / QK; b++) {
        float *v = x + b * QK;
        switch (b % 5) {
        case 1: for (int j = 0; j < QK; j++) v[j] = -fabsf(v[j]) * 3.0f; break;
        case 2: v[b % QK] = 40.0f; break;
        case 3: for (int j = 0; j < QK; j++) v[j] *= 1e-3f; break;
        case 4: if (b % 10 == 4) memset(v, 0, QK * sizeof *v); break;
        }
    }
}

static void test_roundtrip(void)
{
    enum { N = 32 * 200 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    void *q = malloc(dtype_row_size(TYPE_F32, N));
    if (!x || !y || !q) { CHECK(0, "alloc"); goto cleanup; }
    random_row(x, N, 1);
    const enum dtype types[] = {TYPE_Q8_0, TYPE_Q8_1, TYPE_Q4_0, TYPE_Q4_1, TYPE_Q5_0, TYPE_Q5_1};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        enum dtype ty = types[t];
        size_t bytes = quantize_row(ty, x, q, N);
        dequantize_row(ty, q, y, N);
        const uint8_t *blk = q;
        const size_t bsz = dtype_traits(ty)->size;
        double worst = 0; /* max err / bound */
        int fails = 0;
        for (int b = 0; b < N / QK; b++, blk += bsz) {
            const float *v = x + b * QK;
            double mn = v[0], mx = v[0], smax = 0, amax = 0;
            for (int j = 0; j < QK; j++) {
                if (v[j] < mn) mn = v[j];
                if (v[j] > mx) mx = v[j];
                if (fabs(v[j]) > amax) { amax = fabs(v[j]); smax = v[j]; }
            }
            uint16_t dh, mh = 0;
            memcpy(&dh, blk, 2);
            if (ty == TYPE_Q4_1 || ty == TYPE_Q5_1) memcpy(&mh, blk + 2, 2);
            double d = fp16_to_f32(dh), m = fp16_to_f32(mh), dx, lev;
            bool minmax = ty == TYPE_Q4_1 || ty == TYPE_Q5_1;
            if (ty == TYPE_Q8_0 || ty == TYPE_Q8_1) { dx = amax / 127; lev = 127; }
            else if (ty == TYPE_Q4_0) { dx = smax / -8; lev = 8; }
            else if (ty == TYPE_Q5_0) { dx = smax / -16; lev = 16; }
            else if (ty == TYPE_Q4_1) { dx = (mx - mn) / 15; lev = 15; }
            else { dx = (mx - mn) / 31; lev = 31; }
            for (int j = 0; j < QK; j++) {
                double r = 0.5;
                if (!minmax && lev < 127 && dx != 0 && v[j] / dx >= lev - 0.5) r = 1.0; /* clamp */
                double bound = r * fabs(dx) + lev * fabs(dx - d) + (minmax ? fabs(mn - m) : 0) +
                               1e-6 * (amax + fabs(mn)) + 1e-30;
                double err = fabs((double)y[b * QK + j] - v[j]);
                if (err > bound) fails++;
                if (err / bound > worst) worst = err / bound;
            }
        }
        printf("roundtrip %-5s bytes=%zu max err/bound = %.3f\n", dtype_name(ty), bytes, worst);
        CHECK(bytes == dtype_row_size(ty, N) && fails == 0,
              "%s round trip within the per-element bound (%d elements over, worst %.3f)",
              dtype_name(ty), fails, worst);
    }
    /* half types: relative rounding bound */
    const enum dtype ht[] = {TYPE_F16, TYPE_BF16};
    const double rel[] = {0x1p-11, 0x1p-8};
    for (int t = 0; t < 2; t++) {
        quantize_row(ht[t], x, q, N);
        dequantize_row(ht[t], q, y, N);
        double worst = 0;
        for (int i = 0; i < N; i++) {
            double lim = fabs(x[i]) * rel[t];
            if (ht[t] == TYPE_F16 && fabs(x[i]) < 0x1p-14) lim = 0x1p-25; /* subnormal spacing/2 */
            double e = fabs((double)y[i] - x[i]);
            if (e / (lim + 1e-38) > worst) worst = e / (lim + 1e-38);
        }
        printf("roundtrip %-5s max err/bound = %.3f\n", dtype_name(ht[t]), worst);
        CHECK(worst <= 1.0, "%s round trip relative error <= %g", dtype_name(ht[t]), rel[t]);
    }
cleanup:
    free(x);
    free(y);
    free(q);
}

/* Dot kernels of every level against the double dot of dequantised data. */
static void test_dots(void)
{
    const enum dtype types[] = {TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_Q8_0,
                                TYPE_Q4_0, TYPE_Q4_1, TYPE_Q5_0, TYPE_Q5_1};
    const int64_t sizes[] = {32, 96, 1056, 4096, 33 * 32 * 3};
    const int64_t fsizes[] = {1, 7, 33, 100, 1029}; /* float rows: any length */
    enum { NMAX = 4096 };
    float *w = malloc(NMAX * sizeof *w), *x = malloc(NMAX * sizeof *x);
    float *wd = malloc(NMAX * sizeof *wd), *xd = malloc(NMAX * sizeof *xd);
    void *wq = malloc(NMAX * 4), *xq = malloc(NMAX * 4 + 64);
    if (!w || !x || !wd || !xd || !wq || !xq) { CHECK(0, "alloc"); goto cleanup; }
    enum cpu_level top = cpu_level_detected();
    printf("cpu level detected: %s\n", cpu_level_name(top));
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        enum dtype ty = types[t];
        int vt = quant_vec_dot_type(ty);
        bool blocks = dtype_traits(ty)->quantized;
        for (int s = 0; s < 5; s++) {
            int64_t n = blocks ? sizes[s] : fsizes[s];
            if (n > NMAX) n = NMAX;
            random_row(w, n, 10 + s);
            fill_uniform(x, (size_t)n, -2.0f, 2.0f, 20 + s);
            quantize_row(ty, w, wq, n);
            dequantize_row(ty, wq, wd, n);
            quantize_row((enum dtype)vt, x, xq, n);
            dequantize_row((enum dtype)vt, xq, xd, n);
            double want = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                want += (double)wd[i] * xd[i];
                mag += fabs((double)wd[i] * xd[i]);
            }
            if (vt == TYPE_Q8_1) { /* the min term uses s = fp16(d * sum q) */
                const uint8_t *wb = wq;
                const struct block_q8_1 *xb = xq;
                for (int64_t b = 0; b < n / QK; b++) {
                    uint16_t mh;
                    memcpy(&mh, wb + b * dtype_traits(ty)->size + 2, 2);
                    double sq = 0;
                    for (int j = 0; j < QK; j++) sq += xb[b].qs[j];
                    want += fp16_to_f32(mh) * (fp16_to_f32(xb[b].s) - fp16_to_f32(xb[b].d) * sq);
                }
            }
            for (int l = CPU_GENERIC; l <= (int)top; l++) {
                vec_dot_fn f = l == CPU_GENERIC ? quant_vec_dot_generic(ty)
                                                : linear_dot_kernel(ty, (enum cpu_level)l);
                float got = f(wq, xq, n);
                double err = fabs(got - want), tol = 1e-5 * mag + 1e-30;
                CHECK(err <= tol, "dot %s n=%lld %s: got %.9g want %.9g err %.2e tol %.2e",
                      dtype_name(ty), (long long)n, cpu_level_name((enum cpu_level)l),
                      (double)got, want, err, tol);
                if (s == 2)
                    printf("dot %-5s n=%-5lld %-7s err=%.2e (tol %.2e)\n", dtype_name(ty),
                           (long long)n, cpu_level_name((enum cpu_level)l), err, tol);
            }
            /* the AVX-512 kernels on prepared x (cpu/linear.c uses them) */
            linear_dotx_fn fx = top >= CPU_AVX512 ? linear_dotx_avx512(ty) : NULL;
            if (fx) {
                struct linear_xq p = {.q = xq};
                int8_t *qs = malloc((size_t)n);
                float *d = malloc((size_t)(2 * (n / QK)) * sizeof *d);
                if (qs && d) {
                    linear_xq_prepare(&p, qs, d, d + n / QK, n);
                    float got = fx(wq, &p, n);
                    double err = fabs(got - want), tol = 1e-5 * mag + 1e-30;
                    CHECK(err <= tol, "dotx %s n=%lld avx512: got %.9g want %.9g err %.2e tol %.2e",
                          dtype_name(ty), (long long)n, (double)got, want, err, tol);
                    if (s == 2)
                        printf("dot %-5s n=%-5lld dotx    err=%.2e (tol %.2e)\n", dtype_name(ty),
                               (long long)n, err, tol);
                }
                free(qs);
                free(d);
            }
            /* vec_dot_f32: x quantised inside, so it matches the same sum */
            if (blocks) {
                float got = vec_dot_f32(ty, wq, x, n);
                CHECK(fabs(got - want) <= 1e-5 * mag + 1e-30, "vec_dot_f32 %s n=%lld err %.2e",
                      dtype_name(ty), (long long)n, fabs(got - want));
            }
        }
    }
cleanup:
    free(w); free(x); free(wd); free(xd); free(wq); free(xq);
}

static void test_cpu_features(void)
{
    const struct cpu_features *f = cpu_features();
    printf("cpu: avx2=%d fma=%d f16c=%d avx512f=%d bw=%d vl=%d vnni=%d avx_vnni=%d -> %s\n",
           f->avx2, f->fma, f->f16c, f->avx512f, f->avx512bw, f->avx512vl, f->avx512_vnni,
           f->avx_vnni, cpu_level_name(cpu_level_detected()));
    /* the level follows the flags; forcing lower works, higher is capped */
    CHECK(cpu_level_detected() != CPU_AVX512 || (f->avx512bw && f->avx512vl && f->avx512_vnni),
          "avx512 level implies bw, vl, vnni");
    CHECK(cpu_level_detected() == CPU_GENERIC || (f->avx2 && f->fma && f->f16c),
          "avx2 level implies avx2, fma, f16c");
    CHECK(cpu_set_level(CPU_GENERIC) == CPU_GENERIC, "cpu_set_level(generic)");
    enum cpu_level l = cpu_set_level(CPU_AVX512);
    CHECK(l <= cpu_level_detected(), "cpu_set_level(avx512) never exceeds the detected level");
    const char *env = getenv("CBX_CPU");
    if (!env) CHECK(l == cpu_level_detected(), "no CBX_CPU: level = detected");
    else if (strcmp(env, "generic") == 0) CHECK(l == CPU_GENERIC, "CBX_CPU=generic caps the level");
    else if (strcmp(env, "avx2") == 0) CHECK(l <= CPU_AVX2, "CBX_CPU=avx2 caps the level");
}

int main(void)
{
    test_half();
    test_hand_blocks();
    test_roundtrip();
    test_dots();
    test_cpu_features();
    return test_summary();
}
