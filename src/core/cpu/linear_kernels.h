/* linear_kernels.h - row dot-product kernels of the cpu linear group, one
 * set per SIMD level (linear_avx2.c, linear_avx512.c), all with the
 * contract of quant.h's vec_dot_fn: w one weight row of type t, x the
 * activation row already in quant_vec_dot_type(t) (Q8_0/Q8_1 blocks or
 * F32). The portable set is quant_vec_dot_generic(). */
#ifndef CBX_CPU_LINEAR_KERNELS_H
#define CBX_CPU_LINEAR_KERNELS_H

#include "../cpu_features.h"
#include "../quant.h"

/* NULL when that level has no kernel of its own for t. */
vec_dot_fn linear_dot_avx2(enum dtype t);
vec_dot_fn linear_dot_avx512(enum dtype t);

/* The kernel for t at level l, falling back to lower levels; NULL when t
 * is not a weight type. */
vec_dot_fn linear_dot_kernel(enum dtype t, enum cpu_level l);

/* op_linear takes the dot path up to this many rows of x, sgemm above.
 * A tuning knob for bench_kernels; set it only while no linear runs. */
extern int linear_dot_max_rows;

#endif
