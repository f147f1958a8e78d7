/* voice.c - voice cloning: reference audio -> struct conds.
 * Ports prepare_conditionals (tts.py, tts_turbo.py, mtl_tts.py),
 * ChatterboxTurboTTS.norm_loudness and S3Gen.embed_ref (s3gen.py),
 * chatterbox 5de7a54, with librosa 0.11 load/resample(soxr_hq), torchaudio
 * 2.6 Resample and pyloudnorm integrated_loudness; spec/overview.md §5,
 * spec/voice.md §1, §2, §7. Blocks in upstream call order. */
#include "voice.h"

#include <math.h>
#include <pthread.h>
#include <soxr.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/backend.h"
#include "core/threadpool.h"
#include "io/model_file.h"
#include "io/weights.h"
#include "voice/campplus.h"
#include "voice/mel.h"
#include "voice/s3tokenizer.h"
#include "voice/voice_encoder.h"

/* ---- variant rules -------------------------------------------------------- */

const struct variant_voice *voice_rules(enum model_variant v)
{
    const struct variant *row = variant_get(v);
    return row ? &row->voice : NULL;
}

struct voice_params voice_default_params(void)
{
    return (struct voice_params){.norm_loudness = true, .exaggeration = 0.5f, .serial = false};
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- librosa.resample(res_type="soxr_hq") ----------------------------------- */

cbx_status voice_resample(const float *x, int64_t n, int orig, int target, float **out,
                          int64_t *n_out, char *err)
{
    *out = NULL;
    *n_out = 0;
    if (n <= 0 || orig <= 0 || target <= 0)
        return err_setf(err, CBX_ERR_INVALID_ARG, "resample: %lld samples from %d Hz to %d Hz", (long long)n, orig,
                        target);
    /* librosa: n_samples = int(np.ceil(y.shape[-1] * ratio)), ratio = target / orig */
    int64_t want = (int64_t)ceil((double)n * ((double)target / (double)orig));
    if (orig == target) want = n;
    float *y = calloc((size_t)(want > 0 ? want : 1), sizeof *y);
    if (!y) return err_setf(err, CBX_ERR_NOMEM, "resample: out of memory (%lld samples)", (long long)want);
    if (orig == target) {
        memcpy(y, x, sizeof *y * (size_t)n);
        *out = y;
        *n_out = n;
        return CBX_OK;
    }
    /* python-soxr resample -> csoxr_divide_proc: soxr_create(in, out, 1,
     * float32 io, soxr_quality_spec(SOXR_HQ, 0)), soxr_process over chunks
     * of 48000 * in / out input samples into an output of
     * n * out / in + 1 samples, then a flush (NULL input). */
    size_t olen = (size_t)((double)n * (double)target / (double)orig) + 1;
    size_t chunk = (size_t)(48000.0 * (double)orig / (double)target);
    float *buf = calloc(olen, sizeof *buf);
    soxr_error_t e = NULL;
    soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
    soxr_t s = buf ? soxr_create((double)orig, (double)target, 1, &e, &io, &q, NULL) : NULL;
    if (!buf || !s) {
        free(buf);
        free(y);
        soxr_delete(s);
        return buf ? err_setf(err, CBX_ERR_INTERNAL, "resample: libsoxr: %s", e ? e : "cannot create")
                   : err_setf(err, CBX_ERR_NOMEM, "resample: out of memory");
    }
    size_t pos = 0, done = 0;
    for (size_t i = 0; i < (size_t)n && !e; i += chunk) {
        size_t len = (size_t)n - i < chunk ? (size_t)n - i : chunk;
        e = soxr_process(s, x + i, len, NULL, buf + pos, olen - pos, &done);
        pos += done;
    }
    if (!e) {
        e = soxr_process(s, NULL, 0, NULL, buf + pos, olen - pos, &done);
        pos += done;
    }
    soxr_delete(s);
    if (e) {
        free(buf);
        free(y);
        return err_setf(err, CBX_ERR_INTERNAL, "resample: libsoxr: %s", e);
    }
    /* util.fix_length(size=n_samples): zero-pad or cut at the end */
    memcpy(y, buf, sizeof *y * (pos < (size_t)want ? pos : (size_t)want));
    free(buf);
    *out = y;
    *n_out = want;
    return CBX_OK;
}

/* ---- torchaudio.transforms.Resample (sinc_interp_hann) ---------------------- */

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

cbx_status voice_resample_sinc(const float *x, int64_t n, int orig, int target, float **out,
                               int64_t *n_out, char *err)
{
    *out = NULL;
    *n_out = 0;
    if (n <= 0 || orig <= 0 || target <= 0)
        return err_setf(err, CBX_ERR_INVALID_ARG, "resample: %lld samples from %d Hz to %d Hz", (long long)n, orig,
                        target);
    if (orig == target) { /* Resample.forward returns the input as is */
        float *y = malloc(sizeof *y * (size_t)n);
        if (!y) return err_setf(err, CBX_ERR_NOMEM, "resample: out of memory");
        memcpy(y, x, sizeof *y * (size_t)n);
        *out = y;
        *n_out = n;
        return CBX_OK;
    }
    const int64_t g = gcd64(orig, target), o = orig / g, nw = target / g;
    const int lpw = 6;              /* lowpass_filter_width */
    const double rolloff = 0.99;
    /* _get_sinc_resample_kernel */
    double base = (double)(o < nw ? o : nw) * rolloff;
    int64_t width = (int64_t)ceil((double)lpw * (double)o / base);
    int64_t taps = 2 * width + o;
    if (nw > 4096 || taps > 65536)
        return err_setf(err, CBX_ERR_UNSUPPORTED, "resample: %d Hz -> %d Hz needs a %lld x %lld kernel", orig,
                        target, (long long)nw, (long long)taps);
    float *k = malloc(sizeof *k * (size_t)(nw * taps));
    int64_t n_y = (int64_t)ceil((double)nw * (double)n / (double)o); /* ceil(new * length / orig) */
    float *y = calloc((size_t)(n_y > 0 ? n_y : 1), sizeof *y);
    if (!k || !y) {
        free(k);
        free(y);
        return err_setf(err, CBX_ERR_NOMEM, "resample: out of memory");
    }
    for (int64_t j = 0; j < nw; j++)
        for (int64_t i = 0; i < taps; i++) {
            /* t = arange(0, -new, -1)[:, None] / new (float32) + arange(-width, width + orig) / orig (float64) */
            double t = (double)((float)-j / (float)nw) + (double)(i - width) / (double)o;
            t *= base;
            t = t < -lpw ? -lpw : t > lpw ? lpw : t;
            double c = cos(t * M_PI / lpw / 2);
            double window = c * c;
            t *= M_PI;
            double kern = t == 0 ? 1.0 : sin(t) / t;
            k[j * taps + i] = (float)(kern * (window * (base / (double)o)));
        }
    /* F.pad(x, (width, width + orig)); conv1d(stride orig) -> [new, L'];
     * transpose, flatten: output 2i + j = sum_n K[j][n] x_pad[orig i + n] */
    for (int64_t idx = 0; idx < n_y; idx++) {
        int64_t i = idx / nw, j = idx % nw;
        const float *kj = k + j * taps;
        int64_t start = i * o - width; /* x index of tap 0 */
        float acc = 0.0f;
        for (int64_t t = 0; t < taps; t++) {
            int64_t xi = start + t;
            if (xi >= 0 && xi < n) acc += kj[t] * x[xi];
        }
        y[idx] = acc;
    }
    free(k);
    *out = y;
    *n_out = n_y;
    return CBX_OK;
}

/* ---- pyloudnorm Meter.integrated_loudness ----------------------------------- */

/* IIRfilter.generate_coefficients, normalised by a0: b[3], a[3] */
static void kweight_coeffs(double G, double Q, double fc, double rate, bool shelf, double b[3], double a[3])
{
    double A = pow(10.0, G / 40.0);
    double w0 = 2.0 * M_PI * (fc / rate);
    double alpha = sin(w0) / (2.0 * Q);
    double c = cos(w0), sA = sqrt(A);
    double b0, b1, b2, a0, a1, a2;
    if (shelf) {
        b0 = A * ((A + 1) + (A - 1) * c + 2 * sA * alpha);
        b1 = -2 * A * ((A - 1) + (A + 1) * c);
        b2 = A * ((A + 1) + (A - 1) * c - 2 * sA * alpha);
        a0 = (A + 1) - (A - 1) * c + 2 * sA * alpha;
        a1 = 2 * ((A - 1) - (A + 1) * c);
        a2 = (A + 1) - (A - 1) * c - 2 * sA * alpha;
    } else {
        b0 = (1 + c) / 2;
        b1 = -(1 + c);
        b2 = (1 + c) / 2;
        a0 = 1 + alpha;
        a1 = -2 * c;
        a2 = 1 - alpha;
    }
    b[0] = b0 / a0, b[1] = b1 / a0, b[2] = b2 / a0;
    a[0] = a0 / a0, a[1] = a1 / a0, a[2] = a2 / a0;
}

/* scipy.signal.lfilter(b, a, x) for order 2, direct form II transposed in
 * scipy's operation order, zero initial state, in place, double */
static void lfilter2(const double b[3], const double a[3], double *x, int64_t n)
{
    double z0 = 0, z1 = 0;
    for (int64_t i = 0; i < n; i++) {
        double xn = x[i];
        double yn = z0 + b[0] * xn;
        z0 = z1 + xn * b[1] - yn * a[1];
        z1 = xn * b[2] - yn * a[2];
        x[i] = yn;
    }
}

cbx_status voice_integrated_loudness(const float *x, int64_t n, int rate, double *lufs, char *err)
{
    const double T_g = 0.400, step = 1.0 - 0.75, Gamma_a = -70.0;
    *lufs = NAN;
    /* util.valid_audio: at least one block */
    if (rate <= 0 || n <= 0 || (double)n < T_g * rate)
        return err_setf(err, CBX_ERR_INVALID_ARG, "loudness: audio of %.3f s is shorter than the 0.4 s gating block",
                        rate > 0 ? (double)n / rate : 0.0);
    double *d = malloc(sizeof *d * (size_t)n);
    if (!d) return err_setf(err, CBX_ERR_NOMEM, "loudness: out of memory");
    /* the float32 wav goes through the filters in float64 (scipy lfilter
     * promotes to the coefficients' type) */
    for (int64_t i = 0; i < n; i++) d[i] = x[i];
    double b[3], a[3];
    kweight_coeffs(4.0, 1.0 / sqrt(2.0), 1500.0, rate, true, b, a); /* high_shelf */
    lfilter2(b, a, d, n);
    kweight_coeffs(0.0, 0.5, 38.0, rate, false, b, a); /* high_pass */
    lfilter2(b, a, d, n);

    double T = (double)n / rate;
    int64_t J = (int64_t)nearbyint((T - T_g) / (T_g * step)) + 1; /* np.round: half to even */
    double *z = malloc(sizeof *z * (size_t)(J > 0 ? J : 1));
    if (!z) {
        free(d);
        return err_setf(err, CBX_ERR_NOMEM, "loudness: out of memory");
    }
    for (int64_t j = 0; j < J; j++) {
        int64_t l = (int64_t)(T_g * ((double)j * step) * rate);
        int64_t u = (int64_t)(T_g * ((double)j * step + 1) * rate);
        if (u > n) u = n; /* numpy slicing clips */
        double s = 0;
        for (int64_t i = l; i < u; i++) s += d[i] * d[i];
        z[j] = (1.0 / (T_g * rate)) * s;
    }
    /* absolute gate, relative threshold, final gate (channel gain 1) */
    double sum = 0;
    int64_t cnt = 0;
    for (int64_t j = 0; j < J; j++)
        if (-0.691 + 10.0 * log10(z[j]) >= Gamma_a) sum += z[j], cnt++;
    double Gamma_r = -0.691 + 10.0 * log10(cnt ? sum / (double)cnt : NAN) - 10.0;
    sum = 0;
    cnt = 0;
    for (int64_t j = 0; j < J; j++) {
        double l_j = -0.691 + 10.0 * log10(z[j]);
        if (l_j > Gamma_r && l_j > Gamma_a) sum += z[j], cnt++;
    }
    /* np.nan_to_num(mean of nothing) = 0 -> log10(0) = -inf */
    *lufs = -0.691 + 10.0 * log10(cnt ? sum / (double)cnt : 0.0);
    free(z);
    free(d);
    return CBX_OK;
}

/* ---- the networks --------------------------------------------------------- */

struct voice_models {
    enum model_variant variant;
    struct weights w_ve, w_s3gen; /* kept: the stages borrow from md through them */
    struct voice_encoder *ve;
    struct campplus *campplus;
    struct s3tokenizer *tokenizer;
    struct backend *wbe; /* holds the weights: voice creation stays on the
                          * cpu (one thread: placement only; the stages
                          * compute on the caller's backend) */
};

static cbx_status load_models(enum model_variant variant, struct weights w_ve, struct weights w_s3gen,
                              struct voice_models **out, char *err)
{
    *out = NULL;
    struct voice_models *vm = calloc(1, sizeof *vm);
    if (!vm) return err_setf(err, CBX_ERR_NOMEM, "voice: out of memory");
    vm->variant = variant;
    vm->w_ve = w_ve;
    vm->w_s3gen = w_s3gen;
    cbx_status rc;
    if (!(vm->wbe = backend_cpu_create(1))) {
        free(vm);
        return err_setf(err, CBX_ERR_NOMEM, "voice: out of memory");
    }
    if ((rc = ve_load(&vm->ve, &vm->w_ve, vm->wbe, err)) != CBX_OK ||
        (rc = campplus_load(&vm->campplus, &vm->w_s3gen, vm->wbe, err)) != CBX_OK ||
        (rc = s3tok_load(&vm->tokenizer, &vm->w_s3gen, vm->wbe, err)) != CBX_OK) {
        voice_models_free(vm);
        return rc;
    }
    *out = vm;
    return CBX_OK;
}

cbx_status voice_models_load(const struct model_dir *md, struct voice_models **out, char *err)
{
    return load_models(model_dir_variant(md), weights_from_model_dir(md, MODEL_VE),
                       weights_from_model_dir(md, MODEL_S3GEN), out, err);
}

cbx_status voice_models_load_model(const struct model *m, struct voice_models **out, char *err)
{
    return load_models(model_get_variant(m), model_weights(m, MODEL_VE), model_weights(m, MODEL_S3GEN), out, err);
}

void voice_models_free(struct voice_models *vm)
{
    if (!vm) return;
    ve_free(vm->ve);
    campplus_free(vm->campplus);
    s3tok_free(vm->tokenizer);
    backend_cpu_free(vm->wbe); /* after every weight placed on it */
    free(vm);
}

enum model_variant voice_models_variant(const struct voice_models *vm) { return vm->variant; }

/* ---- prepare_conditionals --------------------------------------------------- */

/* The network stages of voice_prepare in two independent lanes: A (the
 * CAMPPlus x-vector and S3Gen prompt tokens of the embed_ref audio) and B
 * (the T3 prompt tokens, unless reused, and the VoiceEncoder embedding of
 * ref16). Inputs are read-only and outputs disjoint, so the lanes can run
 * at once; each records its own status and message. */
struct lanes {
    const struct voice_models *vm;
    const struct backend *be_a, *be_b;
    /* A */
    const float *wdec;
    int64_t n_dec;
    float *embedding;   /* [CAMPPLUS_EMBED], caller-allocated */
    int32_t *ptoks;     /* prompt tokens (malloc) */
    int64_t n_ptoks;
    /* B */
    const float *w16;
    int64_t n_enc, prompt_len, n_ve;
    bool t3_tokens;     /* false: reused from A by the caller */
    int32_t *ttoks;     /* T3 prompt tokens (malloc) */
    int64_t n_ttoks;
    float *speaker;     /* [VE_EMBED], caller-allocated */
    double t_campplus, t_ptok, t_ttok, t_ve;
    double cpu_a, cpu_b; /* CPU seconds of the thread that ran each lane */
    cbx_status rc_a, rc_b;
    char err_a[ERR_MAX], err_b[ERR_MAX];
};

static void lane_a_run(struct lanes *L)
{
    double t0 = now();
    L->rc_a = campplus_embed(L->vm->campplus, L->be_a, L->wdec, L->n_dec, L->embedding, L->err_a);
    L->t_campplus = now() - t0;
    if (L->rc_a != CBX_OK) return;
    t0 = now();
    L->rc_a = s3tok_tokenize(L->vm->tokenizer, L->be_a, L->wdec, L->n_dec, 0, &L->ptoks, &L->n_ptoks, L->err_a);
    L->t_ptok = now() - t0;
}

static void lane_b_run(struct lanes *L)
{
    double t0 = now();
    if (L->t3_tokens) {
        L->rc_b = s3tok_tokenize(L->vm->tokenizer, L->be_b, L->w16, L->n_enc, L->prompt_len, &L->ttoks,
                                 &L->n_ttoks, L->err_b);
        L->t_ttok = now() - t0;
        if (L->rc_b != CBX_OK) return;
    }
    t0 = now();
    L->rc_b = ve_embed(L->vm->ve, L->be_b, L->w16, L->n_ve, L->speaker, L->err_b);
    L->t_ve = now() - t0;
}

static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *lane_a(void *p)
{
    struct lanes *L = p;
    double c0 = thread_cpu();
    lane_a_run(L);
    L->cpu_a = thread_cpu() - c0;
    return NULL;
}

static void *lane_b(void *p)
{
    struct lanes *L = p;
    double c0 = thread_cpu();
    lane_b_run(L);
    L->cpu_b = thread_cpu() - c0;
    return NULL;
}

/* Run both lanes at once, each on a one-thread CPU backend (its own core,
 * single-threaded BLAS) rather than one after the other on both cores:
 * no BLAS thread hand-offs or idle waits between the many small ops of
 * these networks. The tokens and mel are the same bits; the embeddings
 * agree to float rounding (~2e-7 relative measured), as the pool splits a
 * large F32 product into per-thread BLAS calls whose kernels may sum in
 * another order than one call's (parity_turbo_voice_input checks it). Only
 * when L's backend is a CPU pool of 2 or more threads; false (nothing
 * run) otherwise or when the helpers cannot start. */
static bool lanes_parallel(struct lanes *L)
{
    const struct backend *be = L->be_a;
    if (!be->tp || tp_n_threads(be->tp) < 2) return false;
    /* FFTW's planner is not thread-safe, and the lanes' front ends make
     * their plans on first use, under two different locks (campplus.c:
     * the 512-point Kaldi FFT; core spectral.c: the 400-point STFT of the
     * tokenizer and VoiceEncoder): make them all here first, so that no
     * lane plans (a 401-sample silence through both front ends). */
    float silence[401] = {0};
    float *o = NULL;
    int64_t f = 0;
    bool ok = kaldi_fbank(silence, 401, 80, &o, &f, NULL) == CBX_OK;
    free(o);
    o = NULL;
    ok = ok && s3tok_log_mel(L->vm->tokenizer, be, silence, 401, &o, &f, NULL) == CBX_OK;
    free(o);
    if (!ok) return false;
    struct backend *b1 = backend_cpu_create(1), *b2 = backend_cpu_create(1);
    pthread_t th;
    ok = b1 && b2;
    if (ok) {
        L->be_a = b1, L->be_b = b2;
        ok = pthread_create(&th, NULL, lane_a, L) == 0;
        if (ok) {
            lane_b(L);
            pthread_join(th, NULL);
        }
        L->be_a = L->be_b = be;
    }
    backend_cpu_free(b1);
    backend_cpu_free(b2);
    return ok;
}

cbx_status voice_prepare(const struct voice_models *vm, const struct backend *be, const struct audio *ref,
                         const struct audio *ref16_in, const struct voice_params *p, struct conds *out,
                         struct voice_report *rep, char *err)
{
    memset(out, 0, sizeof *out);
    if (!be || !be->host)
        return err_setf(err, CBX_ERR_INVALID_ARG, "voice: voices are made on the cpu backend, not %s",
                        be ? be->name : "(none)");
    struct voice_report r;
    memset(&r, 0, sizeof r);
    r.loudness_lufs = NAN;
    struct voice_params defaults = voice_default_params();
    if (!p) p = &defaults;
    const struct variant_voice *vr = voice_rules(vm->variant);
    const char *vname = variant_get(vm->variant)->name;
    float *ref24 = NULL, *ref16 = NULL, *dec16 = NULL, *mel = NULL;
    int32_t *toks = NULL;
    int64_t n24 = 0, n16 = 0, n_dec16 = 0, T = 0, n_toks = 0;
    cbx_status rc = CBX_OK;
    double t0;
    if (!ref || !ref->pcm || ref->n <= 0 || ref->sample_rate <= 0) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "voice: no reference audio");
        goto cleanup;
    }
    if (ref16_in && ref16_in->sample_rate != VOICE_S3_SR) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "voice: the 16 kHz rendition is at %d Hz, need %d Hz",
                      ref16_in->sample_rate, VOICE_S3_SR);
        goto cleanup;
    }

    /* s3gen_ref_wav, _sr = librosa.load(wav_fpath, sr=S3GEN_SR) */
    t0 = now();
    if ((rc = voice_resample(ref->pcm, ref->n, ref->sample_rate, VOICE_S3GEN_SR, &ref24, &n24, err)) != CBX_OK)
        goto cleanup;
    r.t_resample += now() - t0;

    /* Turbo: assert len(s3gen_ref_wav) / _sr > 5.0; ours elsewhere */
    double secs = (double)n24 / VOICE_S3GEN_SR;
    if (vr->min_exclusive ? !(secs > vr->min_seconds) : secs < vr->min_seconds) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "voice: reference audio is %.2f s; %s needs %s %.0f s", secs, vname,
                      vr->min_exclusive ? "more than" : "at least", vr->min_seconds);
        goto cleanup;
    }

    /* Silence (ours): upstream measures -inf LUFS, skips the gain and
     * conditions on nothing; refuse instead. The meter's verdict: every
     * 400 ms block below the -70 LUFS absolute gate. */
    t0 = now();
    double L = NAN;
    bool metered = voice_integrated_loudness(ref24, n24, VOICE_S3GEN_SR, &L, NULL) == CBX_OK;
    r.t_loudness = now() - t0;
    if (metered && isinf(L) && L < 0) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG,
                      "voice: reference audio is silent (every 400 ms block is below -70 LUFS); "
                      "record some speech");
        goto cleanup;
    }

    /* Turbo: if norm_loudness: s3gen_ref_wav = self.norm_loudness(s3gen_ref_wav, _sr).
     * A clip the meter refuses (< 0.4 s) is left as is, as upstream's
     * except-branch does (unreachable after the 5 s check). */
    double gain = 1.0;
    if (vr->loudness && p->norm_loudness) {
        t0 = now();
        if (metered) {
            r.loudness_measured = true;
            r.loudness_lufs = L;
            double gain_db = vr->target_lufs - L;
            double g = pow(10.0, gain_db / 20.0);
            if (isfinite(g) && g > 0.0) {
                /* wav * gain_linear: float32 array times a Python float -> float32 */
                for (int64_t i = 0; i < n24; i++) ref24[i] = (float)((double)ref24[i] * g);
                gain = g;
                r.loudness_applied = true;
                r.gain_db = gain_db;
            }
        }
        r.t_loudness += now() - t0;
    }

    /* ref_16k_wav = librosa.resample(s3gen_ref_wav, S3GEN_SR, S3_SR), or the
     * given rendition with the same gain */
    t0 = now();
    if (ref16_in) {
        n16 = ref16_in->n;
        if (!(ref16 = malloc(sizeof *ref16 * (size_t)n16))) {
            rc = err_setf(err, CBX_ERR_NOMEM, "voice: out of memory");
            goto cleanup;
        }
        for (int64_t i = 0; i < n16; i++)
            ref16[i] = gain != 1.0 ? (float)((double)ref16_in->pcm[i] * gain) : ref16_in->pcm[i];
    } else if ((rc = voice_resample(ref24, n24, VOICE_S3GEN_SR, VOICE_S3_SR, &ref16, &n16, err)) != CBX_OK) {
        goto cleanup;
    }
    r.t_resample += now() - t0;

    /* s3gen_ref_wav = s3gen_ref_wav[:self.DEC_COND_LEN];
     * s3gen_ref_dict = self.s3gen.embed_ref(s3gen_ref_wav, S3GEN_SR) */
    int64_t n_dec = n24 < VOICE_DEC_COND_LEN ? n24 : VOICE_DEC_COND_LEN;
    t0 = now();
    /* embed_ref: ref_wav_16 = resampler(S3GEN_SR, S3_SR)(ref_wav) */
    if (ref16_in) {
        int64_t want = (int64_t)ceil(2.0 * (double)n_dec / 3.0); /* ceil(new * length / orig) */
        n_dec16 = want < n16 ? want : n16;
    } else if ((rc = voice_resample_sinc(ref24, n_dec, VOICE_S3GEN_SR, VOICE_S3_SR, &dec16, &n_dec16, err)) != CBX_OK) {
        goto cleanup;
    }
    const float *wav16_dec = ref16_in ? ref16 : dec16;
    r.t_resample += now() - t0;

    /* prompt_feat = mel_spectrogram(ref_wav_24) -> [T, 80] */
    t0 = now();
    if ((rc = s3gen_prompt_mel(be, ref24, n_dec, &mel, &T, err)) != CBX_OK) goto cleanup;
    r.t_prompt_mel = now() - t0;

    /* The four network stages, as two independent lanes (struct lanes):
     *   A: ref_x_vector = self.speaker_encoder.inference(ref_wav_16);
     *      ref_speech_tokens, ref_speech_token_lens = self.tokenizer(ref_wav_16)
     *   B: t3_cond_prompt_tokens, _ = s3_tokzr.forward([ref_16k_wav[:self.ENC_COND_LEN]],
     *          max_len=plen);
     *      ve_embed = torch.from_numpy(self.ve.embeds_from_wavs([ref_16k_wav], sample_rate=S3_SR));
     *      ve_embed = ve_embed.mean(axis=0, keepdim=True) (one utterance)
     * When B's tokenizer input is the very audio A tokenises, with no more
     * tokens than the limit, the result is the same (the cut follows the
     * normalisation): B reuses A's tokens. Ours: the VoiceEncoder sees at
     * most VOICE_VE_MAX_LEN samples (voice.h). */
    const int64_t enc_cond_len = (int64_t)vr->enc_cond_seconds * VOICE_S3_SR; /* ENC_COND_LEN */
    int64_t n_enc = n16 < enc_cond_len ? n16 : enc_cond_len;
    bool reuse = wav16_dec == ref16 && n_enc == n_dec16 && s3tok_n_tokens(n_dec16) <= vr->prompt_len;
    r.ve_capped = n16 > VOICE_VE_MAX_LEN;
    out->embedding = malloc(sizeof(float) * CAMPPLUS_EMBED);
    out->speaker_emb = malloc(sizeof(float) * VE_EMBED);
    if (!out->embedding || !out->speaker_emb) {
        rc = err_setf(err, CBX_ERR_NOMEM, "voice: out of memory");
        goto cleanup;
    }
    out->n_embedding = CAMPPLUS_EMBED;
    out->n_speaker = VE_EMBED;
    struct lanes ln = {
        .vm = vm, .be_a = be, .be_b = be,
        .wdec = wav16_dec, .n_dec = n_dec16, .embedding = out->embedding,
        .w16 = ref16, .n_enc = n_enc, .prompt_len = vr->prompt_len, .t3_tokens = !reuse,
        .n_ve = r.ve_capped ? VOICE_VE_MAX_LEN : n16, .speaker = out->speaker_emb,
        .rc_a = CBX_OK, .rc_b = CBX_OK,
    };
    if (p->serial || !lanes_parallel(&ln)) {
        lane_a(&ln);
        if (ln.rc_a == CBX_OK) lane_b(&ln);
    }
    toks = ln.ptoks, n_toks = ln.n_ptoks;
    out->cond_prompt_tokens = ln.ttoks, out->n_cond_prompt = ln.n_ttoks;
    r.t_campplus = ln.t_campplus, r.t_prompt_tokens = ln.t_ptok, r.t_t3_tokens = ln.t_ttok, r.t_ve = ln.t_ve;
    r.cpu_lane_a = ln.cpu_a, r.cpu_lane_b = ln.cpu_b;
    if (ln.rc_a != CBX_OK || ln.rc_b != CBX_OK) {
        rc = ln.rc_a != CBX_OK ? ln.rc_a : ln.rc_b;
        err_setf(err, rc, "%s", ln.rc_a != CBX_OK ? ln.err_a : ln.err_b);
        goto cleanup;
    }
    /* embed_ref: keep mel frames = 2 * tokens */
    int64_t kept = s3tok_reconcile_prompt(n_toks, T);
    if (kept < 1) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "voice: reference audio gave no prompt tokens");
        goto cleanup;
    }
    if (reuse) {
        if (!(out->cond_prompt_tokens = malloc(sizeof(int32_t) * (size_t)n_toks))) {
            rc = err_setf(err, CBX_ERR_NOMEM, "voice: out of memory");
            goto cleanup;
        }
        memcpy(out->cond_prompt_tokens, toks, sizeof(int32_t) * (size_t)n_toks);
        out->n_cond_prompt = n_toks;
    }
    out->prompt_token = toks;
    out->n_prompt_token = kept;
    toks = NULL;
    out->prompt_feat = mel;
    out->n_prompt_feat = T;
    mel = NULL;

    /* T3Cond(..., emotion_adv=exaggeration * torch.ones(1, 1, 1)) */
    out->emotion_adv = p->exaggeration;
    out->has_emotion_adv = true;
    r.n24 = n24;
    r.n16 = n16;

