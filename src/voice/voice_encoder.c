/* voice_encoder.c - VoiceEncoder speaker embedding (256-d) for T3.
 * Ports chatterbox models/voice_encoder/voice_encoder.py
 * (VoiceEncoder.embeds_from_wavs -> embeds_from_mels -> inference ->
 * forward, get_frame_step, get_num_wins), melspec.py (melspectrogram,
 * _stft) and librosa.effects.trim (librosa 0.11.0), chatterbox 0.1.7;
 * spec/voice.md §3. One utterance at 16 kHz (no resampling). */
#include "voice/voice_encoder.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/weights.h"
#include "core/window.h"
#include "voice/mel.h"

/* VoiceEncConfig */
#define VE_SR 16000
#define VE_N_FFT 400
#define VE_HOP 160
#define VE_HIDDEN 256
#define VE_N_LAYERS 3
#define VE_RATE 1.3         /* embeds_from_wavs: kwargs["rate"] = 1.3 */
#define VE_MIN_COVERAGE 0.8 /* inference() default */
#define VE_TRIM_TOP_DB 20.0
#define TRIM_FRAME 2048     /* librosa.effects.trim defaults */
#define TRIM_HOP 512

struct ve_lstm_layer {
    const struct tensor *w_ih, *w_hh, *b_ih, *b_hh;
};

struct voice_encoder {
    struct ve_lstm_layer lstm[VE_N_LAYERS];
    const struct tensor *proj_w, *proj_b;
    struct weight_set *ws; /* every weight, placed on the load's backend */
    float mel_basis[VE_N_MELS * (VE_N_FFT / 2 + 1)]; /* librosa.filters.mel */
    float window[VE_N_FFT];                          /* periodic Hann */
};

cbx_status ve_load(struct voice_encoder **out, const struct weights *w, const struct backend *be, char *err)
{
    *out = NULL;
    struct voice_encoder *ve = calloc(1, sizeof *ve);
    if (!ve || !(ve->ws = weight_set_create(be))) {
        free(ve);
        return err_setf(err, CBX_ERR_NOMEM, "ve: out of memory");
    }
    cbx_status rc = CBX_OK;
    const int64_t g = 4 * VE_HIDDEN;
    for (int l = 0; l < VE_N_LAYERS; l++) {
        int64_t in = l == 0 ? VE_N_MELS : VE_HIDDEN;
        struct ve_lstm_layer *L = &ve->lstm[l];
        L->w_ih = weights_getf(w, &rc, err, 2, (int64_t[]){g, in}, "lstm.weight_ih_l%d", l);
        L->w_hh = weights_getf(w, &rc, err, 2, (int64_t[]){g, VE_HIDDEN}, "lstm.weight_hh_l%d", l);
        L->b_ih = weights_getf(w, &rc, err, 1, (int64_t[]){g}, "lstm.bias_ih_l%d", l);
        L->b_hh = weights_getf(w, &rc, err, 1, (int64_t[]){g}, "lstm.bias_hh_l%d", l);
    }
    ve->proj_w = weights_get(w, "proj.weight", 2, (int64_t[]){VE_EMBED, VE_HIDDEN}, &rc, err);
    ve->proj_b = weights_get(w, "proj.bias", 1, (int64_t[]){VE_EMBED}, &rc, err);
    /* biases are never quantised (quantisation policy); the ops want f32 */
    const struct tensor *biases[2 * VE_N_LAYERS + 1];
    for (int l = 0; rc == CBX_OK && l < VE_N_LAYERS; l++) {
        biases[2 * l] = ve->lstm[l].b_ih;
        biases[2 * l + 1] = ve->lstm[l].b_hh;
    }
    biases[2 * VE_N_LAYERS] = ve->proj_b;
    for (int i = 0; rc == CBX_OK && i < 2 * VE_N_LAYERS + 1; i++)
        if (biases[i]->type != TYPE_F32)
            rc = err_setf(err, CBX_ERR_FORMAT, "ve: %s is %s, want f32",
                          biases[i]->name ? biases[i]->name : "bias", dtype_name(biases[i]->type));
#define P(field, role) (field) = weight_place(ve->ws, (field), (role), WEIGHT_AS_STORED, 0, &rc, err)
    for (int l = 0; l < VE_N_LAYERS; l++) {
        struct ve_lstm_layer *L = &ve->lstm[l];
        P(L->w_ih, WEIGHT_LINEAR);
        P(L->w_hh, WEIGHT_LINEAR);
        P(L->b_ih, WEIGHT_PLAIN);
        P(L->b_hh, WEIGHT_PLAIN);
    }
    P(ve->proj_w, WEIGHT_LINEAR);
    P(ve->proj_b, WEIGHT_PLAIN);
#undef P
    if (rc != CBX_OK) {
        ve_free(ve);
        return rc;
    }
    /* melspec.mel_basis: librosa.filters.mel(sr, n_fft, n_mels, fmin 0, fmax 8000) */
    mel_filters_librosa(VE_SR, VE_N_FFT, VE_N_MELS, 0.0, 8000.0, 0, ve->mel_basis);
    /* librosa.stft: get_window("hann", win_length, fftbins=True) */
    window_hann(ve->window, VE_N_FFT, true);
    *out = ve;
    return CBX_OK;
}

