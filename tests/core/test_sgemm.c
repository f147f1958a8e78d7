/* test_sgemm.c - cpu_sgemm (cpu/blas.h): our kernels (gemm.c) at every
 * SIMD level this CPU has (avx2, avx512) and OpenBLAS, against a naive
 * product in double, over the four transposes, alpha and beta (beta 0
 * with C full of NaN: C must not be read), padded leading dimensions,
 * shapes below, at and past a register tile, a row / column block and a
 * k slice, on one thread and split over a pool of 2.
 *
 * Bound per element: 4e-7 * (K + 2) * (|alpha| sum_k |a b| + |beta c|)
 * (float rounding of the k chains), printed as the worst err / bound.
 * Our kernels, bit for bit: the same with and without the pool (the split
 * does not change how an element is summed), and avx2 the same as avx512
 * (both run each element's FMA chain in k order, slices in order). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu/blas.h"
#include "core/cpu_features.h"
#include "core/threadpool.h"
#include "testutil.h"

struct shape {
    int M, N, K;
};

/* op(X)[r][c] of a row-major X with leading dimension ld */
static double at(const float *X, bool tr, int ld, int r, int c) { return tr ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c]; }

/* one product: C = alpha op(A) op(B) + beta C0 with impl at level; the
 * result into out (M x N, packed); false when the bound is broken */
static bool run_one(const struct shape *s, bool ta, bool tb, float alpha, float beta, struct threadpool *tp,
                    const float *A, int lda, const float *B, int ldb, const float *C0, int ldc, float *out,
                    double *worst)
{
    float *C = malloc((size_t)s->M * ldc * sizeof *C);
    if (!C) return false;
    for (size_t i = 0; i < (size_t)s->M * ldc; i++) C[i] = beta == 0.0f ? NAN : C0[i];
    cpu_sgemm(tp, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, s->M, s->N, s->K, alpha, A, lda,
              B, ldb, beta, C, ldc);
    bool ok = true;
    for (int i = 0; i < s->M; i++)
        for (int j = 0; j < s->N; j++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < s->K; k++) {
                const double p = at(A, ta, lda, i, k) * at(B, tb, ldb, k, j);
                ref += p;
                mag += fabs(p);
            }
            const double c0 = beta == 0.0f ? 0.0 : C0[(size_t)i * ldc + j];
            ref = alpha * ref + beta * c0;
            const double bound = 4e-7 * (s->K + 2) * (fabs(alpha) * mag + fabs(beta * c0)) + 1e-30;
            const double got = C[(size_t)i * ldc + j], err = fabs(got - ref);
            if (!(err <= bound)) ok = false; /* NaN fails */
            if (err / bound > *worst) *worst = err / bound;
            out[(size_t)i * s->N + j] = C[(size_t)i * ldc + j];
        }
    /* padding columns past N are never written */
    for (int i = 0; i < s->M && beta != 0.0f; i++)
        for (int j = s->N; j < ldc; j++)
            if (C[(size_t)i * ldc + j] != C0[(size_t)i * ldc + j]) ok = false;
    free(C);
    return ok;
}

