/* blas.c - sgemm over the thread pool, our kernels or OpenBLAS (see
 * blas.h). */
#include "blas.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../cpu_features.h"

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single(void) { openblas_set_num_threads(1); }
void cpu_blas_init(void) { pthread_once(&blas_once, blas_single); }

/* ---- which implementation ------------------------------------------------ */

static _Atomic int sgemm_impl = SGEMM_AUTO;
/* read once (sgemm_setup): CBX_SGEMM, and OpenBLAS's core by level */
static enum cpu_sgemm_impl sgemm_env = SGEMM_AUTO;
static bool blas_tuned[CPU_AVX512 + 1];
static char blas_name[64];
static pthread_once_t sgemm_once = PTHREAD_ONCE_INIT;

/* Whether OpenBLAS's core runs kernels of level l: its DYNAMIC_ARCH core
 * names for AVX-512 and AVX2 sgemm kernels (a CPU it does not know gets
 * an older core, e.g. "Prescott": SSE3). */
static bool blas_tuned_at(const char *core, enum cpu_level l)
{
    static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *const avx2[] = {"Haswell", "Zen"};
    for (size_t i = 0; i < sizeof avx512 / sizeof avx512[0]; i++)
        if (!strcasecmp(core, avx512[i])) return true;
    for (size_t i = 0; l < CPU_AVX512 && i < sizeof avx2 / sizeof avx2[0]; i++)
        if (!strcasecmp(core, avx2[i])) return true;
    return false;
}

static void sgemm_setup(void)
{
    const char *core = openblas_get_corename();
    if (!core) core = "?";
    snprintf(blas_name, sizeof blas_name, "openblas %s", core);
    for (int l = CPU_AVX2; l <= CPU_AVX512; l++) blas_tuned[l] = blas_tuned_at(core, (enum cpu_level)l);
    const char *e = getenv("CBX_SGEMM");
    if (e && !strcmp(e, "own")) sgemm_env = SGEMM_OWN;
    else if (e && !strcmp(e, "blas")) sgemm_env = SGEMM_BLAS;
}

enum cpu_sgemm_impl cpu_sgemm_set_impl(enum cpu_sgemm_impl impl)
{
    return (enum cpu_sgemm_impl)atomic_exchange(&sgemm_impl, (int)impl);
}

/* whether cpu_sgemm tries our kernels first: where we have them, unless
 * chosen otherwise or (AUTO) OpenBLAS runs kernels of the CPU's level
 * (measured on AVX-512 without AMX: ours x0.69-1.13 of OpenBLAS's SkylakeX
 * kernels, x3.1-4.6 of its Prescott ones) */
static bool sgemm_own(void)
{
    pthread_once(&sgemm_once, sgemm_setup);
    enum cpu_sgemm_impl i = (enum cpu_sgemm_impl)atomic_load(&sgemm_impl);
    if (i == SGEMM_AUTO) i = sgemm_env;
    const enum cpu_level l = cpu_level();
    if (i == SGEMM_BLAS || l < CPU_AVX2) return false;
    return i == SGEMM_OWN || !blas_tuned[l];
}

const char *cpu_sgemm_name(void)
{
    if (sgemm_own()) return cpu_level() >= CPU_AVX512 ? "own avx512" : "own avx2";
    return blas_name; /* made by sgemm_own's setup */
}

/* one single-threaded product */
static void sgemm_one(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (sgemm_own() &&
        cpu_gemm_f32(ta != CblasNoTrans, tb != CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        return;
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ---- over the pool ------------------------------------------------------- */

struct sgemm_job {
    CBLAS_TRANSPOSE ta, tb;
    int M, N, K, lda, ldb, ldc, parts;
    bool by_rows;
    float alpha, beta;
    const float *A, *B;
    float *C;
};

static void sgemm_parts(void *ctx, int64_t p0, int64_t p1, int ith)
{
    (void)ith;
    const struct sgemm_job *j = ctx;
    const int dim = j->by_rows ? j->M : j->N;
    const int lo = (int)(p0 * dim / j->parts), hi = (int)(p1 * dim / j->parts);
    if (hi <= lo) return;
    if (j->by_rows) {
        const float *a = j->ta == CblasNoTrans ? j->A + (size_t)lo * j->lda : j->A + lo;
        sgemm_one(j->ta, j->tb, hi - lo, j->N, j->K, j->alpha, a, j->lda, j->B, j->ldb, j->beta,
                  j->C + (size_t)lo * j->ldc, j->ldc);
    } else {
        const float *b = j->tb == CblasNoTrans ? j->B + lo : j->B + (size_t)lo * j->ldb;
        sgemm_one(j->ta, j->tb, j->M, hi - lo, j->K, j->alpha, j->A, j->lda, b, j->ldb, j->beta, j->C + lo,
                  j->ldc);
    }
}

void cpu_sgemm(struct threadpool *tp, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
               float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
               int ldc)
{
    enum { MIN_PART = 32 }; /* rows or columns: below this a part is overhead */
    struct sgemm_job j = {ta, tb, M, N, K, lda, ldb, ldc, 1, M >= N, alpha, beta, A, B, C};
    const int dim = j.by_rows ? M : N;
    const int n_threads = tp ? tp_n_threads(tp) : 1;
    j.parts = dim / MIN_PART < n_threads ? dim / MIN_PART : n_threads;
    if (j.parts <= 1 || (int64_t)M * N * K < (int64_t)1 << 18) {
        sgemm_one(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    tp_parallel_for(tp, j.parts, 1, sgemm_parts, &j);
}
