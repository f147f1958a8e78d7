/* gemm_avx2.c - the AVX2 + FMA register tile of the cpu GEMM (gemm.c,
 * gemm_kernels.h): 6 rows x 16 columns (gemm_ukr.inc). The function
 * carries its own target attribute; the file is compiled for the baseline
 * ISA (and to nothing off x86). */
#include "gemm_kernels.h"

#ifdef GEMM_X86
#include <immintrin.h>

#define UKR_NAME gemm_ukr_avx2
#define UKR_ATTR __attribute__((target("avx2,fma")))
#define MR GEMM_MR_AVX2
#define VL 8
#define VF __m256
#define VZERO _mm256_setzero_ps()
#define VSET(f) _mm256_set1_ps(f)
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#include "gemm_ukr.inc"
#endif
