/* quant.h - ggml block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1) and
 * half/bfloat16 rows: quantise, dequantise, dot products.
 *
 * Block layouts are byte-for-byte ggml's (ggml-common.h), so GGUF files
 * written here load in ggml tools and vice versa:
 *   q4_0 {fp16 d; u8 qs[16]}          x = d * (q - 8), low nibbles hold
 *                                     elements 0..15, high nibbles 16..31
 *   q4_1 {fp16 d, m; u8 qs[16]}       x = d * q + m
 *   q5_0 {fp16 d; u8 qh[4]; u8 qs[16]} 5th bit of element j in qh bit j
 *   q5_1 {fp16 d, m; u8 qh[4]; u8 qs[16]}
 *   q8_0 {fp16 d; i8 qs[32]}          x = d * q
 *   q8_1 {fp16 d, s; i8 qs[32]}       s = d * sum(q) (activation side)
 * Thread safety: all functions are pure; any thread, concurrently. */
#ifndef CBX_QUANT_H
#define CBX_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

/* n elements of type t at src -> float32 dst. t: any float or block type. */
void dequantize_row(enum dtype t, const void *src, float *dst, int64_t n);
/* float32 src -> n elements of type t at dst (reference rounding as ggml's
 * quantize_row_*_ref). n must be a multiple of the block size for block
 * types. Returns bytes written. */
size_t quantize_row(enum dtype t, const float *src, void *dst, int64_t n);

/* sum_i w[i] * x[i] for one weight row w of type t and float32 x. The
 * quantised types quantise x on the fly, in chunks on the stack, as ggml
 * does (to quant_vec_dot_type(t)); for a row reused many times quantise x
 * once and call the vec_dot_fn of quant_vec_dot_generic(t). */
float vec_dot_f32(enum dtype t, const void *w, const float *x, int64_t n);

/* ---- block layouts (ggml-common.h), d/m/s as IEEE half bits ---------- */
struct block_q4_0 { uint16_t d; uint8_t qs[QK / 2]; };
struct block_q4_1 { uint16_t d, m; uint8_t qs[QK / 2]; };
struct block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK / 2]; };
struct block_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK / 2]; };
struct block_q8_0 { uint16_t d; int8_t qs[QK]; };
struct block_q8_1 { uint16_t d, s; int8_t qs[QK]; };

/* Reference quantisation, one function per type, exactly ggml's
 * quantize_row_<t>_ref (same scale choice, same rounding, same fp16
 * rounding of d): q4_0/q5_0 d = max / -8 (-16) with max the signed value
 * of largest magnitude; q4_1/q5_1 d = (max - min) / 15 (31), m = min;
 * q8_0/q8_1 d = amax / 127, q = roundf(x / d). k: multiple of QK. */
void quantize_row_q4_0_ref(const float *x, struct block_q4_0 *y, int64_t k);
void quantize_row_q4_1_ref(const float *x, struct block_q4_1 *y, int64_t k);
void quantize_row_q5_0_ref(const float *x, struct block_q5_0 *y, int64_t k);
void quantize_row_q5_1_ref(const float *x, struct block_q5_1 *y, int64_t k);
void quantize_row_q8_0_ref(const float *x, struct block_q8_0 *y, int64_t k);
void quantize_row_q8_1_ref(const float *x, struct block_q8_1 *y, int64_t k);

/* The activation type a weight row of type t is multiplied with: Q8_0 for
 * q4_0/q5_0/q8_0, Q8_1 for q4_1/q5_1 (their min term needs sum(x)), F32
 * for F32/F16/BF16. -1 for other types. */
int quant_vec_dot_type(enum dtype t);
/* sum over n elements of w (type t) times x (type quant_vec_dot_type(t)).
 * Quantised pairs use integer block sums, then float scale per block,
 * like ggml_vec_dot_<t>_q8_<0|1>. */
typedef float (*vec_dot_fn)(const void *w, const void *x, int64_t n);
/* The portable scalar kernel for weight type t (NULL if none); SIMD
 * variants with the same contract live in src/core/cpu/linear_*.c. */
vec_dot_fn quant_vec_dot_generic(enum dtype t);

#endif
