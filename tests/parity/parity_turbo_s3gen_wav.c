/* parity_turbo_s3gen_wav.c - Turbo S3Gen end to end (S3Gen.inference:
 * encoder, meanflow CFM, HiFT, trim_fade) from the fixture's speech tokens
 * and reference dict (s3gen_prompt_tokens, s3gen_prompt_mel,
 * campplus_embedding) with seed 42, vs the upstream mel and waveform.
 * Tolerances: mel rel 1e-4; waveform rel 1e-2 (the HiFT sine source
 * integrates f0 over the whole utterance, fixtures/README.md). Also checks
 * s3gen_vocode (the library entry point) gives the same samples, also in
 * a workspace kept across calls, that BF16 products stay within their own
 * bounds (BF16_*_TOL), and that bad input is refused. Needs the
 * synth_turbo model directory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "io/model_dir.h"
#include "io/npy.h"
#include "io/weights.h"
#include "s3gen/s3gen.h"
#include "testutil.h"
#include "voice/conds.h"
#include "voice/mel.h"

#define VARIANT "turbo"
/* With BF16 products (s3gen_params.bf16) the flow's mel is held to
 * BF16_MEL_TOL (rel). The waveform is not compared sample by sample: the
 * HiFT sine source integrates f0 over the utterance, so a slightly
 * different mel shifts the phase of everything after it (measured: wav
 * rel 0.56 for a mel off by 6e-4, and 1.02 with Q4_0 weights alone).
 * Instead the log-mel spectrogram of the waveform (s3gen_prompt_mel) is
 * compared with the fixture waveform's: mean |difference| in nats. */
#define BF16_MEL_TOL 1e-2
#define BF16_LOGMEL_MEAN 0.3
#define Q4_BF16_EXTRA 0.05

/* Mean |log-mel(got) - log-mel(want)| over all bins; -1 on failure. */
static double logmel_distance(const struct backend *be, const float *got, const float *want, int64_t n)
{
    char err[ERR_MAX];
    float *mg = NULL, *mw = NULL;
    int64_t tg = 0, tw = 0;
    double d = -1;
    if (s3gen_prompt_mel(be, got, n, &mg, &tg, err) == CBX_OK &&
        s3gen_prompt_mel(be, want, n, &mw, &tw, err) == CBX_OK && tg == tw && tg > 0) {
        d = 0;
        for (int64_t i = 0; i < tg * 80; i++) d += fabs((double)mg[i] - mw[i]);
        d /= (double)(tg * 80);
    }
    free(mg);
    free(mw);
    return d;
}

static struct npy load(const char *name) { return test_fixture(VARIANT, name); }

static void compare(const char *what, const struct tensor *got, const struct npy *want, double tol)
{
    CHECK(got != NULL, "%s: no result", what);
    if (!got) return;
    CHECK(tensor_nelements(got) == test_numel(want), "%s: %lld values, want %lld", what,
          (long long)tensor_nelements(got), (long long)test_numel(want));
    if (tensor_nelements(got) != test_numel(want)) return;
    float *h = malloc(tensor_nbytes(got));
    tensor_to_host(got, h);
    check_close(what, h, want->data, (size_t)test_numel(want), 0, tol);
    free(h);
}