int main(void)
{
    static const struct shape shapes[] = {
        {1, 1, 1},    {3, 5, 7},      {8, 32, 16},    {6, 16, 33},   {17, 45, 64},  {9, 31, 300},
        {130, 70, 257}, {200, 40, 96}, {33, 1030, 40}, {20, 2100, 24}, {64, 64, 513},
    };
    static const float alphas[] = {1.0f, 0.5f}, betas[] = {0.0f, 1.0f, -0.75f};
    struct threadpool *tp = tp_create(2);
    CHECK(tp != NULL, "tp_create(2)");
    /* the implementations: our kernels at each level the CPU has, then OpenBLAS */
    struct {
        const char *name;
        enum cpu_sgemm_impl impl;
        enum cpu_level level;
    } impls[] = {{"own avx512", SGEMM_OWN, CPU_AVX512}, {"own avx2", SGEMM_OWN, CPU_AVX2}, {"openblas", SGEMM_BLAS, CPU_AVX512}};
    const enum cpu_level top = cpu_level_detected();
    printf("cpu level %s; OpenBLAS core: ", cpu_level_name(top));
    cpu_sgemm_set_impl(SGEMM_BLAS);
    printf("%s\n", cpu_sgemm_name());
    float *keep[sizeof shapes / sizeof shapes[0]][2][2][2][3] = {{{{{0}}}}}; /* avx512's, for avx2 to match */
    for (size_t v = 0; v < sizeof impls / sizeof impls[0]; v++) {
        if (impls[v].impl == SGEMM_OWN && top < impls[v].level) {
            printf("%s: not on this CPU\n", impls[v].name);
            continue;
        }
        cpu_set_level(impls[v].level);
        cpu_sgemm_set_impl(impls[v].impl);
        CHECK(strncmp(cpu_sgemm_name(), impls[v].name, strlen(impls[v].name)) == 0, "%s runs (cpu_sgemm_name %s)",
              impls[v].name, cpu_sgemm_name());
        double worst = 0;
        int bad = 0, split_diff = 0, level_diff = 0, cases = 0;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const struct shape *s = &shapes[si];
            for (int t = 0; t < 4; t++) {
                const bool ta = t & 1, tb = t & 2;
                /* leading dimensions padded past the rows' length */
                const int lda = (ta ? s->M : s->K) + 3, ldb = (tb ? s->K : s->N) + 5, ldc = s->N + 2;
                const size_t na = (size_t)(ta ? s->K : s->M) * lda, nb = (size_t)(tb ? s->N : s->K) * ldb;
                float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B);
                float *C0 = malloc((size_t)s->M * ldc * sizeof *C0);
                float *o1 = malloc((size_t)s->M * s->N * sizeof *o1), *o2 = malloc((size_t)s->M * s->N * sizeof *o2);
                if (!A || !B || !C0 || !o1 || !o2) {
                    CHECK(false, "allocation");
                    free(A), free(B), free(C0), free(o1), free(o2);
                    continue;
                }
                fill_uniform(A, na, -1, 1, 11 + si);
                fill_uniform(B, nb, -1, 1, 23 + si);
                fill_uniform(C0, (size_t)s->M * ldc, -1, 1, 37 + si);
                for (int ai = 0; ai < 2; ai++)
                    for (int bi = 0; bi < 3; bi++) {
                        const float alpha = alphas[ai], beta = betas[bi];
                        cases++;
                        if (!run_one(s, ta, tb, alpha, beta, NULL, A, lda, B, ldb, C0, ldc, o1, &worst)) bad++;
                        if (!run_one(s, ta, tb, alpha, beta, tp, A, lda, B, ldb, C0, ldc, o2, &worst)) bad++;
                        if (impls[v].impl != SGEMM_OWN) continue;
                        const size_t n = (size_t)s->M * s->N;
                        if (memcmp(o1, o2, n * sizeof *o1)) split_diff++;
                        float **k = &keep[si][ta][tb][ai][bi];
                        if (impls[v].level == CPU_AVX512) {
                            *k = malloc(n * sizeof **k);
                            if (*k) memcpy(*k, o1, n * sizeof **k);
                        } else if (*k && memcmp(*k, o1, n * sizeof **k)) {
                            level_diff++;
                        }
                    }
                free(A), free(B), free(C0), free(o1), free(o2);
            }
        }
        printf("%s: %d products, worst err / bound %.3f, %d over it; our kernels: %d of %d differ on 2 threads, %d "
               "from avx512\n", impls[v].name, 2 * cases, worst, bad, split_diff, cases, level_diff);
        CHECK(bad == 0, "%s: %d products (%zu shapes x 4 transposes x alpha, beta; alone and on 2 threads), worst "
                        "err / bound %.3f, %d over it", impls[v].name, 2 * cases, sizeof shapes / sizeof shapes[0],
              worst, bad);
        if (impls[v].impl == SGEMM_OWN) {
            CHECK(split_diff == 0, "%s: 2 threads give the bits of one (%d of %d differ)", impls[v].name, split_diff,
                  cases);
            if (impls[v].level == CPU_AVX2 && top >= CPU_AVX512)
                CHECK(level_diff == 0, "%s: the bits of avx512 (%d of %d differ)", impls[v].name, level_diff, cases);
        }
    }
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 2; c++)
                    for (int d = 0; d < 3; d++) free(keep[si][a][b][c][d]);
    cpu_set_level(CPU_AVX512);
    cpu_sgemm_set_impl(SGEMM_AUTO);
    tp_free(tp);
    return test_summary();
}
