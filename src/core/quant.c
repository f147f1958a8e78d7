/* quant.c - ggml block formats: reference quantisation, dequantisation and
 * the portable dot-product kernels (see quant.h).
 *
 * Matches ggml's ggml-quants.c (quantize_row_*_ref, dequantize_row_*) and
 * ggml-cpu/quants.c (ggml_vec_dot_*_generic) bit for bit: the same scale
 * choice, float ops in the same order, the same casts (truncating
 * (int8_t)(v + 8.5f) for the 4/5-bit types, roundf for the 8-bit ones)
 * and IEEE round-to-nearest-even for the fp16 scales. These scalar kernels
 * are also the reference the SIMD kernels in src/core/cpu/ are tested
 * against. */
#include "quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

_Static_assert(sizeof(struct block_q4_0) == 18, "q4_0 block is 18 bytes");
_Static_assert(sizeof(struct block_q4_1) == 20, "q4_1 block is 20 bytes");
_Static_assert(sizeof(struct block_q5_0) == 22, "q5_0 block is 22 bytes");
_Static_assert(sizeof(struct block_q5_1) == 24, "q5_1 block is 24 bytes");
_Static_assert(sizeof(struct block_q8_0) == 34, "q8_0 block is 34 bytes");
_Static_assert(sizeof(struct block_q8_1) == 36, "q8_1 block is 36 bytes");

/* ---- quantisation (ggml quantize_row_*_ref) --------------------------- */

/* The value of largest magnitude with its sign (first one on ties). */
static float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx)
{
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

void quantize_row_q4_0_ref(const float *x, struct block_q4_0 *y, int64_t k)
{
    for (int64_t i = 0; i < k / QK; i++, x += QK) {
        const float d = signed_absmax(x, QK) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK / 2; j++) {
            const float x0 = x[j] * id, x1 = x[QK / 2 + j] * id;
            int xi0 = (int8_t)(x0 + 8.5f), xi1 = (int8_t)(x1 + 8.5f);
            if (xi0 > 15) xi0 = 15;
            if (xi1 > 15) xi1 = 15;
            y[i].qs[j] = (uint8_t)(xi0 | (xi1 << 4));
        }
    }
}

void quantize_row_q4_1_ref(const float *x, struct block_q4_1 *y, int64_t k)
{
    for (int64_t i = 0; i < k / QK; i++, x += QK) {
        float mn, mx;
        min_max(x, QK, &mn, &mx);
        const float d = (mx - mn) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        y[i].m = f32_to_fp16(mn);
        for (int j = 0; j < QK / 2; j++) {
            const float x0 = (x[j] - mn) * id, x1 = (x[QK / 2 + j] - mn) * id;
            int xi0 = (int8_t)(x0 + 0.5f), xi1 = (int8_t)(x1 + 0.5f);
            if (xi0 > 15) xi0 = 15;
            if (xi1 > 15) xi1 = 15;
            y[i].qs[j] = (uint8_t)(xi0 | (xi1 << 4));
        }
    }
}

void quantize_row_q5_0_ref(const float *x, struct block_q5_0 *y, int64_t k)
{
    for (int64_t i = 0; i < k / QK; i++, x += QK) {
        const float d = signed_absmax(x, QK) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK / 2; j++) {
            const float x0 = x[j] * id, x1 = x[QK / 2 + j] * id;
            int xi0 = (int8_t)(x0 + 16.5f), xi1 = (int8_t)(x1 + 16.5f);
            if (xi0 > 31) xi0 = 31;
            if (xi1 > 31) xi1 = 31;
            y[i].qs[j] = (uint8_t)((xi0 & 0x0f) | ((xi1 & 0x0f) << 4));
            qh |= (uint32_t)((xi0 & 0x10) >> 4) << j;
            qh |= (uint32_t)((xi1 & 0x10) >> 4) << (j + QK / 2);
        }
        for (int b = 0; b < 4; b++) y[i].qh[b] = (uint8_t)(qh >> (8 * b)); /* little endian */
    }
}

