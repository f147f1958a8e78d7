/* gemm_kernels.h - what the single-precision GEMM of the cpu backend
 * (gemm.c, behind cpu_sgemm in blas.c) shares with its SIMD files: the
 * register-tile ("micro") kernels of gemm_avx512.c and gemm_avx2.c.
 *
 * A micro kernel multiplies a packed MR x kc panel of A by a packed
 * kc x NR panel of B (gemm.c packs them, zero-padded past the edges):
 *   ap[k * MR + i] = op(A)[i][k],  bp[k * NR + j] = op(B)[k][j],
 * sums each of the MR x NR products over k in order, with FMA, into
 * registers, and stores C[i][j] = alpha * sum + (beta_zero ? 0 : beta *
 * C[i][j]) for i < MR, j < NR (ldc floats between rows of C; C is not read
 * when beta_zero). The SIMD files compile to nothing off x86. */
#ifndef CBX_CPU_GEMM_KERNELS_H
#define CBX_CPU_GEMM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GEMM_X86 1
#endif

typedef void (*gemm_ukr_fn)(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, float alpha,
                            float beta, bool beta_zero);

/* AVX-512: 8 rows x 32 columns (16 accumulators of 16 lanes) */
#define GEMM_MR_AVX512 8
#define GEMM_NR_AVX512 32
/* AVX2 + FMA: 6 rows x 16 columns (12 accumulators of 8 lanes) */
#define GEMM_MR_AVX2 6
#define GEMM_NR_AVX2 16

/* gemm_pack_tr_*: a whole panel of p lanes whose depth is contiguous,
 * lane l at X + l * ld: d[k * p + l] = X[l * ld + k], k < kc (gemm.c
 * packs the other cases). avx512: p a multiple of 8, at most 32; avx2:
 * any p. */
#ifdef GEMM_X86
void gemm_pack_tr_avx512(float *d, const float *X, int64_t ld, int64_t kc, int p);
void gemm_pack_tr_avx2(float *d, const float *X, int64_t ld, int64_t kc, int p);
void gemm_ukr_avx512(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, float alpha, float beta,
                     bool beta_zero);
void gemm_ukr_avx2(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, float alpha, float beta,
                   bool beta_zero);
#endif

#endif