void ve_free(struct voice_encoder *ve)
{
    if (ve) weight_set_free(ve->ws);
    free(ve);
}

/* ---- librosa.effects.trim ------------------------------------------------ */

void ve_trim(const float *wav, int64_t n, int64_t *start, int64_t *end)
{
    *start = *end = 0;
    if (n <= 0) return;
    /* feature.rms(y, frame_length 2048, hop 512, center=True, pad "constant"):
     * frame k covers samples [512k - 1024, 512k + 1024) of the zero-padded
     * signal; rms^2 = mean of squares over 2048 samples. Prefix sums in
     * double. */
    int64_t n_frames = 1 + n / TRIM_HOP;
    double *cs = malloc((size_t)(n + 1) * sizeof *cs);
    double *pw = malloc((size_t)n_frames * sizeof *pw);
    if (!cs || !pw) {
        /* no status to report: keep the whole signal (upstream never fails here) */
        free(cs);
        free(pw);
        *end = n;
        return;
    }
    cs[0] = 0.0;
    for (int64_t i = 0; i < n; i++) cs[i + 1] = cs[i] + (double)wav[i] * wav[i];
    double pmax = 0.0;
    for (int64_t k = 0; k < n_frames; k++) {
        int64_t lo = k * TRIM_HOP - TRIM_FRAME / 2, hi = lo + TRIM_FRAME;
        if (lo < 0) lo = 0;
        if (hi > n) hi = n;
        /* rms is stored as float32 by librosa, then squared again by
         * amplitude_to_db */
        float rms = (float)sqrt((cs[hi] - cs[lo]) / TRIM_FRAME);
        pw[k] = (double)rms * rms;
        if (rms > pmax) pmax = rms;
    }
    /* amplitude_to_db(rms, ref=np.max, top_db=None): 10 log10(max(1e-10, p))
     * - 10 log10(max(1e-10, max(rms)^2)); non-silent where > -top_db */
    double ref_db = 10.0 * log10(fmax(1e-10, pmax * pmax));
    int64_t first = -1, last = -1;
    for (int64_t k = 0; k < n_frames; k++) {
        double db = 10.0 * log10(fmax(1e-10, pw[k])) - ref_db;
        if (db > -VE_TRIM_TOP_DB) {
            if (first < 0) first = k;
            last = k;
        }
    }
    free(cs);
    free(pw);
    if (first < 0) return; /* all silent: y[0:0] */
    *start = first * TRIM_HOP;
    *end = (last + 1) * TRIM_HOP < n ? (last + 1) * TRIM_HOP : n;
}

/* ---- melspec.melspectrogram ------------------------------------------- */

/* wav [n] -> mel [frames, 40] on the arena's backend. */
static struct tensor *melspectrogram(struct arena *a,
                                     const float *mel_basis, const float *window,
                                     const float *wav, int64_t n)
{
    struct tensor *y = op_from_host(a, TYPE_F32, 1, (int64_t[]){n}, wav);
    struct tensor *win = op_from_host(a, TYPE_F32, 1, (int64_t[]){VE_N_FFT}, window);
    struct tensor *basis = op_from_host(a, TYPE_F32, 2, (int64_t[]){VE_N_MELS, VE_N_FFT / 2 + 1},
                                        mel_basis);
    /* _stft: librosa.stft(n_fft 400, hop 160, win 400, center, pad "reflect") */
    struct stft_params sp = {.n_fft = VE_N_FFT, .hop = VE_HOP, .win_length = VE_N_FFT,
                             .center = true, .pad_mode = PAD_REFLECT};
    struct tensor *spec = op_stft(a, y, win, &sp);                /* [201, F, 2]   */
    /* np.abs(spec) ** mel_power (2.0) */
    struct tensor *pw = op_reduce(a, op_unary(a, spec, UN_SQR, 0, 0), RED_SUM); /* [201, F, 1] */
    if (!pw) return NULL;
    int64_t F = pw->ne[1];
    pw = op_reshape(a, pw, 2, (int64_t[]){VE_N_FFT / 2 + 1, F});
    /* np.dot(mel_basis, S) -> (40, F), transposed to (F, 40) */
    struct tensor *pt = op_cont(a, op_transpose(a, pw, 0, 1));    /* [F, 201]      */
    return op_linear(a, pt, basis, NULL);                         /* [F, 40]       */
}

