/* elementwise_kernels.h - the SIMD entry points of the cpu elementwise
 * group (elementwise.c), one file per instruction set: elementwise_avx2.c
 * (f16c conversions, the AVX2 activations and Snake), elementwise_avx512.c
 * (the 16-lane activations, Q8_0 quantisation). Each has the contract of
 * the portable loop it replaces in elementwise.c and is called only after
 * cpu_level() says its level is there; on other architectures the files
 * compile to nothing and HAVE_X86 is 0. */
#ifndef CBX_CPU_ELEMENTWISE_KERNELS_H
#define CBX_CPU_ELEMENTWISE_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "../ops.h"
#include "../quant.h"

#if defined(__x86_64__) || defined(__i386__)
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

/* the ops with an AVX2 vector form; the rest stay on libm */
static inline bool un_has_avx2(enum unop op)
{
    return op != UN_SOFTPLUS && op != UN_LOG;
}

/* the ops with an AVX-512 form */
static inline bool un_has_avx512(enum unop op)
{
    return op == UN_GELU || op == UN_SILU || op == UN_SIGMOID || op == UN_MISH || op == UN_GELU_TANH ||
           op == UN_TANH;
}

/* For fused epilogues (linear_epi): whether op_unary's cpu kernel gives
 * op (parameters 0, 0) each element's value wherever a run starts and in
 * place; then cpu_unary_run computes it for one contiguous run. */
bool cpu_unary_fusable(enum unop op);
void cpu_unary_run(enum unop op, float *o, const float *x, int64_t n);

#if HAVE_X86
/* n float16 <-> float32 (F16C; the AVX2 level includes it) */
void elementwise_f16_to_f32_f16c(float *dst, const uint16_t *src, int64_t n);
void elementwise_f32_to_f16_f16c(uint16_t *dst, const float *src, int64_t n);
/* o = op(x) for n floats, op with un_has_avx2 (p0, p1: op_unary's) */
void elementwise_unary_avx2(enum unop op, float p0, float p1, float *o, const float *x, int64_t n);
/* o = x + inv sin^2(al x) for n floats (Snake of one channel) */
void elementwise_snake_avx2(float *o, const float *x, float al, float inv, int64_t n);
/* o = op(x) for n floats, op with un_has_avx512 */
void elementwise_unary_avx512(enum unop op, float *o, const float *x, int64_t n);
/* elementwise_snake_avx2 on 16 lanes, bit for bit */
void elementwise_snake_avx512(float *o, const float *x, float al, float inv, int64_t n);
/* quantize_row_q8_0_ref of n floats (a multiple of QK), byte for byte */
void elementwise_q8_0_row_avx512(const float *x, struct block_q8_0 *y, int64_t n);
#endif

#endif
