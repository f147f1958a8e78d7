/* spectral.c - ref kernels of the spectral group (see ops.h): STFT and
 * ISTFT written as the textbook sums in double precision, one frame at a
 * time, single thread. Every step of torch.stft / torch.istft is spelled
 * out (padding, window placement, DFT, overlap-add, envelope division), so
 * this file is what the FFTW kernels are tested against.
 * The op layer has already resolved the defaults (win_length, hop). */
#include <math.h>

#include "../backend.h"

/* Sample i of the signal row (any stride), extended by the pad mode. */
static double sample(const char *row, int64_t nb, int64_t L, int64_t i, enum pad_mode mode)
{
    if (i < 0 || i >= L) {
        if (mode == PAD_ZERO) return 0.0;
        if (mode == PAD_REPLICATE) i = i < 0 ? 0 : L - 1;
        else i = i < 0 ? -i : 2 * (L - 1) - i; /* reflect, pad < L */
    }
    return *(const float *)(row + i * nb);
}

/* The window zero-padded centrally to n_fft, as torch: it starts at
 * (n_fft - win_length) / 2. NULL window means ones. */
static void padded_window(double *w, const struct tensor *window, const struct stft_params *p)
{
    int left = (p->n_fft - p->win_length) / 2;
    for (int j = 0; j < p->n_fft; j++) w[j] = 0.0;
    for (int j = 0; j < p->win_length; j++)
        w[left + j] = window ? *(const float *)((const char *)window->data + j * window->nb[0])
                             : 1.0;
}

/* cos/sin of 2 pi m / N for m in [0, N): the DFT's exponent jk is reduced
 * mod N so every twiddle is computed from a small angle. */
static void twiddles(double *c, double *s, int n)
{
    for (int m = 0; m < n; m++) {
        c[m] = cos(2.0 * M_PI * m / n);
        s[m] = sin(2.0 * M_PI * m / n);
    }
}

static void ref_stft(struct arena *a, struct tensor *out, const struct tensor *x,
                     const struct tensor *window, const struct stft_params *p)
{
    const int N = p->n_fft, F = N / 2 + 1;
    const int64_t B = x->ndim == 2 ? x->ne[0] : 1, L = x->ne[x->ndim - 1];
    const int64_t nbB = x->ndim == 2 ? x->nb[0] : 0, nbL = x->nb[x->ndim - 1];
    const int64_t frames = out->ne[out->ndim - 2];
    const int64_t pad = p->center ? N / 2 : 0;
    const enum pad_mode mode = p->center ? p->pad_mode : PAD_ZERO;
    const double scale = p->normalized ? 1.0 / sqrt((double)N) : 1.0;
    double *w = arena_alloc_host(a, 4 * (size_t)N * sizeof *w);
    if (!w) return;
    double *c = w + N, *s = c + N, *fr = s + N;
    padded_window(w, window, p);
    twiddles(c, s, N);
    float *o = out->data;
    for (int64_t b = 0; b < B; b++) {
        const char *row = (const char *)x->data + b * nbB;
        for (int64_t f = 0; f < frames; f++) {
            for (int j = 0; j < N; j++)
                fr[j] = sample(row, nbL, L, f * p->hop + j - pad, mode) * w[j];
            /* X[k] = sum_j fr[j] exp(-2 pi i j k / N) */
            for (int k = 0; k < F; k++) {
                double re = 0, im = 0;
                for (int j = 0; j < N; j++) {
                    int m = (int)(((int64_t)j * k) % N);
                    re += fr[j] * c[m];
                    im -= fr[j] * s[m];
                }
                float *dst = o + ((b * F + k) * frames + f) * 2;
                dst[0] = (float)(re * scale);
                dst[1] = (float)(im * scale);
            }
        }
    }
}

static void ref_istft(struct arena *a, struct tensor *out, const struct tensor *spec,
                      const struct tensor *window, const struct stft_params *p)
{
    const int N = p->n_fft, F = N / 2 + 1;
    const int nd = spec->ndim;
    const int64_t B = nd == 4 ? spec->ne[0] : 1, frames = spec->ne[nd - 2];
    const int64_t nbB = nd == 4 ? spec->nb[0] : 0, nbK = spec->nb[nd - 3],
                  nbF = spec->nb[nd - 2], nbC = spec->nb[nd - 1];
    const int64_t full = N + p->hop * (frames - 1);
    const int64_t start = p->center ? N / 2 : 0, len = out->ne[out->ndim - 1];
    /* torch.istft: normalized multiplies the spectrum by sqrt(n_fft), then
     * irfft divides by n_fft */
    const double scale = (p->normalized ? sqrt((double)N) : 1.0) / N;
    double *w = arena_alloc_host(a, (5 * (size_t)N + 2 * (size_t)full) * sizeof *w);
    if (!w) return;
    double *c = w + N, *s = c + N, *re = s + N, *im = re + N;
    double *y = im + N, *env = y + full;
    padded_window(w, window, p);
    twiddles(c, s, N);

    for (int64_t t = 0; t < full; t++) env[t] = 0;
    for (int64_t f = 0; f < frames; f++)
        for (int j = 0; j < N; j++) env[f * p->hop + j] += w[j] * w[j];
    for (int64_t t = start; t < start + len && t < full; t++)
        if (fabs(env[t]) < 1e-11) {
            arena_fail(a, CBX_ERR_INVALID_ARG, "op_istft: window overlap-add envelope %.3g "
                       "< 1e-11 at sample %lld (NOLA condition fails)", env[t],
                       (long long)(t - start));
            return;
        }

    float *o = out->data;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t t = 0; t < full; t++) y[t] = 0;
        for (int64_t f = 0; f < frames; f++) {
            /* the full Hermitian spectrum X[N-k] = conj(X[k]); the real part
             * of the inverse DFT drops the imaginary parts of the DC and
             * Nyquist bins, as pocketfft's c2r (torch.fft.irfft) does */
            for (int k = 0; k < N; k++) {
                int kk = k < F ? k : N - k;
                const char *e = (const char *)spec->data + b * nbB + kk * nbK + f * nbF;
                re[k] = *(const float *)e;
                im[k] = *(const float *)(e + nbC) * (k < F ? 1.0 : -1.0);
            }
            for (int j = 0; j < N; j++) {
                double acc = 0;
                for (int k = 0; k < N; k++) {
                    int m = (int)(((int64_t)j * k) % N);
                    acc += re[k] * c[m] - im[k] * s[m]; /* Re(X[k] exp(+2 pi i j k / N)) */
                }
                y[f * p->hop + j] += acc * scale * w[j];
            }
        }
        for (int64_t t = 0; t < len; t++)
            o[b * len + t] = start + t < full ? (float)(y[start + t] / env[start + t]) : 0.0f;
    }
}

void ref_register_spectral(struct kernels *k)
{
    k->stft = ref_stft;
    k->istft = ref_istft;
}
