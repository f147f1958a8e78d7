/* blas.c - sgemm over the thread pool (see blas.h). */
#include "blas.h"

#include <pthread.h>
#include <stdbool.h>

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single(void) { openblas_set_num_threads(1); }
void cpu_blas_init(void) { pthread_once(&blas_once, blas_single); }

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
        cblas_sgemm(CblasRowMajor, j->ta, j->tb, hi - lo, j->N, j->K, j->alpha, a, j->lda, j->B, j->ldb,
                    j->beta, j->C + (size_t)lo * j->ldc, j->ldc);
    } else {
        const float *b = j->tb == CblasNoTrans ? j->B + lo : j->B + (size_t)lo * j->ldb;
        cblas_sgemm(CblasRowMajor, j->ta, j->tb, j->M, hi - lo, j->K, j->alpha, j->A, j->lda, b, j->ldb,
                    j->beta, j->C + lo, j->ldc);
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
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    tp_parallel_for(tp, j.parts, 1, sgemm_parts, &j);
}
