/* mel.c - mel filterbanks (librosa.filters.mel, librosa 0.11.0) and the
 * S3Gen prompt mel (chatterbox/models/s3gen/utils/mel.py mel_spectrogram,
 * Matcha-TTS / CosyVoice style; spec/voice.md §6). */
#include "voice/mel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/backend.h"
#include "core/ops.h"
#include "core/window.h"

/* librosa.core.convert.hz_to_mel / mel_to_hz for one value, float64. */
static double hz_to_mel(double f, int htk)
{
    if (htk) return 2595.0 * log10(1.0 + f / 700.0);
    const double f_min = 0.0, f_sp = 200.0 / 3;
    double mels = (f - f_min) / f_sp;
    const double min_log_hz = 1000.0;
    const double min_log_mel = (min_log_hz - f_min) / f_sp;
    const double logstep = log(6.4) / 27.0;
    if (f >= min_log_hz) mels = min_log_mel + log(f / min_log_hz) / logstep;
    return mels;
}

static double mel_to_hz(double m, int htk)
{
    if (htk) return 700.0 * (pow(10.0, m / 2595.0) - 1.0);
    const double f_min = 0.0, f_sp = 200.0 / 3;
    double freqs = f_min + f_sp * m;
    const double min_log_hz = 1000.0;
    const double min_log_mel = (min_log_hz - f_min) / f_sp;
    const double logstep = log(6.4) / 27.0;
    if (m >= min_log_mel) freqs = min_log_hz * exp(logstep * (m - min_log_mel));
    return freqs;
}

void mel_filters_librosa(int sr, int n_fft, int n_mels, double fmin, double fmax,
                         int htk, float *out)
{
    if (fmax <= 0) fmax = sr / 2.0;
    int n_freq = n_fft / 2 + 1;
    /* fft_frequencies = np.fft.rfftfreq(n_fft, 1/sr): k * (1 / (n * d)) */
    double d = 1.0 / sr, val = 1.0 / (n_fft * d);
    /* mel_frequencies(n_mels + 2): np.linspace(min_mel, max_mel, n) is
     * i * step + start with the last point set to stop exactly */
    int n_pts = n_mels + 2;
    double min_mel = hz_to_mel(fmin, htk), max_mel = hz_to_mel(fmax, htk);
    double step = (max_mel - min_mel) / (n_pts - 1);
    double *mel_f = malloc((size_t)n_pts * sizeof *mel_f);
    if (!mel_f) { /* no status to return: leave a zero bank */
        memset(out, 0, (size_t)n_mels * n_freq * sizeof *out);
        return;
    }
    for (int i = 0; i < n_pts; i++) {
        double m = i == n_pts - 1 ? max_mel : i * step + min_mel;
        mel_f[i] = mel_to_hz(m, htk);
    }
    for (int i = 0; i < n_mels; i++) {
        double fdiff_lo = mel_f[i + 1] - mel_f[i], fdiff_hi = mel_f[i + 2] - mel_f[i + 1];
        /* norm="slaney": enorm = 2 / (mel_f[i+2] - mel_f[i]) */
        double enorm = 2.0 / (mel_f[i + 2] - mel_f[i]);
        for (int k = 0; k < n_freq; k++) {
            double fft_f = k * val;
            /* ramps = mel_f[:, None] - fftfreqs; lower = -ramps[i] / fdiff[i],
             * upper = ramps[i + 2] / fdiff[i + 1] */
            double lower = -(mel_f[i] - fft_f) / fdiff_lo;
            double upper = (mel_f[i + 2] - fft_f) / fdiff_hi;
            double w = lower < upper ? lower : upper;
            if (!(w > 0.0)) w = 0.0; /* np.maximum(0, .) */
            /* weights[i] = ... stores float32; `weights *= enorm[:, None]`
             * multiplies in float64 and rounds back to float32 */
            float w32 = (float)w;
            out[(size_t)i * n_freq + k] = (float)((double)w32 * enorm);
        }
    }
    free(mel_f);
}

/* mel_spectrogram(y, n_fft=1920, num_mels=80, sampling_rate=24000,
 * hop_size=480, win_size=1920, fmin=0, fmax=8000, center=False) */