int main(void)
{
    char err[ERR_MAX] = "", path[512];
    snprintf(path, sizeof path, "%s/models/%s", CBX_BINARY_DIR, VARIANT);
    struct model_dir *md = NULL;
    cbx_status rc = model_dir_open(path, &md, err);
    CHECK(rc == CBX_OK, "open %s: %s", path, err);
    if (rc != CBX_OK) return test_summary();
    struct weights w = weights_from_model_dir(md, MODEL_S3GEN);
    struct s3gen s3;
    rc = s3gen_load(&s3, &w, test_backend(), TYPE_F32, err);
    CHECK(rc == CBX_OK, "s3gen_load: %s", err);
    if (rc != CBX_OK) return test_summary();

    struct npy tok = load("s3gen_input_tokens"), ptok = load("s3gen_prompt_tokens"),
               pmel = load("s3gen_prompt_mel"), emb = load("campplus_embedding"),
               mel = load("s3gen_mel"), wav = load("s3gen_wav");
    struct s3gen_ref ref = {ptok.data, test_numel(&ptok), pmel.data, pmel.ne[1], emb.data};
    struct backend *cpu = test_compute_backend(0);
    struct arena *a = arena_create(cpu, 0);
    struct s3gen_params p = s3gen_default_params();
    p.seed = 42;
    struct tensor *m = NULL;
    struct tensor *y = s3gen_inference(a, &s3, tok.data, test_numel(&tok), &ref, &p, &m);
    CHECK(y != NULL, "s3gen_inference: %s", arena_errmsg(a));
    compare("parity_turbo_s3gen_wav_mel (flow_inference, seed 42)", m, &mel, 1e-4);
    compare("parity_turbo_s3gen_wav (S3Gen.inference, seed 42)", y, &wav, 1e-2);
    /* the fade-in: the first 480 samples are silent */
    if (y) {
        float head[480];
        tensor_to_host(op_cont(a, op_slice(a, y, 1, 0, 480)), head);
        float mx = 0;
        for (int i = 0; i < 480; i++) mx = fmaxf(mx, fabsf(head[i]));
        CHECK(mx == 0.0f, "trim_fade: first 20 ms peak %g, want 0", mx);
    }

    /* s3gen_vocode with the same voice as struct conds: same samples */
    struct conds c = {0};
    c.prompt_token = ptok.data;
    c.n_prompt_token = test_numel(&ptok);
    c.prompt_feat = pmel.data;
    c.n_prompt_feat = pmel.ne[1];
    c.embedding = emb.data;
    c.n_embedding = test_numel(&emb);
    float *pcm = NULL;
    int64_t n_pcm = 0;
    rc = s3gen_vocode(&s3, cpu, tok.data, test_numel(&tok), &c, &p, &pcm, &n_pcm, err);
    CHECK(rc == CBX_OK, "s3gen_vocode: %s", err);
    if (rc == CBX_OK && n_pcm == test_numel(&wav))
        check_close("parity_turbo_s3gen_vocode (library entry point)", pcm, wav.data, (size_t)n_pcm, 0, 1e-2);
    else
        CHECK(0, "s3gen_vocode: %lld samples, want %lld", (long long)n_pcm, (long long)test_numel(&wav));

    /* a workspace arena kept across calls, as the engine keeps one: the
     * same samples as without, call after call */
    struct arena *ws = arena_create(cpu, 0);
    p.ws = ws;
    for (int k = 0; k < 2 && pcm; k++) {
        float *pw = NULL;
        int64_t nw = 0;
        rc = s3gen_vocode(&s3, cpu, tok.data, test_numel(&tok), &c, &p, &pw, &nw, err);
        CHECK(rc == CBX_OK && nw == n_pcm && !memcmp(pw, pcm, sizeof *pw * (size_t)nw),
              "s3gen_vocode in a kept workspace, call %d: %s (%lld samples)", k + 1,
              rc == CBX_OK ? "other samples" : err, (long long)nw);
        free(pw);
    }
    free(pcm);
    pcm = NULL;

    /* BF16 products (s3gen_params.bf16, the default for quantised models):
     * operands of the large products rounded to BF16, F32 accumulation.
     * Looser bounds than F32 parity, measured here. */
    p.bf16 = true;
    struct arena *ab = arena_create(cpu, 0);
    arena_set_bf16(ab, true);
    struct tensor *mb = NULL;
    struct tensor *yb = s3gen_inference(ab, &s3, tok.data, test_numel(&tok), &ref, &p, &mb);
    CHECK(yb != NULL, "s3gen_inference with bf16 products: %s", arena_errmsg(ab));
    compare("parity_turbo_s3gen_wav_mel, bf16 products", mb, &mel, BF16_MEL_TOL);
    rc = s3gen_vocode(&s3, cpu, tok.data, test_numel(&tok), &c, &p, &pcm, &n_pcm, err);
    CHECK(rc == CBX_OK && n_pcm == test_numel(&wav), "s3gen_vocode with bf16: %s", err);
    if (rc == CBX_OK && n_pcm == test_numel(&wav) && y) {
        float *yf = malloc(tensor_nbytes(y));
        CHECK(yf && tensor_to_host(y, yf) == CBX_OK, "reading the f32 waveform");
        double d32 = yf ? logmel_distance(cpu, yf, wav.data, n_pcm) : -1;
        double d16 = logmel_distance(cpu, pcm, wav.data, n_pcm);
        printf("parity_turbo_s3gen_vocode, bf16 products: log-mel mean |diff| %.4f nats (f32 products "
               "%.4f), tol %.2f\n", d16, d32, BF16_LOGMEL_MEAN);
        CHECK(d32 >= 0 && d16 >= 0 && d16 <= BF16_LOGMEL_MEAN, "bf16 waveform's log-mel off by %.4f", d16);
        free(yf);
    }
    free(pcm);
    pcm = NULL;
    arena_free(ab);
    p.ws = NULL;
    arena_free(ws);

    /* Q4_0 weights (where `auto` takes BF16 products): the waveform's
     * log-mel distance to the fixture with F32 and with BF16 products. BF16
     * is the default there because its error is small next to the
     * quantisation's: held to Q4_BF16_EXTRA over the F32 products' figure. */
    struct s3gen s3q;
    rc = s3gen_load(&s3q, &w, test_backend(), TYPE_Q4_0, err);
    CHECK(rc == CBX_OK, "s3gen_load q4_0: %s", err);
    double dq[2] = {-1, -1};
    for (int b16 = 0; b16 < 2 && rc == CBX_OK; b16++) {
        p.bf16 = b16;
        rc = s3gen_vocode(&s3q, cpu, tok.data, test_numel(&tok), &c, &p, &pcm, &n_pcm, err);
        CHECK(rc == CBX_OK && n_pcm == test_numel(&wav), "s3gen_vocode q4_0 (bf16 %d): %s", b16, err);
        if (rc == CBX_OK && n_pcm == test_numel(&wav)) dq[b16] = logmel_distance(cpu, pcm, wav.data, n_pcm);
        free(pcm);
        pcm = NULL;
    }
    if (rc == CBX_OK) s3gen_free(&s3q);
    printf("parity_turbo_s3gen_vocode, q4_0 weights: log-mel mean |diff| %.4f nats with f32 products, %.4f with "
           "bf16 products (+%.4f, tol +%.2f)\n", dq[0], dq[1], dq[1] - dq[0], Q4_BF16_EXTRA);
    CHECK(dq[0] >= 0 && dq[1] >= 0 && dq[1] - dq[0] <= Q4_BF16_EXTRA,
          "bf16 products add %.4f nats to q4_0's log-mel distance", dq[1] - dq[0]);
    p.bf16 = false;

    /* bad input: an out-of-range token, a wrong-sized x-vector */
    int32_t bad[3] = {1, 6561, 2};
    rc = s3gen_vocode(&s3, cpu, bad, 3, &c, &p, &pcm, &n_pcm, err);
    printf("out-of-range token -> %s: %s\n", cbx_status_str(rc), err);
    CHECK(rc == CBX_ERR_INVALID_ARG && pcm == NULL && strstr(err, "6561"), "bad token accepted");
    c.n_embedding = 191;
    rc = s3gen_vocode(&s3, cpu, tok.data, test_numel(&tok), &c, &p, &pcm, &n_pcm, err);
    printf("191-value x-vector -> %s: %s\n", cbx_status_str(rc), err);
    CHECK(rc == CBX_ERR_INVALID_ARG && pcm == NULL, "bad embedding accepted");

    arena_free(a);
    backend_free(cpu);
    s3gen_free(&s3);
    model_dir_close(md);
    io_npy_free(&tok);
    io_npy_free(&ptok);
    io_npy_free(&pmel);
    io_npy_free(&emb);
    io_npy_free(&mel);
    io_npy_free(&wav);
    return test_summary();
}
