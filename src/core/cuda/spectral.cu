/* spectral.cu - CUDA kernels of the spectral group (see ops.h,
 * ops_spectral.c): STFT and ISTFT as direct DFTs in double precision, the
 * same sums as ref/spectral.c (twiddles from a table of cos/sin(2 pi m/N)
 * with m = j k mod N, so every term equals the reference's term).
 *
 * The window (a small device vector) is read back to build the n_fft
 * padded window and, for the ISTFT, the overlap-add envelope on the host,
 * where the NOLA check fails the arena with the reference's message; both
 * tables go up with the twiddles. One block per (frame, batch row) holds
 * the frame in shared memory; the ISTFT writes each frame's windowed
 * inverse to a frames buffer and a second kernel overlap-adds it in frame
 * order and divides by the envelope. */
#include <math.h>
#include <string.h>

#include "cuda_common.h"

#define SP_THREADS 256

/* threads of a per-frame block: n_fft rounded up to a warp, at most 256 */
static unsigned sp_threads(int N)
{
    return N >= SP_THREADS ? SP_THREADS : (unsigned)((N + 31) / 32 * 32);
}

/* host tables: w[N] (padded window), c[N], s[N]; NULL on failure */
static double *host_tables(struct arena *a, const struct tensor *window,
                           const struct stft_params *p, size_t extra)
{
    const int N = p->n_fft;
    double *t = (double *)arena_alloc_host(a, (3 * (size_t)N + extra) * sizeof *t);
    float *wh = window ? (float *)arena_alloc_host(a, (size_t)p->win_length * 4) : NULL;
    if (!t || (window && !wh)) return NULL;
    if (window) {
        /* window is 1-d F32 of win_length, any stride: copy it compactly */
        if (window->nb[0] == 4) {
            if (!cu_download(a, wh, window->data, (size_t)p->win_length * 4)) return NULL;
        } else {
            for (int j = 0; j < p->win_length; j++)
                if (!cu_download(a, wh + j, (const char *)window->data + j * window->nb[0], 4))
                    return NULL;
        }
    }
    double *w = t, *c = t + N, *s = c + N;
    const int left = (N - p->win_length) / 2;
    for (int j = 0; j < N; j++) w[j] = 0.0;
    for (int j = 0; j < p->win_length; j++) w[left + j] = window ? wh[j] : 1.0;
    for (int m = 0; m < N; m++) {
        c[m] = cos(2.0 * M_PI * m / N);
        s[m] = sin(2.0 * M_PI * m / N);
    }
    return t;
}

static bool smem_ok(struct arena *a, const void *fn, size_t smem, const char *what)
{
    if (smem <= 48 * 1024) return true;
    if (smem > 200 * 1024) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "%s: n_fft too large for backend cuda", what);
        return false;
    }
    return cu_ok(a, cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                 what);
}

/* ---- stft ---------------------------------------------------------------- */

__global__ static void k_stft(float *out, struct tv x, const double *tab, int N, int hop,
                              int64_t pad, int mode, int64_t frames, double scale)
{
    extern __shared__ double fr[];
    const int64_t f = blockIdx.x, b = blockIdx.y, L = x.ne[3];
    const int F = N / 2 + 1;
    const double *w = tab, *c = tab + N, *s = c + N;
    const char *row = x.p + b * x.nb[2];
    for (int j = threadIdx.x; j < N; j += blockDim.x) {
        int64_t i = f * hop + j - pad;
        double v;
        if (i < 0 || i >= L) {
            if (mode == PAD_ZERO) v = 0.0;
            else {
                if (mode == PAD_REPLICATE) i = i < 0 ? 0 : L - 1;
                else i = i < 0 ? -i : 2 * (L - 1) - i;
                v = *(const float *)(row + i * x.nb[3]);
            }
        } else {
            v = *(const float *)(row + i * x.nb[3]);
        }
        fr[j] = v * w[j];
    }
    __syncthreads();
    for (int k = threadIdx.x; k < F; k += blockDim.x) {
        double re = 0, im = 0;
        for (int j = 0; j < N; j++) {
            const int m = (int)(((int64_t)j * k) % N);
            re += fr[j] * c[m];
            im -= fr[j] * s[m];
        }
        float *dst = out + ((b * F + k) * frames + f) * 2;
        dst[0] = (float)(re * scale);
        dst[1] = (float)(im * scale);
    }
}

static void cuda_stft(struct arena *a, struct tensor *out, const struct tensor *x,
                      const struct tensor *window, const struct stft_params *p)
{
    const int N = p->n_fft;
    const struct tv xv = tv_of(x);
    const int64_t B = xv.ne[2], frames = out->ne[out->ndim - 2];
    if (B == 0 || frames == 0) return;
    if (frames > INT32_MAX || B > 65535) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "stft: %lld frames x %lld rows", (long long)frames,
                   (long long)B);
        return;
    }
    double *t = host_tables(a, window, p, 0);
    if (!t) return;
    const double *dt = (const double *)cu_upload(a, t, 3 * (size_t)N * sizeof *t);
    const size_t smem = (size_t)N * sizeof(double);
    if (!dt || !smem_ok(a, (const void *)k_stft, smem, "stft")) return;
    const int64_t pad = p->center ? N / 2 : 0;
    const int mode = p->center ? (int)p->pad_mode : (int)PAD_ZERO;
    const double scale = p->normalized ? 1.0 / sqrt((double)N) : 1.0;
    dim3 grid((unsigned)frames, (unsigned)B);
    k_stft<<<grid, sp_threads(N), smem, cuda_of(a)->st>>>((float *)out->data, xv, dt, N, p->hop, pad,
                                                       mode, frames, scale);
    cu_launched(a, "stft");
}