cleanup:
    if (rc != CBX_OK) conds_free(out);
    free(toks);
    if (rep) *rep = r;
    free(mel);
    free(dec16);
    free(ref16);
    free(ref24);
    return rc;
}

cbx_status voice_prepare_file(const struct voice_models *vm, const struct backend *be, const char *path,
                              const char *ref16_path, const struct voice_params *p, struct conds *out,
                              struct voice_report *rep, char *err)
{
    memset(out, 0, sizeof *out);
    struct audio a = {0}, a16 = {0};
    cbx_status rc = io_audio_read(path, &a, err);
    if (rc == CBX_OK && ref16_path) rc = io_audio_read(ref16_path, &a16, err);
    if (rc == CBX_OK && ref16_path && a16.sample_rate != VOICE_S3_SR)
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: sample rate %d Hz, the 16 kHz rendition must be at %d Hz",
                      ref16_path, a16.sample_rate, VOICE_S3_SR);
    if (rc == CBX_OK && (rc = voice_prepare(vm, be, &a, ref16_path ? &a16 : NULL, p, out, rep, err)) != CBX_OK &&
        err) {
        /* name the file in the stage's message */
        char tmp[ERR_MAX];
        snprintf(tmp, sizeof tmp, "%s: %s", path, strncmp(err, "voice: ", 7) ? err : err + 7);
        memcpy(err, tmp, ERR_MAX);
    }
    io_audio_free(&a16);
    io_audio_free(&a);
    return rc;
}