cbx_status s3gen_prompt_mel(const struct backend *be, const float *wav24, int64_t n,
                            float **mel, int64_t *T, char *err)
{
    enum { N_FFT = 1920, HOP = 480, N_MELS = 80, SR = 24000, N_FREQ = N_FFT / 2 + 1 };
    const int pad = (N_FFT - HOP) / 2; /* 720 */
    float *basis = NULL, *window = NULL, *res = NULL;
    struct arena *a = NULL;
    cbx_status rc = CBX_OK;
    *mel = NULL;
    *T = 0;
    if (n <= pad) /* reflect padding needs pad < length, as torch */
        return err_setf(err, CBX_ERR_INVALID_ARG,
                        "s3gen prompt mel: %lld samples at 24 kHz, need more than %d",
                        (long long)n, pad);
    basis = malloc((size_t)N_MELS * N_FREQ * sizeof *basis);
    window = malloc(N_FFT * sizeof *window);
    a = arena_create(be, 0);
    if (!basis || !window || !a) {
        rc = err_setf(err, CBX_ERR_NOMEM, "s3gen prompt mel: out of memory");
        goto cleanup;
    }
    mel_filters_librosa(SR, N_FFT, N_MELS, 0.0, 8000.0, 0, basis);
    window_hann(window, N_FFT, true); /* torch.hann_window(1920) */

    struct tensor *y = op_from_host(a, TYPE_F32, 1, (int64_t[]){n}, wav24);
    struct tensor *w = op_from_host(a, TYPE_F32, 1, (int64_t[]){N_FFT}, window);
    struct tensor *mel_basis = op_from_host(a, TYPE_F32, 2, (int64_t[]){N_MELS, N_FREQ}, basis);
    /* F.pad(y, (720, 720), mode="reflect") */
    y = op_pad1d(a, y, pad, pad, PAD_REFLECT, 0.0f);                /* [n + 1440] */
    struct stft_params sp = {.n_fft = N_FFT, .hop = HOP, .win_length = N_FFT,
                             .center = false, .pad_mode = PAD_REFLECT};
    struct tensor *spec = op_stft(a, y, w, &sp);                   /* [961, T, 2] */
    spec = op_cont(a, op_permute(a, spec, (int[]){1, 0, 2}));      /* [T, 961, 2] */
    int64_t frames = spec ? spec->ne[0] : 0;
    /* torch.sqrt(spec.pow(2).sum(-1) + 1e-9) */
    struct tensor *mag = op_reduce(a, op_unary(a, spec, UN_SQR, 0, 0), RED_SUM); /* [T, 961, 1] */
    mag = op_reshape(a, mag, 2, (int64_t[]){frames, N_FREQ});
    mag = op_unary(a, op_unary(a, mag, UN_SCALE, 1.0f, 1e-9f), UN_SQRT, 0, 0);
    /* torch.matmul(mel_basis, spec), transposed: [T, 961] @ [80, 961]^T */
    struct tensor *m = op_linear(a, mag, mel_basis, NULL);         /* [T, 80] */
    /* spectral_normalize_torch: log(clamp(x, min=1e-5) * 1) */
    m = op_unary(a, op_unary(a, m, UN_CLAMP, 1e-5f, INFINITY), UN_LOG, 0, 0);
    if ((rc = arena_status(a)) != CBX_OK) {
        err_setf(err, rc, "s3gen prompt mel: %s", arena_errmsg(a));
        goto cleanup;
    }
    res = malloc((size_t)frames * N_MELS * sizeof *res);
    if (!res) {
        rc = err_setf(err, CBX_ERR_NOMEM, "s3gen prompt mel: out of memory (%lld frames)",
                      (long long)frames);
        goto cleanup;
    }
    if ((rc = tensor_to_host(m, res)) != CBX_OK) {
        err_setf(err, rc, "s3gen prompt mel: device read-back failed");
        goto cleanup;
    }
    *mel = res;
    *T = frames;
    res = NULL;
cleanup:
    free(res);
    arena_free(a);
    free(window);
    free(basis);
    return rc;
}
