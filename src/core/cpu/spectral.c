/* spectral.c - cpu kernels of the spectral group (see ops.h): STFT and
 * ISTFT on FFTW3f real transforms, threaded over (batch, block of frames).
 *
 * Invariants:
 *  1. One r2c and one c2r plan per transform size, made once with
 *     FFTW_ESTIMATE on fftwf_malloc'd arrays and kept for the life of the
 *     process. FFTW's planner is not thread-safe, so plan creation happens
 *     under plan_lock; executing a plan on new arrays is thread-safe.
 *  2. New-array execution is valid only on arrays with the alignment of
 *     the planning arrays and the same out-of-place layout: every array
 *     handed to fftwf_execute_dft_* starts on a 64-byte boundary (arena
 *     memory is 64-byte aligned, and every per-thread or per-frame slice
 *     is a multiple of 16 floats).
 *  3. Scratch comes from the arena before the parallel loop; thread `ith`
 *     uses slice `ith` only.
 * The op layer has already resolved the defaults (win_length, hop). */
#include <fftw3.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "../threadpool.h"
#include "fft_plans.h"

#define BLK 32 /* frames per task: the [k][frame] transpose writes BLK*8 bytes per bin */

static inline int64_t up16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* ---- plan cache -------------------------------------------------------- */

struct plan_pair {
    int n;
    fftwf_plan r2c, c2r;
};

static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;
static struct plan_pair *plans;
static int n_plans, cap_plans;

bool fft_plans_get(int n, fftwf_plan *r2c, fftwf_plan *c2r)
{
    bool ok = false;
    float *re = NULL;
    fftwf_complex *cx = NULL;
    pthread_mutex_lock(&plan_lock);
    for (int i = 0; i < n_plans; i++)
        if (plans[i].n == n) {
            *r2c = plans[i].r2c;
            *c2r = plans[i].c2r;
            ok = true;
            goto cleanup;
        }
    if (n_plans == cap_plans) {
        int cap = cap_plans ? 2 * cap_plans : 8;
        struct plan_pair *p = realloc(plans, (size_t)cap * sizeof *p);
        if (!p) goto cleanup;
        plans = p;
        cap_plans = cap;
    }
    re = fftwf_malloc((size_t)n * sizeof *re);
    cx = fftwf_malloc((size_t)(n / 2 + 1) * sizeof *cx);
    if (!re || !cx) goto cleanup;
    struct plan_pair pp = {n, NULL, NULL};
    pp.r2c = fftwf_plan_dft_r2c_1d(n, re, cx, FFTW_ESTIMATE);
    pp.c2r = fftwf_plan_dft_c2r_1d(n, cx, re, FFTW_ESTIMATE | FFTW_DESTROY_INPUT);
    if (!pp.r2c || !pp.c2r) {
        if (pp.r2c) fftwf_destroy_plan(pp.r2c);
        if (pp.c2r) fftwf_destroy_plan(pp.c2r);
        goto cleanup;
    }
    plans[n_plans++] = pp;
    *r2c = pp.r2c;
    *c2r = pp.c2r;
    ok = true;
cleanup:
    fftwf_free(cx);
    fftwf_free(re);
    pthread_mutex_unlock(&plan_lock);
    return ok;
}

/* ---- shared helpers ---------------------------------------------------- */

/* The window zero-padded centrally to n_fft (torch: offset
 * (n_fft - win_length) / 2); NULL window means ones. */
static void padded_window(float *w, const struct tensor *window, const struct stft_params *p)
{
    int left = (p->n_fft - p->win_length) / 2;
    memset(w, 0, (size_t)p->n_fft * sizeof *w);
    for (int j = 0; j < p->win_length; j++)
        w[left + j] = window ? *(const float *)((const char *)window->data + j * window->nb[0])
                             : 1.0f;
}

static int n_threads(const struct backend *be)
{
    return be->tp ? tp_n_threads(be->tp) : 1;
}

/* ---- stft -------------------------------------------------------------- */

struct stft_job {
    const char *x;
    int64_t nbB, nbL, L, B, frames, nblk, pad;
    int N, F, hop;
    int64_t Fs, per_thread; /* complex stride per frame, floats per thread */
    enum pad_mode mode;
    float scale;
    const float *w;
    float *scratch, *out;
    fftwf_plan plan;
};