void quantize_row_q5_1_ref(const float *x, struct block_q5_1 *y, int64_t k)
{
    for (int64_t i = 0; i < k / QK; i++, x += QK) {
        float mn, mx;
        min_max(x, QK, &mn, &mx);
        const float d = (mx - mn) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        y[i].m = f32_to_fp16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < QK / 2; j++) {
            const float x0 = (x[j] - mn) * id, x1 = (x[QK / 2 + j] - mn) * id;
            const unsigned xi0 = (uint8_t)(x0 + 0.5f), xi1 = (uint8_t)(x1 + 0.5f);
            y[i].qs[j] = (uint8_t)((xi0 & 0x0f) | ((xi1 & 0x0f) << 4));
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + QK / 2);
        }
        for (int b = 0; b < 4; b++) y[i].qh[b] = (uint8_t)(qh >> (8 * b));
    }
}

static float absmax(const float *x, int n)
{
    float amax = 0.0f;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
    return amax;
}

void quantize_row_q8_0_ref(const float *x, struct block_q8_0 *y, int64_t k)
{
    for (int64_t i = 0; i < k / QK; i++, x += QK) {
        const float d = absmax(x, QK) / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

void quantize_row_q8_1_ref(const float *x, struct block_q8_1 *y, int64_t k)
{
    for (int64_t i = 0; i < k / QK; i++, x += QK) {
        const float d = absmax(x, QK) / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QK / 2; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            y[i].qs[QK / 2 + j] = (int8_t)roundf(x[QK / 2 + j] * id);
            sum += y[i].qs[j] + y[i].qs[QK / 2 + j];
        }
        y[i].s = f32_to_fp16((float)sum * d);
    }
}

/* ---- dequantisation (ggml dequantize_row_*) --------------------------- */

static uint32_t load_qh(const uint8_t qh[4])
{
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
           (uint32_t)qh[3] << 24;
}

/* One block of a ggml block type as integers: the 32 codes with the
 * symmetric types' offset removed (q4_0: -8, q5_0: -16), the scale d and,
 * for the _1 weight types, the min m (else 0). */
static void unpack_block(enum dtype t, const void *blk, int q[QK], float *d, float *m)
{
    *m = 0.0f;
    switch (t) {
    case TYPE_Q4_0: {
        const struct block_q4_0 *b = blk;
        *d = fp16_to_f32(b->d);
        for (int j = 0; j < QK / 2; j++) {
            q[j] = (b->qs[j] & 0x0f) - 8;
            q[QK / 2 + j] = (b->qs[j] >> 4) - 8;
        }
        return;
    }
    case TYPE_Q4_1: {
        const struct block_q4_1 *b = blk;
        *d = fp16_to_f32(b->d);
        *m = fp16_to_f32(b->m);
        for (int j = 0; j < QK / 2; j++) {
            q[j] = b->qs[j] & 0x0f;
            q[QK / 2 + j] = b->qs[j] >> 4;
        }
        return;
    }
    case TYPE_Q5_0:
    case TYPE_Q5_1: {
        /* same layout up to the min: d, [m,] qh[4], qs[16] */
        const struct block_q5_0 *b0 = blk;
        const struct block_q5_1 *b1 = blk;
        const uint8_t *qs = t == TYPE_Q5_0 ? b0->qs : b1->qs;
        const uint32_t qh = load_qh(t == TYPE_Q5_0 ? b0->qh : b1->qh);
        const int off = t == TYPE_Q5_0 ? 16 : 0;
        *d = fp16_to_f32(t == TYPE_Q5_0 ? b0->d : b1->d);
        if (t == TYPE_Q5_1) *m = fp16_to_f32(b1->m);
        for (int j = 0; j < QK / 2; j++) {
            const int h0 = (int)((qh >> j) << 4) & 0x10;
            const int h1 = (int)(qh >> (j + 12)) & 0x10;
            q[j] = ((qs[j] & 0x0f) | h0) - off;
            q[QK / 2 + j] = ((qs[j] >> 4) | h1) - off;
        }
        return;
    }
    case TYPE_Q8_0: {
        const struct block_q8_0 *b = blk;
        *d = fp16_to_f32(b->d);
        for (int j = 0; j < QK; j++) q[j] = b->qs[j];
        return;
    }
    case TYPE_Q8_1: { /* its s (d * sum of codes) is read by the dot product */
        const struct block_q8_1 *b = blk;
        *d = fp16_to_f32(b->d);
        for (int j = 0; j < QK; j++) q[j] = b->qs[j];
        return;
    }
    default:
        *d = 0.0f;
        memset(q, 0, QK * sizeof *q);
        return;
    }
}

static bool has_min(enum dtype t) { return t == TYPE_Q4_1 || t == TYPE_Q5_1; }

static void dequantize_row_blocks(enum dtype t, const void *x, float *y, int64_t k)
{
    const size_t bs = dtype_traits(t)->size;
    int q[QK];
    float d, m;
    for (int64_t i = 0; i < k / QK; i++, y += QK) {
        unpack_block(t, (const char *)x + (size_t)i * bs, q, &d, &m);
        if (has_min(t))
            for (int j = 0; j < QK; j++) y[j] = (float)q[j] * d + m;
        else
            for (int j = 0; j < QK; j++) y[j] = (float)q[j] * d;
    }
}

void dequantize_row(enum dtype t, const void *src, float *dst, int64_t n)
{
    switch (t) {
    case TYPE_F32: memmove(dst, src, (size_t)n * sizeof *dst); return;
    case TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, (const char *)src + 2 * i, 2);
            dst[i] = fp16_to_f32(h);
        }
        return;
    case TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, (const char *)src + 2 * i, 2);
            dst[i] = bf16_to_f32(h);
        }
        return;
    case TYPE_F64: for (int64_t i = 0; i < n; i++) dst[i] = (float)((const double *)src)[i]; return;
    case TYPE_I8: for (int64_t i = 0; i < n; i++) dst[i] = (float)((const int8_t *)src)[i]; return;
    case TYPE_I16: for (int64_t i = 0; i < n; i++) dst[i] = (float)((const int16_t *)src)[i]; return;
    case TYPE_I32: for (int64_t i = 0; i < n; i++) dst[i] = (float)((const int32_t *)src)[i]; return;
    case TYPE_I64: for (int64_t i = 0; i < n; i++) dst[i] = (float)((const int64_t *)src)[i]; return;
    case TYPE_U8:
    case TYPE_BOOL: for (int64_t i = 0; i < n; i++) dst[i] = (float)((const uint8_t *)src)[i]; return;
    case TYPE_Q4_0:
    case TYPE_Q4_1:
    case TYPE_Q5_0:
    case TYPE_Q5_1:
    case TYPE_Q8_0:
    case TYPE_Q8_1: dequantize_row_blocks(t, src, dst, n); return;
    }
}