static cbx_status arena_err(struct arena *a, char *err, const char *what)
{
    cbx_status s = arena_status(a);
    if (s == CBX_OK) s = CBX_ERR_INTERNAL;
    return err_setf(err, s, "%s: %s", what, arena_errmsg(a));
}

cbx_status ve_melspec(const struct backend *be, const float *wav, int64_t n, float **mel,
                      int64_t *frames, char *err)
{
    *mel = NULL;
    *frames = 0;
    if (n <= VE_N_FFT / 2)
        return err_setf(err, CBX_ERR_INVALID_ARG,
                        "ve: %lld samples after trimming, need more than %d (reflect padding)",
                        (long long)n, VE_N_FFT / 2);
    cbx_status rc = CBX_OK;
    float *basis = malloc(sizeof(float) * VE_N_MELS * (VE_N_FFT / 2 + 1));
    float window[VE_N_FFT];
    struct arena *a = arena_create(be, 0);
    if (!a || !basis) {
        rc = err_setf(err, CBX_ERR_NOMEM, "ve: out of memory");
        goto cleanup;
    }
    mel_filters_librosa(VE_SR, VE_N_FFT, VE_N_MELS, 0.0, 8000.0, 0, basis);
    window_hann(window, VE_N_FFT, true);
    struct tensor *m = melspectrogram(a, basis, window, wav, n);
    if (!m) {
        rc = arena_err(a, err, "ve melspectrogram");
        goto cleanup;
    }
    *mel = malloc((size_t)tensor_nbytes(m));
    if (!*mel) {
        rc = err_setf(err, CBX_ERR_NOMEM, "ve: out of memory");
        goto cleanup;
    }
    rc = tensor_to_host(m, *mel);
    if (rc != CBX_OK) {
        free(*mel);
        *mel = NULL;
        err_setf(err, rc, "ve: mel read-back failed");
        goto cleanup;
    }
    *frames = m->ne[0];
cleanup:
    arena_free(a);
    free(basis);
    return rc;
}

/* ---- partials (stride_as_partials / inference) -------------------------- */

/* get_frame_step(overlap, rate=1.3): int(np.round((16000 / 1.3) / 160)) */
static int64_t frame_step(void) { return (int64_t)nearbyint((VE_SR / VE_RATE) / VE_PARTIAL_FRAMES); }

/* get_num_wins: number of partials and the padded mel length. */
static void num_wins(int64_t n_frames, int64_t step, int64_t *n_wins, int64_t *target)
{
    int64_t win = VE_PARTIAL_FRAMES;
    int64_t num = n_frames - win + step > 0 ? n_frames - win + step : 0;
    int64_t n = num / step, rem = num % step;
    if (n == 0 || (double)(rem + (win - step)) / win >= VE_MIN_COVERAGE) n += 1;
    *n_wins = n;
    *target = win + step * (n - 1);
}

/* VoiceEncoder.forward on partials [N, 160, 40] -> [N, 256] (L2-normed). */
static struct tensor *ve_forward(struct arena *a, const struct voice_encoder *ve,
                                 struct tensor *mels)
{
    /* _, (hidden, _) = self.lstm(mels) */
    struct tensor *x = mels, *h_n = NULL;
    for (int l = 0; l < VE_N_LAYERS; l++) {
        const struct ve_lstm_layer *L = &ve->lstm[l];
        x = op_lstm(a, x, L->w_ih, L->w_hh, L->b_ih, L->b_hh, NULL, NULL, &h_n, NULL);
    }                                                               /* h_n [N, 256] */
    /* raw_embeds = relu(self.proj(hidden[-1])) */
    struct tensor *e = op_unary(a, op_linear(a, h_n, ve->proj_w, ve->proj_b), UN_RELU, 0, 0);
    /* raw_embeds / torch.linalg.norm(raw_embeds, dim=1, keepdim=True) */
    struct tensor *norm = op_unary(a, op_reduce(a, op_unary(a, e, UN_SQR, 0, 0), RED_SUM),
                                   UN_SQRT, 0, 0);                  /* [N, 1]       */
    return op_binary(a, e, norm, BIN_DIV);
}

