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
 * quantised types quantise x on the fly (use vec_dot_prepared for rows
 * reused many times). */
float vec_dot_f32(enum dtype t, const void *w, const float *x, int64_t n);

#endif