/* ---- --voice anything --------------------------------------------------------- */

/* Either md or m names the model (audio only). */
static cbx_status load_any(const char *path, const struct model_dir *md, const struct model *m,
                           const struct backend *be, const struct voice_params *p, struct conds *out, char *err)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(path, &st) != 0)
        return err_setf(err, CBX_ERR_NOT_FOUND, "%s: no such voice file, directory or audio file", path);
    if (S_ISDIR(st.st_mode)) return conds_from_npy_dir(path, out, err);
    if (conds_is_gguf(path)) return conds_read_voice(path, out, NULL, err);
    if (!md && !m) return err_setf(err, CBX_ERR_INVALID_ARG, "%s: conditioning audio needs a model", path);
    struct voice_models *vm = NULL;
    struct backend *own = NULL;
    cbx_status rc = md ? voice_models_load(md, &vm, err) : voice_models_load_model(m, &vm, err);
    if (rc != CBX_OK) return rc;
    /* the voice networks' weights are on the cpu: a device backend's
     * caller gets the voice made there */
    if ((!be || !be->host) && !(be = own = backend_cpu_create(0))) {
        voice_models_free(vm);
        return err_setf(err, CBX_ERR_NOMEM, "voice: cannot start the CPU backend");
    }
    rc = voice_prepare_file(vm, be, path, NULL, p, out, NULL, err);
    backend_cpu_free(own);
    voice_models_free(vm);
    return rc;
}

cbx_status conds_load_any(const char *path, const struct model_dir *md, const struct backend *be,
                          const struct voice_params *p, struct conds *out, char *err)
{
    return load_any(path, md, NULL, be, p, out, err);
}

cbx_status conds_load_any_model(const char *path, const struct model *m, const struct backend *be,
                                const struct voice_params *p, struct conds *out, char *err)
{
    return load_any(path, NULL, m, be, p, out, err);
}
