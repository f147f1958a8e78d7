/* linear_bf16.h - op_linear with BF16 products on AMX-BF16 or AVX512-BF16
 * (linear_bf16.c).
 *
 * Taken by the cpu op_linear when the arena asks for BF16 products
 * (arena_bf16), AMX-BF16 or AVX512-BF16 is ready and x has at least
 * linear_bf16_min_rows rows: y[M, N] = bf16(x) @ bf16(w)^T + b, FP32 sums over the whole K,
 * bf16() the round-to-nearest-even of the F32 value (of the dequantised
 * value for q4_0 / q8_0 weights). */
#ifndef CBX_CPU_LINEAR_BF16_H
#define CBX_CPU_LINEAR_BF16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../tensor.h"
#include "../threadpool.h"

/* Whether the CPU and OS have AMX-BF16 (with AVX-512 BF16 / BW) and the
 * process was granted the tile state (cpu_amx_ready), or AVX512-BF16
 * (cpu_avx512_bf16_ready), with F16C. */
bool linear_bf16_available(void);
/* Whether the path multiplies weights w: F32, F16, BF16, Q8_0 or Q4_0
 * rows (contiguous inside, any row stride), or q4_0 / q8_0 packed by
 * linear_pack; and linear_bf16_available(). Q8_0 / Q4_0 without AMX only
 * when linear_bf16_quant_dp. */
bool linear_bf16_supported(const struct tensor *w);
/* op_linear takes the path from this many rows of x up (a tuning knob
 * like linear_dot_max_rows; set it only while no linear runs). */
extern int linear_bf16_min_rows;
/* Whether q4_0 / q8_0 weights take the path without AMX (default false:
 * the quantised GEMM is faster there; tests and benchmarks set it to
 * check and time this GEMM; set it only while no linear runs). */
extern bool linear_bf16_quant_dp;

/* op_linear_ex's epilogue, applied to each stretch y[row][c0, c0 + n)
 * of the product as it is stored (linear.c: linear_epi_apply): act >= 0
 * as op_unary evaluates it (a cpu_unary_fusable op), then y = res + y as
 * op_add, res [m, n] contiguous or NULL. */
struct linear_epi {
    int act;
    const float *res;
};
void linear_epi_apply(const struct linear_epi *e, float *y, int64_t row, int64_t ld, int64_t c0, int64_t n);

/* Scratch bytes linear_bf16_gemm needs (64-byte aligned) for m rows of k
 * and a pool of nt threads. */
size_t linear_bf16_scratch_bytes(int64_t m, int64_t k, int nt);
/* y[m, n] (row stride n) = x @ w^T + bias, x an F32 tensor of any
 * strides, m = tensor_nrows(x) rows of k = its last dim (bias: NULL or n
 * floats bias_stride bytes apart), n = w->ne[0], with the pool's threads;
 * w as linear_bf16_supported accepts it, scratch of
 * linear_bf16_scratch_bytes(m, k, tp_n_threads(tp)) bytes; then the
 * epilogue e (NULL: none). */
void linear_bf16_gemm(struct threadpool *tp, const struct tensor *x, const struct tensor *w,
                      const char *bias, int64_t bias_stride, float *y, void *scratch,
                      const struct linear_epi *e);

#endif