static void stft_rows(void *ctx, int64_t begin, int64_t end, int ith)
{
    const struct stft_job *J = ctx;
    float *fr = J->scratch + (int64_t)ith * J->per_thread;
    fftwf_complex *X = (fftwf_complex *)(fr + up16(J->N));
    for (int64_t task = begin; task < end; task++) {
        int64_t b = task / J->nblk, f0 = (task % J->nblk) * BLK;
        int nf = (int)(J->frames - f0 < BLK ? J->frames - f0 : BLK);
        const char *row = J->x + b * J->nbB;
        for (int fi = 0; fi < nf; fi++) {
            int64_t s = (f0 + fi) * J->hop - J->pad;
            if (s >= 0 && s + J->N <= J->L && J->nbL == (int64_t)sizeof(float)) {
                const float *src = (const float *)row + s;
                for (int j = 0; j < J->N; j++) fr[j] = src[j] * J->w[j];
            } else {
                for (int j = 0; j < J->N; j++) {
                    int64_t i = s + j;
                    float v;
                    if (i >= 0 && i < J->L) v = *(const float *)(row + i * J->nbL);
                    else if (J->mode == PAD_ZERO) v = 0.0f;
                    else {
                        if (J->mode == PAD_REPLICATE) i = i < 0 ? 0 : J->L - 1;
                        else i = i < 0 ? -i : 2 * (J->L - 1) - i;
                        v = *(const float *)(row + i * J->nbL);
                    }
                    fr[j] = v * J->w[j];
                }
            }
            fftwf_execute_dft_r2c(J->plan, fr, X + fi * J->Fs);
        }
        /* [frame][k] -> out[b][k][frame] */
        for (int k = 0; k < J->F; k++) {
            float *dst = J->out + ((b * J->F + k) * J->frames + f0) * 2;
            for (int fi = 0; fi < nf; fi++) {
                dst[2 * fi] = X[fi * J->Fs + k][0] * J->scale;
                dst[2 * fi + 1] = X[fi * J->Fs + k][1] * J->scale;
            }
        }
    }
}

static void cpu_stft(struct arena *a, struct tensor *out, const struct tensor *x,
                     const struct tensor *window, const struct stft_params *p)
{
    const struct backend *be = arena_backend(a);
    struct stft_job J = {0};
    fftwf_plan r2c, c2r;
    if (!fft_plans_get(p->n_fft, &r2c, &c2r)) {
        arena_fail(a, CBX_ERR_NOMEM, "op_stft: cannot plan an FFT of size %d", p->n_fft);
        return;
    }
    J.x = x->data;
    J.B = x->ndim == 2 ? x->ne[0] : 1;
    J.nbB = x->ndim == 2 ? x->nb[0] : 0;
    J.L = x->ne[x->ndim - 1];
    J.nbL = x->nb[x->ndim - 1];
    J.frames = out->ne[out->ndim - 2];
    J.nblk = (J.frames + BLK - 1) / BLK;
    J.N = p->n_fft;
    J.F = p->n_fft / 2 + 1;
    J.hop = p->hop;
    J.pad = p->center ? p->n_fft / 2 : 0;
    J.mode = p->center ? p->pad_mode : PAD_ZERO;
    J.scale = p->normalized ? (float)(1.0 / sqrt((double)p->n_fft)) : 1.0f;
    J.Fs = up16(2 * (int64_t)J.F) / 2;
    J.per_thread = up16(J.N) + BLK * J.Fs * 2;
    J.out = out->data;
    J.plan = r2c;
    int nt = n_threads(be);
    float *w = arena_alloc_host(a, (size_t)up16(J.N) * sizeof *w);
    J.scratch = arena_alloc_host(a, (size_t)(nt * J.per_thread) * sizeof(float));
    if (!w || !J.scratch) return;
    padded_window(w, window, p);
    J.w = w;
    tp_parallel_for(be->tp, J.B * J.nblk, 1, stft_rows, &J);
}

/* ---- istft ------------------------------------------------------------- */

struct istft_job {
    const char *spec;
    int64_t nbB, nbK, nbF, nbC, B, frames, nblk, full, start, len, chunk, nchunk;
    int N, F, hop;
    int64_t Fs, Ns, per_thread;
    float scale;
    const float *w, *env;
    float *scratch, *fb, *out;
    fftwf_plan plan;
};

/* Phase 1: every frame's windowed inverse transform into fb[b][f][0:N]. */
static void istft_frames(void *ctx, int64_t begin, int64_t end, int ith)
{
    const struct istft_job *J = ctx;
    fftwf_complex *X = (fftwf_complex *)(J->scratch + (int64_t)ith * J->per_thread);
    for (int64_t task = begin; task < end; task++) {
        int64_t b = task / J->nblk, f0 = (task % J->nblk) * BLK;
        int nf = (int)(J->frames - f0 < BLK ? J->frames - f0 : BLK);
        const char *base = J->spec + b * J->nbB + f0 * J->nbF;
        for (int k = 0; k < J->F; k++)
            for (int fi = 0; fi < nf; fi++) {
                const char *e = base + k * J->nbK + fi * J->nbF;
                X[fi * J->Fs + k][0] = *(const float *)e;
                X[fi * J->Fs + k][1] = *(const float *)(e + J->nbC);
            }
        for (int fi = 0; fi < nf; fi++) {
            float *y = J->fb + (b * J->frames + f0 + fi) * J->Ns;
            fftwf_execute_dft_c2r(J->plan, X + fi * J->Fs, y);
            for (int j = 0; j < J->N; j++) y[j] = y[j] * J->scale * J->w[j];
        }
    }
}