size_t quantize_row(enum dtype t, const float *src, void *dst, int64_t n)
{
    size_t bytes = dtype_row_size(t, n);
    if (n < 0 || (bytes == 0 && n > 0)) return 0;
    switch (t) {
    case TYPE_F32: memmove(dst, src, bytes); break;
    case TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = f32_to_fp16(src[i]);
            memcpy((char *)dst + 2 * i, &h, 2);
        }
        break;
    case TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = f32_to_bf16(src[i]);
            memcpy((char *)dst + 2 * i, &h, 2);
        }
        break;
    case TYPE_I32: /* torch .to(int32): truncation toward zero, saturated here */
        for (int64_t i = 0; i < n; i++) {
            float v = src[i];
            int32_t q = v != v ? 0 : v >= 2147483520.0f ? INT32_MAX
                      : v <= -2147483648.0f ? INT32_MIN : (int32_t)v;
            ((int32_t *)dst)[i] = q;
        }
        break;
    case TYPE_Q4_0: quantize_row_q4_0_ref(src, dst, n); break;
    case TYPE_Q4_1: quantize_row_q4_1_ref(src, dst, n); break;
    case TYPE_Q5_0: quantize_row_q5_0_ref(src, dst, n); break;
    case TYPE_Q5_1: quantize_row_q5_1_ref(src, dst, n); break;
    case TYPE_Q8_0: quantize_row_q8_0_ref(src, dst, n); break;
    case TYPE_Q8_1: quantize_row_q8_1_ref(src, dst, n); break;
    default: return 0;
    }
    return bytes;
}

/* ---- portable dot products (ggml_vec_dot_*_generic) ------------------- */

/* Weight blocks of type t against activation blocks of vec_dot type
 * (q8_0, or q8_1 for the types with a min): the integer dot of each block
 * pair times both scales, plus min * activation sum for the _1 types. */