cbx_status ve_embed_mel(const struct voice_encoder *ve, const struct backend *be,
                        const float *mel, int64_t frames, float out[256],
                        float **partial_embeds, int64_t *n_partials, char *err)
{
    if (partial_embeds) *partial_embeds = NULL;
    if (n_partials) *n_partials = 0;
    if (frames <= 0)
        return err_setf(err, CBX_ERR_INVALID_ARG, "ve: empty mel spectrogram (no audio left after trimming)");
    cbx_status rc = CBX_OK;
    struct arena *a = NULL;
    float *part = NULL;
    int64_t step = frame_step(), n_wins, target;
    num_wins(frames, step, &n_wins, &target);
    /* pad with zero rows to target (rows past target are unused), then
     * partial i = rows [i*step, i*step + 160) */
    size_t row = VE_N_MELS * sizeof(float);
    part = calloc((size_t)(n_wins * VE_PARTIAL_FRAMES), row);
    a = arena_create(be, 0);
    if (!part || !a) {
        rc = err_setf(err, CBX_ERR_NOMEM, "ve: out of memory");
        goto cleanup;
    }
    for (int64_t i = 0; i < n_wins; i++) {
        int64_t r0 = i * step, nr = VE_PARTIAL_FRAMES;
        if (r0 + nr > frames) nr = frames - r0 > 0 ? frames - r0 : 0;
        if (nr > 0)
            memcpy(part + i * VE_PARTIAL_FRAMES * VE_N_MELS, mel + r0 * VE_N_MELS,
                   (size_t)nr * row);
    }
    struct tensor *mels = op_from_host(a, TYPE_F32, 3,
                                       (int64_t[]){n_wins, VE_PARTIAL_FRAMES, VE_N_MELS}, part);
    struct tensor *pe = ve_forward(a, ve, mels);                    /* [N, 256]     */
    /* torch.mean(partial_embeds, dim=0), then / its L2 norm */
    struct tensor *m = op_reduce(a, op_cont(a, op_transpose(a, pe, 0, 1)), RED_MEAN);
    m = op_reshape(a, m, 2, (int64_t[]){1, VE_EMBED});             /* [1, 256]     */
    struct tensor *norm = op_unary(a, op_reduce(a, op_unary(a, m, UN_SQR, 0, 0), RED_SUM),
                                   UN_SQRT, 0, 0);
    struct tensor *emb = op_binary(a, m, norm, BIN_DIV);
    if (!emb) {
        rc = arena_err(a, err, "ve forward");
        goto cleanup;
    }
    rc = tensor_to_host(emb, out);
    if (rc == CBX_OK && partial_embeds) {
        *partial_embeds = malloc(tensor_nbytes(pe));
        if (!*partial_embeds) rc = CBX_ERR_NOMEM;
        else rc = tensor_to_host(pe, *partial_embeds);
        if (rc != CBX_OK) {
            free(*partial_embeds);
            *partial_embeds = NULL;
        } else if (n_partials) {
            *n_partials = n_wins;
        }
    }
    if (rc != CBX_OK) err_setf(err, rc, "ve: embedding read-back failed");
cleanup:
    arena_free(a);
    free(part);
    return rc;
}

cbx_status ve_embed(const struct voice_encoder *ve, const struct backend *be,
                    const float *wav16, int64_t n, float out[256], char *err)
{
    int64_t s, e, frames = 0;
    ve_trim(wav16, n, &s, &e);
    float *mel = NULL;
    struct arena *a = NULL;
    cbx_status rc;
    if (e - s <= VE_N_FFT / 2)
        return err_setf(err, CBX_ERR_INVALID_ARG,
                        "ve: %lld samples of audio after silence trimming (of %lld), need more "
                        "than %d",
                        (long long)(e - s), (long long)n, VE_N_FFT / 2);
    a = arena_create(be, 0);
    if (!a) return err_setf(err, CBX_ERR_NOMEM, "ve: out of memory");
    struct tensor *m = melspectrogram(a, ve->mel_basis, ve->window, wav16 + s, e - s);
    if (!m) {
        rc = arena_err(a, err, "ve melspectrogram");
        goto cleanup;
    }
    frames = m->ne[0];
    mel = malloc(tensor_nbytes(m));
    if (!mel) {
        rc = err_setf(err, CBX_ERR_NOMEM, "ve: out of memory");
        goto cleanup;
    }
    rc = tensor_to_host(m, mel);
    if (rc != CBX_OK) {
        err_setf(err, rc, "ve: mel read-back failed");
        goto cleanup;
    }
    arena_free(a);
    a = NULL;
    rc = ve_embed_mel(ve, be, mel, frames, out, NULL, NULL, err);
cleanup:
    arena_free(a);
    free(mel);
    return rc;
}
