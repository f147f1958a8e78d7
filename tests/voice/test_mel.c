/* test_mel.c - voice/mel: the librosa filterbank against librosa's own
 * output (data/buffers/s3tokenizer_mel_filters_128x201.npy, librosa 0.11.0,
 * the S3Tokenizer `_mel_filters` buffer), structural properties of the
 * 24 kHz bank, and s3gen_prompt_mel against a direct double-precision
 * evaluation of its formula on a short random signal (cpu and ref). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/window.h"
#include "io/npy.h"
#include "testutil.h"
#include "voice/mel.h"

static void test_librosa_bank(void)
{
    char err[ERR_MAX];
    struct npy want = {0};
    cbx_status rc = io_npy_read(CBX_SOURCE_DIR "/data/buffers/s3tokenizer_mel_filters_128x201.npy",
                                &want, err);
    CHECK(rc == CBX_OK, "read librosa bank: %s", rc == CBX_OK ? "ok" : err);
    if (rc != CBX_OK) return;
    CHECK(want.type == TYPE_F32 && want.ndim == 2 && want.ne[0] == 128 && want.ne[1] == 201,
          "librosa bank is f32 [128, 201]");
    float *got = malloc(128 * 201 * sizeof *got);
    mel_filters_librosa(16000, 400, 128, 0.0, 8000.0, 0, got);
    check_close("mel_filters_librosa(16000, 400, 128) vs librosa", got, want.data, 128 * 201,
                0, 1e-7);
    int differ = 0;
    for (int i = 0; i < 128 * 201; i++) differ += got[i] != ((float *)want.data)[i];
    printf("  %d of %d values differ bitwise\n", differ, 128 * 201);
    CHECK(differ <= 128 * 201 / 1000, "at most 0.1%% of the bank differs in the last bit");
    /* fmax <= 0 means sr / 2 */
    float *got2 = malloc(128 * 201 * sizeof *got2);
    mel_filters_librosa(16000, 400, 128, 0.0, 0.0, 0, got2);
    CHECK(memcmp(got, got2, 128 * 201 * sizeof *got) == 0, "fmax 0 = sr/2");
    free(got2);
    free(got);
    io_npy_free(&want);
}

/* The 80-band 24 kHz bank of the prompt mel: Slaney area normalisation
 * makes every triangle integrate (in Hz) to about 1 ... checked as
 * sum_k w[k] * bin_width ~ 1 for filters wide enough to be sampled well,
 * and nothing above fmax 8000 Hz. */
static void test_prompt_bank(void)
{
    enum { NM = 80, NF = 961 };
    float *b = malloc((size_t)NM * NF * sizeof *b);
    mel_filters_librosa(24000, 1920, NM, 0.0, 8000.0, 0, b);
    double bw = 24000.0 / 1920; /* 12.5 Hz */
    double worst = 0;
    int above = 0;
    for (int m = 0; m < NM; m++) {
        double s = 0;
        for (int k = 0; k < NF; k++) {
            s += b[m * NF + k];
            if (k * bw > 8000.0 && b[m * NF + k] != 0) above++;
        }
        if (m >= 4) worst = fmax(worst, fabs(s * bw - 1.0));
    }
    printf("  24 kHz bank: max |area - 1| = %.3g (filters 4..79), %d weights above fmax\n",
           worst, above);
    CHECK(worst < 0.02 && above == 0, "24 kHz bank areas ~1, zero above fmax");
    /* htk scale gives a different bank (the flag is honoured) */
    float *h = malloc((size_t)NM * NF * sizeof *h);
    mel_filters_librosa(24000, 1920, NM, 0.0, 8000.0, 1, h);
    CHECK(memcmp(b, h, (size_t)NM * NF * sizeof *b) != 0, "htk bank differs from slaney");
    free(h);
    free(b);
}

/* Direct evaluation of mel.py's mel_spectrogram in double. */
static void naive_prompt_mel(const float *y, int n, double *out /* [T, 80] */, int *T)
{
    enum { N_FFT = 1920, HOP = 480, PAD = 720, NF = 961, NM = 80 };
    int L = n + 2 * PAD;
    double *yp = malloc((size_t)L * sizeof *yp);
    for (int i = 0; i < L; i++) {
        int j = i - PAD;
        if (j < 0) j = -j;
        if (j >= n) j = 2 * (n - 1) - j;
        yp[i] = y[j];
    }
    float *win = malloc(N_FFT * sizeof *win), *bank = malloc((size_t)NM * NF * sizeof *bank);
    window_hann(win, N_FFT, true);
    mel_filters_librosa(24000, N_FFT, NM, 0, 8000, 0, bank);
    *T = 1 + (L - N_FFT) / HOP;
    double *mag = malloc(NF * sizeof *mag);
    for (int t = 0; t < *T; t++) {
        for (int k = 0; k < NF; k++) {
            double re = 0, im = 0;
            for (int i = 0; i < N_FFT; i++) {
                double v = yp[t * HOP + i] * win[i], ph = -2 * M_PI * (double)k * i / N_FFT;
                re += v * cos(ph);
                im += v * sin(ph);
            }
            mag[k] = sqrt(re * re + im * im + 1e-9);
        }
        for (int m = 0; m < NM; m++) {
            double s = 0;
            for (int k = 0; k < NF; k++) s += bank[m * NF + k] * mag[k];
            out[t * NM + m] = log(fmax(s, 1e-5));
        }
    }
    free(mag);
    free(bank);
    free(win);
    free(yp);
}

static void test_prompt_mel(const struct backend *be, const char *name)
{
    enum { N = 2500 }; /* 5 frames; not a multiple of the hop */
    float *y = malloc(N * sizeof *y);
    fill_uniform(y, N, -0.5f, 0.5f, 7);
    for (int i = 0; i < 200; i++) y[i] *= 1e-4f; /* quiet start: hits the 1e-5 clamp */
    double *want = malloc(8 * 80 * sizeof *want);
    int Tw = 0;
    naive_prompt_mel(y, N, want, &Tw);
    float *wantf = malloc((size_t)Tw * 80 * sizeof *wantf);
    for (int i = 0; i < Tw * 80; i++) wantf[i] = (float)want[i];
    float *mel = NULL;
    int64_t T = 0;
    char err[ERR_MAX], what[96];
    cbx_status rc = s3gen_prompt_mel(be, y, N, &mel, &T, err);
    CHECK(rc == CBX_OK, "%s s3gen_prompt_mel: %s", name, rc == CBX_OK ? "ok" : err);
    CHECK(T == N / 480 && T == Tw, "%s frames %lld = n // 480 = %d", name, (long long)T, N / 480);
    if (rc == CBX_OK && T == Tw) {
        snprintf(what, sizeof what, "%s s3gen_prompt_mel vs double DFT", name);
        check_close(what, mel, wantf, (size_t)Tw * 80, 0, 1e-5);
    }
    free(mel);
    /* too short for the reflect padding */
    rc = s3gen_prompt_mel(be, y, 720, &mel, &T, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && mel == NULL, "%s 720 samples rejected: %s", name, err);
    free(wantf);
    free(want);
    free(y);
}

int main(void)
{
    test_librosa_bank();
    test_prompt_bank();
    struct backend *cpu = backend_cpu_create(2);
    CHECK(cpu != NULL, "cpu backend");
    if (cpu) test_prompt_mel(cpu, "cpu");
    test_prompt_mel(backend_ref(), "ref");
    backend_cpu_free(cpu);
    return test_summary();
}