static float dot_blocks(enum dtype t, const void *vw, const void *vx, int64_t n)
{
    const enum dtype xt = has_min(t) ? TYPE_Q8_1 : TYPE_Q8_0;
    const size_t wbs = dtype_traits(t)->size, xbs = dtype_traits(xt)->size;
    int qw[QK], qx[QK];
    float dw, mw, dx, unused, sumf = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        const void *xb = (const char *)vx + (size_t)i * xbs;
        unpack_block(t, (const char *)vw + (size_t)i * wbs, qw, &dw, &mw);
        unpack_block(xt, xb, qx, &dx, &unused);
        int s = 0;
        for (int j = 0; j < QK; j++) s += qw[j] * qx[j];
        sumf += (dw * dx) * (float)s;
        if (has_min(t)) sumf += mw * fp16_to_f32(((const struct block_q8_1 *)xb)->s);
    }
    return sumf;
}

#define DOT_BLOCKS(name, T) \
    static float name(const void *w, const void *x, int64_t n) { return dot_blocks(T, w, x, n); }
DOT_BLOCKS(dot_q4_0_q8_0, TYPE_Q4_0)
DOT_BLOCKS(dot_q4_1_q8_1, TYPE_Q4_1)
DOT_BLOCKS(dot_q5_0_q8_0, TYPE_Q5_0)
DOT_BLOCKS(dot_q5_1_q8_1, TYPE_Q5_1)
DOT_BLOCKS(dot_q8_0_q8_0, TYPE_Q8_0)
#undef DOT_BLOCKS

/* Float rows: four partial sums (a fixed order every variant can mirror
 * up to reassociation), accumulated in float like ggml_vec_dot_f16. */
static float dot_f32(const void *vw, const void *vx, int64_t n)
{
    const float *w = vw, *x = vx;
    float s[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) s[j] += w[i + j] * x[i + j];
    for (; i < n; i++) s[0] += w[i] * x[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

static float dot_half(float (*to_f32)(uint16_t), const uint16_t *w, const float *x, int64_t n)
{
    float s[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) s[j] += to_f32(w[i + j]) * x[i + j];
    for (; i < n; i++) s[0] += to_f32(w[i]) * x[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

static float dot_f16(const void *w, const void *x, int64_t n) { return dot_half(fp16_to_f32, w, x, n); }
static float dot_bf16(const void *w, const void *x, int64_t n) { return dot_half(bf16_to_f32, w, x, n); }

int quant_vec_dot_type(enum dtype t)
{
    switch (t) {
    case TYPE_F32: case TYPE_F16: case TYPE_BF16: return TYPE_F32;
    case TYPE_Q4_0: case TYPE_Q5_0: case TYPE_Q8_0: return TYPE_Q8_0;
    case TYPE_Q4_1: case TYPE_Q5_1: return TYPE_Q8_1;
    default: return -1;
    }
}

vec_dot_fn quant_vec_dot_generic(enum dtype t)
{
    switch (t) {
    case TYPE_F32: return dot_f32;
    case TYPE_F16: return dot_f16;
    case TYPE_BF16: return dot_bf16;
    case TYPE_Q4_0: return dot_q4_0_q8_0;
    case TYPE_Q4_1: return dot_q4_1_q8_1;
    case TYPE_Q5_0: return dot_q5_0_q8_0;
    case TYPE_Q5_1: return dot_q5_1_q8_1;
    case TYPE_Q8_0: return dot_q8_0_q8_0;
    default: return NULL;
    }
}

float vec_dot_f32(enum dtype t, const void *w, const float *x, int64_t n)
{
    vec_dot_fn dot = quant_vec_dot_generic(t);
    int vt = quant_vec_dot_type(t);
    if (!dot || n <= 0) return 0.0f;
    if (vt == TYPE_F32) return dot(w, x, n);
    if (n % QK) return 0.0f;
    /* quantise x in chunks of CHUNK blocks on the stack (no allocation) */
    enum { CHUNK = 64 };
    struct block_q8_1 buf[CHUNK]; /* the larger of the two activation blocks */
    const size_t wblk = dtype_traits(t)->size;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i += CHUNK * QK) {
        int64_t m = n - i < CHUNK * QK ? n - i : CHUNK * QK;
        quantize_row((enum dtype)vt, x + i, buf, m);
        sum += dot((const char *)w + (size_t)(i / QK) * wblk, buf, m);
    }
    return sum;
}