/* ---- istft ------------------------------------------------------------------ */

__global__ static void k_istft_frames(double *fb, struct tv sp, const double *tab, int N,
                                      int64_t frames, double scale)
{
    extern __shared__ double sh[];
    double *re = sh, *im = sh + N;
    const int64_t f = blockIdx.x, b = blockIdx.y;
    const int F = N / 2 + 1;
    const double *w = tab, *c = tab + N, *s = c + N;
    for (int k = threadIdx.x; k < N; k += blockDim.x) {
        const int kk = k < F ? k : N - k;
        const char *e = sp.p + b * sp.nb[0] + kk * sp.nb[1] + f * sp.nb[2];
        re[k] = *(const float *)e;
        im[k] = *(const float *)(e + sp.nb[3]) * (k < F ? 1.0 : -1.0);
    }
    __syncthreads();
    double *dst = fb + (b * frames + f) * N;
    for (int j = threadIdx.x; j < N; j += blockDim.x) {
        double acc = 0;
        for (int k = 0; k < N; k++) {
            const int m = (int)(((int64_t)j * k) % N);
            acc += re[k] * c[m] - im[k] * s[m];
        }
        dst[j] = acc * scale * w[j];
    }
}

__global__ static void k_istft_ola(float *out, const double *fb, const double *env, int N,
                                   int hop, int64_t frames, int64_t full, int64_t start,
                                   int64_t len, int64_t n)
{
    CU_FOR(e, n) {
        const int64_t b = e / len, t = e % len, idx = start + t;
        if (idx >= full) {
            out[e] = 0.0f;
            continue;
        }
        /* frames f with f*hop <= idx < f*hop + N, in increasing order */
        int64_t f0 = idx >= N ? (idx - N) / hop + 1 : 0;
        while (f0 > 0 && (f0 - 1) * hop + N > idx) f0--;
        while (f0 * hop + N <= idx) f0++;
        double y = 0;
        for (int64_t f = f0; f < frames && f * hop <= idx; f++)
            y += fb[(b * frames + f) * N + (idx - f * hop)];
        out[e] = (float)(y / env[idx]);
    }
}

static void cuda_istft(struct arena *a, struct tensor *out, const struct tensor *spec,
                       const struct tensor *window, const struct stft_params *p)
{
    const int N = p->n_fft;
    const struct tv sv = tv_of(spec);
    const int64_t B = sv.ne[0], frames = sv.ne[2];
    const int64_t full = N + (int64_t)p->hop * (frames - 1);
    const int64_t start = p->center ? N / 2 : 0, len = out->ne[out->ndim - 1];
    if (B == 0 || len == 0) return;
    if (frames > INT32_MAX || B > 65535) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "istft: %lld frames x %lld rows", (long long)frames,
                   (long long)B);
        return;
    }
    double *t = host_tables(a, window, p, (size_t)full);
    if (!t) return;
    const double *w = t;
    double *env = t + 3 * (size_t)N;
    for (int64_t i = 0; i < full; i++) env[i] = 0;
    for (int64_t f = 0; f < frames; f++)
        for (int j = 0; j < N; j++) env[f * p->hop + j] += w[j] * w[j];
    for (int64_t i = start; i < start + len && i < full; i++)
        if (fabs(env[i]) < 1e-11) {
            arena_fail(a, CBX_ERR_INVALID_ARG, "op_istft: window overlap-add envelope %.3g "
                       "< 1e-11 at sample %lld (NOLA condition fails)", env[i],
                       (long long)(i - start));
            return;
        }
    const double *dt = (const double *)cu_upload(a, t, (3 * (size_t)N + (size_t)full) * sizeof *t);
    double *fb = (double *)arena_alloc(a, (size_t)(B * frames) * (size_t)N * sizeof(double));
    const size_t smem = 2 * (size_t)N * sizeof(double);
    if (!dt || !fb || !smem_ok(a, (const void *)k_istft_frames, smem, "istft")) return;
    const double scale = (p->normalized ? sqrt((double)N) : 1.0) / N;
    cudaStream_t st = cuda_of(a)->st;
    dim3 grid((unsigned)frames, (unsigned)B);
    k_istft_frames<<<grid, sp_threads(N), smem, st>>>(fb, sv, dt, N, frames, scale);
    if (!cu_launched(a, "istft frames")) return;
    const int64_t n = B * len;
    k_istft_ola<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, st>>>(
        (float *)out->data, fb, dt + 3 * N, N, p->hop, frames, full, start, len, n);
    cu_launched(a, "istft overlap-add");
}

void cuda_register_spectral(struct kernels *k)
{
    k->stft = cuda_stft;
    k->istft = cuda_istft;
}
