/* gemm.c - the cpu backend's own single-precision GEMM (blas.h:
 * cpu_gemm_f32), the path of cpu_sgemm at AVX2 and AVX-512.
 *
 * Why not only OpenBLAS: a DYNAMIC_ARCH OpenBLAS picks its kernels by CPU
 * model, and a CPU newer than the library falls back to its generic SSE3
 * kernels ("Prescott"). Debian 12's 0.3.21 does that on an Emerald Rapids
 * Xeon (model 207), where S3Gen's F32 products then ran at about half the
 * speed of the same library told the core (OPENBLAS_CORETYPE=SkylakeX).
 * The core type is read in OpenBLAS's constructor, before any code of
 * ours runs, so it cannot be corrected from here; our own kernels depend
 * on the instruction set only (cpu_features.h), like every other kernel.
 *
 * Goto's loop nest: for each NC-column block of op(B) and KC-deep slice,
 * pack the slice of op(B) into NR-column panels; for each MC-row block of
 * op(A), pack it into MR-row panels; then every MR x NR tile of C is one
 * call of the register-tile kernel (gemm_kernels.h) over the KC slice.
 * Panels are zero-padded past M and N; an edge tile is computed into a
 * scratch tile and only its valid part merged into C. Each element of C
 * is the FMA chain of its products in k order within a slice, the slices
 * added in order (alpha applied per slice, beta once, C unread when beta
 * is 0), so the result does not depend on where the element sits in a
 * tile. Single-threaded: cpu_sgemm splits the work over its pool. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../cpu_features.h"
#include "blas.h"
#include "gemm_kernels.h"

#define GEMM_KC 256

struct gemm_ukr {
    gemm_ukr_fn fn;
    int mr, nr, mc, nc; /* tile, then row and column blocks (multiples of it) */
    /* packer of a whole panel whose depth is contiguous, or NULL */
    void (*pack_tr)(float *d, const float *X, int64_t ld, int64_t kc, int p);
};

static bool ukr_for_level(struct gemm_ukr *u)
{
#ifdef GEMM_X86
    const enum cpu_level l = cpu_level();
    if (l >= CPU_AVX512) {
        *u = (struct gemm_ukr){gemm_ukr_avx512, GEMM_MR_AVX512, GEMM_NR_AVX512, 16 * GEMM_MR_AVX512,
                               64 * GEMM_NR_AVX512, gemm_pack_tr_avx512};
        return true;
    }
    if (l >= CPU_AVX2) {
        *u = (struct gemm_ukr){gemm_ukr_avx2,     GEMM_MR_AVX2,     GEMM_NR_AVX2, 16 * GEMM_MR_AVX2,
                               64 * GEMM_NR_AVX2, gemm_pack_tr_avx2};
        return true;
    }
#else
    (void)u;
#endif
    return false;
}

/* n lanes x kc depths of a matrix X, element (lane l, depth k) at
 * X[l * sl + k * sk], as panels of p lanes (zero past n):
 * d[(l / p) * p * kc + k * p + l % p]. op(A)'s rows and op(B)'s columns
 * are both lanes: A's with p = MR, B's with p = NR. */
static void pack(const struct gemm_ukr *u, float *d, const float *X, int64_t sl, int64_t sk, int64_t n, int p,
                 int64_t kc)
{
    for (int64_t l0 = 0; l0 < n; l0 += p, d += (int64_t)p * kc) {
        const int nl = n - l0 < p ? (int)(n - l0) : p;
        const float *x = X + l0 * sl;
        if (sk == 1 && nl == p && u->pack_tr) {
            u->pack_tr(d, x, sl, kc, p);
        } else if (sl == 1) { /* a depth's lanes contiguous */
            for (int64_t k = 0; k < kc; k++) {
                memcpy(d + k * p, x + k * sk, (size_t)nl * sizeof(float));
                for (int l = nl; l < p; l++) d[k * p + l] = 0.0f;
            }
        } else {
            for (int l = 0; l < p; l++)
                for (int64_t k = 0; k < kc; k++) d[k * p + l] = l < nl ? x[l * sl + k * sk] : 0.0f;
        }
    }
}

bool cpu_gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    struct gemm_ukr u;
    if (M <= 0 || N <= 0 || K <= 0 || !ukr_for_level(&u)) return false;
    const int64_t kcm = K < GEMM_KC ? K : GEMM_KC;
    const int64_t mcm = M < u.mc ? (M + u.mr - 1) / u.mr * u.mr : u.mc;
    const int64_t ncm = N < u.nc ? (N + u.nr - 1) / u.nr * u.nr : u.nc;
    const size_t bytes = ((size_t)(mcm + ncm) * (size_t)kcm + (size_t)u.mr * (size_t)u.nr) * sizeof(float);
    float *buf = aligned_alloc(64, (bytes + 63) & ~(size_t)63); /* C11: a multiple of the alignment */
    if (!buf) return false;
    float *ap = buf, *bp = buf + mcm * kcm, *tile = bp + ncm * kcm;
    for (int64_t jc = 0; jc < N; jc += u.nc) {
        const int64_t nc = N - jc < u.nc ? N - jc : u.nc;
        for (int64_t pc = 0; pc < K; pc += GEMM_KC) {
            const int64_t kc = K - pc < GEMM_KC ? K - pc : GEMM_KC;
            /* the first slice applies beta; later ones add to C */
            const float b = pc == 0 ? beta : 1.0f;
            const bool bz = pc == 0 && beta == 0.0f;
            /* op(B)[k][j]: B[k * ldb + j], or B[j * ldb + k] when tb */
            pack(&u, bp, tb ? B + jc * ldb + pc : B + pc * ldb + jc, tb ? ldb : 1, tb ? 1 : ldb, nc, u.nr, kc);
            for (int64_t ic = 0; ic < M; ic += u.mc) {
                const int64_t mc = M - ic < u.mc ? M - ic : u.mc;
                /* op(A)[i][k]: A[i * lda + k], or A[k * lda + i] when ta */
                pack(&u, ap, ta ? A + pc * lda + ic : A + ic * lda + pc, ta ? 1 : lda, ta ? lda : 1, mc, u.mr, kc);
                for (int64_t jr = 0; jr < nc; jr += u.nr) {
                    const int64_t nw = nc - jr < u.nr ? nc - jr : u.nr;
                    for (int64_t ir = 0; ir < mc; ir += u.mr) {
                        const int64_t mh = mc - ir < u.mr ? mc - ir : u.mr;
                        float *c = C + (ic + ir) * ldc + jc + jr;
                        if (mh == u.mr && nw == u.nr) {
                            u.fn(kc, ap + ir * kc, bp + jr * kc, c, ldc, alpha, b, bz);
                            continue;
                        }
                        u.fn(kc, ap + ir * kc, bp + jr * kc, tile, u.nr, alpha, 0.0f, true);
                        for (int64_t i = 0; i < mh; i++)
                            for (int64_t j = 0; j < nw; j++) {
                                const float t = tile[i * u.nr + j];
                                c[i * ldc + j] = bz ? t : fmaf(b, c[i * ldc + j], t);
                            }
                    }
                }
            }
        }
    }
    free(buf);
    return true;
}