/* Phase 2: overlap-add (frames in increasing order) and envelope division
 * for a chunk of output samples. */
static void istft_ola(void *ctx, int64_t begin, int64_t end, int ith)
{
    (void)ith;
    const struct istft_job *J = ctx;
    for (int64_t task = begin; task < end; task++) {
        int64_t b = task / J->nchunk, t0 = (task % J->nchunk) * J->chunk;
        int64_t t1 = t0 + J->chunk < J->len ? t0 + J->chunk : J->len;
        float *o = J->out + b * J->len;
        const float *fb = J->fb + b * J->frames * J->Ns;
        for (int64_t t = t0; t < t1; t++) {
            int64_t q = J->start + t;
            if (q >= J->full) { o[t] = 0.0f; continue; }
            int64_t f_hi = q / J->hop < J->frames - 1 ? q / J->hop : J->frames - 1;
            int64_t f_lo = q >= J->N ? (q - J->N) / J->hop + 1 : 0;
            float acc = 0.0f;
            for (int64_t f = f_lo; f <= f_hi; f++) acc += fb[f * J->Ns + (q - f * J->hop)];
            o[t] = acc / J->env[q];
        }
    }
}

static void cpu_istft(struct arena *a, struct tensor *out, const struct tensor *spec,
                      const struct tensor *window, const struct stft_params *p)
{
    const struct backend *be = arena_backend(a);
    struct istft_job J = {0};
    fftwf_plan r2c, c2r;
    if (!fft_plans_get(p->n_fft, &r2c, &c2r)) {
        arena_fail(a, CBX_ERR_NOMEM, "op_istft: cannot plan an FFT of size %d", p->n_fft);
        return;
    }
    int nd = spec->ndim;
    J.spec = spec->data;
    J.B = nd == 4 ? spec->ne[0] : 1;
    J.nbB = nd == 4 ? spec->nb[0] : 0;
    J.nbK = spec->nb[nd - 3];
    J.nbF = spec->nb[nd - 2];
    J.nbC = spec->nb[nd - 1];
    J.frames = spec->ne[nd - 2];
    J.nblk = (J.frames + BLK - 1) / BLK;
    J.N = p->n_fft;
    J.F = p->n_fft / 2 + 1;
    J.hop = p->hop;
    J.full = J.N + J.hop * (J.frames - 1);
    J.start = p->center ? J.N / 2 : 0;
    J.len = out->ne[out->ndim - 1];
    J.chunk = 4096;
    J.nchunk = (J.len + J.chunk - 1) / J.chunk;
    /* torch: normalized multiplies the spectrum by sqrt(n_fft); irfft
     * divides by n_fft (FFTW's c2r is unnormalised) */
    J.scale = (float)((p->normalized ? sqrt((double)J.N) : 1.0) / J.N);
    J.Fs = up16(2 * (int64_t)J.F) / 2;
    J.Ns = up16(J.N);
    J.per_thread = BLK * J.Fs * 2;
    J.plan = c2r;
    int nt = n_threads(be);
    float *w = arena_alloc_host(a, (size_t)J.Ns * sizeof *w);
    float *env = arena_alloc_host(a, (size_t)J.full * sizeof *env);
    J.scratch = arena_alloc_host(a, (size_t)(nt * J.per_thread) * sizeof(float));
    J.fb = arena_alloc_host(a, (size_t)(J.B * J.frames * J.Ns) * sizeof(float));
    if (!w || !env || !J.scratch || !J.fb) return;
    padded_window(w, window, p);
    J.w = w;

    /* window-square envelope, overlap-added in frame order as torch */
    memset(env, 0, (size_t)J.full * sizeof *env);
    for (int64_t f = 0; f < J.frames; f++)
        for (int j = 0; j < J.N; j++) env[f * J.hop + j] += w[j] * w[j];
    for (int64_t t = J.start; t < J.start + J.len && t < J.full; t++)
        if (fabsf(env[t]) < 1e-11f) {
            arena_fail(a, CBX_ERR_INVALID_ARG, "op_istft: window overlap-add envelope %.3g "
                       "< 1e-11 at sample %lld (NOLA condition fails)", (double)env[t],
                       (long long)(t - J.start));
            return;
        }
    J.env = env;
    J.out = out->data;
    tp_parallel_for(be->tp, J.B * J.nblk, 1, istft_frames, &J);
    tp_parallel_for(be->tp, J.B * J.nchunk, 1, istft_ola, &J);
}

void cpu_register_spectral(struct kernels *k)
{
    k->stft = cpu_stft;
    k->istft = cpu_istft;
}
