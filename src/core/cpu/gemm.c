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
    /* whole-panel packers of untransposed A, transposed B (or NULL) */
    void (*pack_an)(float *d, const float *A, int64_t lda, int64_t kc);
    void (*pack_bt)(float *d, const float *B, int64_t ldb, int64_t kc);
};

static bool ukr_for_level(struct gemm_ukr *u)
{
#ifdef GEMM_X86
    const enum cpu_level l = cpu_level();
    if (l >= CPU_AVX512) {
        *u = (struct gemm_ukr){gemm_ukr_avx512,     GEMM_MR_AVX512,     GEMM_NR_AVX512,     16 * GEMM_MR_AVX512,
                               64 * GEMM_NR_AVX512, gemm_pack_an_avx512, gemm_pack_bt_avx512};
        return true;
    }
    if (l >= CPU_AVX2) {
        *u = (struct gemm_ukr){gemm_ukr_avx2, GEMM_MR_AVX2, GEMM_NR_AVX2, 16 * GEMM_MR_AVX2, 64 * GEMM_NR_AVX2,
                               NULL,          NULL};
        return true;
    }
#else
    (void)u;
#endif
    return false;
}

/* rows [i0, i0 + mc) x depth [k0, k0 + kc) of op(A) as mr-row panels:
 * ap[(ir / mr) * mr * kc + k * mr + i] = op(A)[i0 + ir + i][k0 + k] */
static void pack_a(const struct gemm_ukr *u, float *ap, const float *A, bool trans, int64_t lda, int64_t i0,
                   int64_t mc, int64_t k0, int64_t kc)
{
    const int mr = u->mr;
    for (int64_t ir = 0; ir < mc; ir += mr) {
        float *d = ap + ir * kc;
        const int mh = mc - ir < mr ? (int)(mc - ir) : mr;
        if (!trans && mh == mr && u->pack_an) {
            u->pack_an(d, A + (i0 + ir) * lda + k0, lda, kc);
        } else if (!trans) { /* op(A)[i][k] = A[i * lda + k] */
            for (int i = 0; i < mh; i++) {
                const float *s = A + (i0 + ir + i) * lda + k0;
                for (int64_t k = 0; k < kc; k++) d[k * mr + i] = s[k];
            }
            for (int i = mh; i < mr; i++)
                for (int64_t k = 0; k < kc; k++) d[k * mr + i] = 0.0f;
        } else { /* op(A)[i][k] = A[k * lda + i] */
            for (int64_t k = 0; k < kc; k++) {
                const float *s = A + (k0 + k) * lda + i0 + ir;
                for (int i = 0; i < mr; i++) d[k * mr + i] = i < mh ? s[i] : 0.0f;
            }
        }
    }
}

/* depth [k0, k0 + kc) x columns [j0, j0 + nc) of op(B) as nr-column
 * panels: bp[(jr / nr) * nr * kc + k * nr + j] = op(B)[k0 + k][j0 + jr + j] */
static void pack_b(const struct gemm_ukr *u, float *bp, const float *B, bool trans, int64_t ldb, int64_t k0,
                   int64_t kc, int64_t j0, int64_t nc)
{
    const int nr = u->nr;
    for (int64_t jr = 0; jr < nc; jr += nr) {
        float *d = bp + jr * kc;
        const int nw = nc - jr < nr ? (int)(nc - jr) : nr;
        if (trans && nw == nr && u->pack_bt) {
            u->pack_bt(d, B + (j0 + jr) * ldb + k0, ldb, kc);
        } else if (!trans) { /* op(B)[k][j] = B[k * ldb + j] */
            for (int64_t k = 0; k < kc; k++) {
                memcpy(d + k * nr, B + (k0 + k) * ldb + j0 + jr, (size_t)nw * sizeof(float));
                for (int j = nw; j < nr; j++) d[k * nr + j] = 0.0f;
            }
        } else { /* op(B)[k][j] = B[j * ldb + k] */
            for (int j = 0; j < nw; j++) {
                const float *s = B + (j0 + jr + j) * ldb + k0;
                for (int64_t k = 0; k < kc; k++) d[k * nr + j] = s[k];
            }
            for (int j = nw; j < nr; j++)
                for (int64_t k = 0; k < kc; k++) d[k * nr + j] = 0.0f;
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
            pack_b(&u, bp, B, tb, ldb, pc, kc, jc, nc);
            for (int64_t ic = 0; ic < M; ic += u.mc) {
                const int64_t mc = M - ic < u.mc ? M - ic : u.mc;
                pack_a(&u, ap, A, ta, lda, ic, mc, pc, kc);
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
