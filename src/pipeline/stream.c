/* stream.c - chunked S3Gen (stream.h says what and why). The flow step
 * ports chatterbox 5de7a54 models/s3gen/flow.py
 * CausalMaskedDiffWithXvec.inference with its finalize flag, the HiFT step
 * HiFTGenerator.inference with a carried source (hift.md §10), in the
 * chunk order of CosyVoice 2's streaming token2wav. */
#include "pipeline/stream.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/backend.h"
#include "core/rng.h"
#include "s3gen/encoder.h"
#include "s3gen/hift.h"

#define N_MEL S3GEN_MEL_CHANNELS
#define SPF HIFT_SAMPLES_PER_FRAME /* samples per mel frame */

struct stream {
    const struct s3gen *s;
    struct s3gen_ref ref;
    struct stream_params p;
    stream_emit_fn emit;
    void *user;
    struct arena *a;       /* reset per chunk */
    cbx_status rc;         /* sticky */
    double t0;
    struct stream_stats stats;

    int32_t *tok;          /* [n_tok] speech tokens so far (+ room for the tail) */
    int64_t n_tok, cap_tok;
    int64_t next;          /* n_tok at which the next chunk runs */
    int64_t step;          /* size of the chunk after that */
    bool finished;

    float *mel;            /* [n_mel][80] committed mel frames (frame-major) */
    int64_t n_mel, cap_mel;
    float *f0;             /* [E] committed f0 (Hz) */
    double *cyc;           /* [E + 1] cycles of the fundamental before frame t */
    int64_t cap_f0, cap_cyc;
    int64_t E;             /* frames whose audio is emitted */
    float *tail;           /* [n_tail] previous rendering of frames [E, n_mel) */
    int64_t n_tail;
    int64_t n_out;         /* samples emitted */
    float *out;            /* scratch for one chunk's samples */
    int64_t cap_out;
};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

struct stream_params stream_default_params(void)
{
    struct stream_params p = {10, 20, 80, 2 * 1004, 0, 0, false, 0, 0, NULL};
    return p;
}

static cbx_status grow(void **buf, int64_t *cap, int64_t need, size_t elem, char *err)
{
    if (need <= *cap) return CBX_OK;
    int64_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    void *b = realloc(*buf, elem * (size_t)c);
    if (!b) return err_setf(err, CBX_ERR_NOMEM, "stream: out of memory for %lld values", (long long)c);
    *buf = b;
    *cap = c;
    return CBX_OK;
}

cbx_status stream_create(const struct s3gen *s, const struct backend *be,
                         const struct s3gen_ref *ref, const struct stream_params *p,
                         stream_emit_fn emit, void *user, struct stream **out, char *err)
{
    *out = NULL;
    struct stream_params dp = stream_default_params();
    if (!p) p = &dp;
    if (!s || !be || !ref || !emit || !ref->embedding)
        return err_setf(err, CBX_ERR_INVALID_ARG, "stream: no model, backend, reference or callback");
    /* each chunk must add more frames than are held back (stream.h, 4) */
    if (p->first_tokens < 3 + (STREAM_LOOKAHEAD_FRAMES + STREAM_HIFT_HOLD) / 2 || p->chunk_tokens < 3 ||
        p->max_chunk_tokens < p->chunk_tokens || p->noise_frames < 2)
        return err_setf(err, CBX_ERR_INVALID_ARG,
                        "stream: first_tokens %d (>= %d), chunk_tokens %d (>= 3), max_chunk_tokens %d "
                        "(>= chunk_tokens), noise_frames %d (>= 2)",
                        p->first_tokens, 3 + (STREAM_LOOKAHEAD_FRAMES + STREAM_HIFT_HOLD) / 2,
                        p->chunk_tokens, p->max_chunk_tokens, p->noise_frames);
    if ((ref->n_prompt_token > 0) != (ref->n_prompt_feat > 0) || (ref->n_prompt_feat > 0 && !ref->prompt_feat))
        return err_setf(err, CBX_ERR_INVALID_ARG, "stream: %lld prompt tokens but %lld prompt mel frames",
                        (long long)ref->n_prompt_token, (long long)ref->n_prompt_feat);
    if (p->ws && arena_backend(p->ws) != be)
        return err_setf(err, CBX_ERR_INVALID_ARG, "stream: working arena of another backend");
    struct stream *st = calloc(1, sizeof *st);
    if (!st) return err_setf(err, CBX_ERR_NOMEM, "stream: out of memory");
    st->s = s;
    st->ref = *ref;
    st->p = *p;
    st->emit = emit;
    st->user = user;
    st->t0 = now();
    st->next = p->first_tokens;
    st->step = p->chunk_tokens;
    st->a = p->ws ? p->ws : arena_create(be, 0);
    if (st->a) arena_set_bf16(st->a, p->bf16);
    if (!st->a || grow((void **)&st->cyc, &st->cap_cyc, 1, sizeof(double), err) != CBX_OK) {
        stream_free(st);
        return err_setf(err, CBX_ERR_NOMEM, "stream: out of memory");
    }
    st->cyc[0] = 0.0;
    *out = st;
    return CBX_OK;
}

void stream_free(struct stream *st)
{
    if (!st) return;
    if (st->p.ws)
        arena_release(st->a);
    else
        arena_free(st->a);
    free(st->tok);
    free(st->mel);
    free(st->f0);
    free(st->cyc);
    free(st->tail);
    free(st->out);
    free(st);
}

const struct stream_stats *stream_get_stats(const struct stream *st) { return &st->stats; }

const float *stream_mel(const struct stream *st, int64_t *n_frames)
{
    *n_frames = st->n_mel;
    return st->mel;
}

/* ---- flow: CausalMaskedDiffWithXvec.inference(finalize) ------------------ */

/* Initial noise z [80, tm] in the persistent layout (stream.h, 5) for a
 * window of tp - off prompt frames (frames [off, tp) of the prompt)
 * followed by tm - (tp - off) generated frames starting at generated frame
 * g0 (invariant 8). */
static float *noise(struct stream *st, int64_t off, int64_t g0, int64_t tm, char *err)
{
    const int64_t tp = st->ref.n_prompt_feat, np = tp - off, ng = tm - np, R = st->p.noise_frames;
    if (g0 + ng > R) {
        err_setf(err, CBX_ERR_INVALID_ARG, "stream: %lld generated mel frames exceed noise_frames %lld",
                 (long long)(g0 + ng), (long long)R);
        return NULL;
    }
    float *z = arena_alloc_host(st->a, sizeof *z * (size_t)(N_MEL * tm));
    if (!z) {
        err_setf(err, arena_status(st->a), "stream: %s", arena_errmsg(st->a));
        return NULL;
    }
    const bool meanflow = st->s->flow.cfm.meanflow;
    struct rng_stream zs, ns;
    rng_stream_init(&zs, "s3gen.cfm.z", st->p.seed);
    rng_stream_init(&ns, "s3gen.flow.noised_mels", st->p.seed);
    for (int64_t c = 0; c < N_MEL; c++) {
        float *row = z + c * tm;
        /* z = randn_like(mu) over prompt + generated frames: a gaussian
         * takes two raw draws, value k of the row at counter 2 (c R' + k) */
        zs.counter = 2 * (uint64_t)(c * (tp + R) + off);
        rng_gaussian_fill(&zs, row, (size_t)np);
        if (meanflow) { /* z[..., Tp:] = noised_mels (1, 80, R) */
            ns.counter = 2 * (uint64_t)(c * R + g0);
            rng_gaussian_fill(&ns, row + np, (size_t)ng);
        } else {
            zs.counter = 2 * (uint64_t)(c * (tp + R) + tp + g0);
            rng_gaussian_fill(&zs, row + np, (size_t)ng);
        }
    }
    return z;
}

/* Appends the new mel frames of tokens t[0..n) to st->mel. */
static cbx_status flow_chunk(struct stream *st, const int32_t *tokens, int64_t n, bool finalize,
                             char *err)
{
    struct arena *a = st->a;
    const struct s3gen_flow *f = &st->s->flow;
    /* the prompt: all of it, or its last K tokens for the first chunk
     * (invariant 7): frames [off, Tp) of prompt_feat */
    int64_t np = st->ref.n_prompt_token, tp = st->ref.n_prompt_feat, off = 0;
    const int64_t K = st->p.first_prompt_tokens;
    if (st->n_mel == 0 && !finalize && K > 0 && K < np && tp == 2 * np) {
        off = 2 * (np - K);
        np = K;
        tp -= off;
    }
    /* the generated tokens: all so far, or from context_tokens before the
     * first frame still to make (invariant 8); n_mel is even (2 frames a
     * token, 6 or 0 dropped) */
    int64_t s0 = 0;
    if (st->p.context_tokens > 0 && st->n_mel / 2 > st->p.context_tokens) s0 = st->n_mel / 2 - st->p.context_tokens;
    const int64_t g0 = 2 * s0; /* the window's first generated frame */
    const int32_t *ptok = st->ref.prompt_token + st->ref.n_prompt_token - np;
    const float *pfeat = st->ref.prompt_feat + off * N_MEL;
    const int64_t all = np + n - s0;
    int32_t *ids = arena_alloc_host(a, sizeof *ids * (size_t)all);
    if (!ids) goto fail;
    for (int64_t i = 0; i < all; i++) {
        int32_t id = i < np ? ptok[i] : tokens[s0 + i - np];
        if (id < 0 || id >= S3GEN_SPEECH_VOCAB)
            return err_setf(err, CBX_ERR_INVALID_ARG, "stream: %s token %lld is %d, outside 0..%d",
                            i < np ? "prompt" : "speech", (long long)(i < np ? i : s0 + i - np), (int)id,
                            S3GEN_SPEECH_VOCAB - 1);
        ids[i] = id;
    }
    st->stats.flow_tokens += all;
    if (all > st->stats.flow_tokens_max) st->stats.flow_tokens_max = all;
    struct tensor *spks = s3gen_flow_spks(a, f, st->ref.embedding);      /* [1, 80] */
    struct tensor *mu = s3gen_encoder_forward(a, f->encoder, ids, all);  /* [1, 80, 2 all] */
    if (!mu) goto fail;
    /* if finalize is False: h = h[:, :-pre_lookahead_len * token_mel_ratio] */
    const int64_t tm = mu->ne[2] - (finalize ? 0 : STREAM_LOOKAHEAD_FRAMES);
    if (finalize && tm <= tp) /* upstream fails on the cond assignment or yields an empty mel */
        return err_setf(err, CBX_ERR_INVALID_ARG, "stream: %lld prompt mel frames leave nothing of the "
                        "%lld frames of prompt and speech tokens", (long long)tp, (long long)tm);
    if (g0 + tm - tp <= st->n_mel) return CBX_OK; /* nothing new yet */
    if (!finalize) mu = op_cont(a, op_slice(a, mu, 2, 0, tm));
    /* conds = zeros (1, 80, Tm); conds[:, :, :Tp] = prompt_feat^T */
    struct tensor *cond = op_fill(a, 3, (int64_t[]){1, N_MEL, tm - tp}, 0.0f);
    if (tp > 0) {
        const int64_t pf[3] = {1, tp, N_MEL};
        cond = op_concat(a, op_transpose(a, op_from_host(a, TYPE_F32, 3, pf, pfeat), 1, 2), cond, 2);
    }
    float *zh = noise(st, off, g0, tm, err);
    if (!zh) return arena_status(a) != CBX_OK ? arena_status(a) : CBX_ERR_INVALID_ARG;
    struct tensor *z = op_from_host(a, TYPE_F32, 3, (int64_t[]){1, N_MEL, tm}, zh);
    struct s3gen_cfm_params cp = {st->p.n_cfm_steps, false, NULL, NULL};
    struct tensor *x = s3gen_cfm_solve(a, &f->cfm, z, mu, spks, cond, &cp); /* [1, 80, Tm] */
    /* feat[:, :, mel_len1:], of which the frames after the previous chunk's,
     * frame-major for appending */
    const int64_t k = g0 + tm - tp - st->n_mel;
    x = op_cont(a, op_transpose(a, op_slice(a, x, 2, tp + st->n_mel - g0, k), 1, 2)); /* [1, k, 80] */
    if (!x) goto fail;
    cbx_status rc = grow((void **)&st->mel, &st->cap_mel, (st->n_mel + k) * N_MEL, sizeof(float), err);
    if (rc != CBX_OK) return rc;
    if ((rc = tensor_to_host(x, st->mel + st->n_mel * N_MEL)) != CBX_OK)
        return err_setf(err, rc, "stream: reading the mel back failed");
    st->n_mel += k;
    return CBX_OK;
fail:
    return err_setf(err, arena_status(a) != CBX_OK ? arena_status(a) : CBX_ERR_INTERNAL, "stream: %s",
                    arena_errmsg(a));
}

/* ---- HiFT with the carried source ---------------------------------------- */

/* Vocodes the window [E - C, n_mel) and emits frames [E, e_new). */
static cbx_status hift_chunk(struct stream *st, bool final, char *err)
{
    struct arena *a = st->a;
    const struct hift *h = st->s->mel2wav;
    const int64_t M = st->n_mel, E = st->E;
    const int64_t e_new = final ? M : M - STREAM_HIFT_HOLD;
    if (e_new <= E || (!final && e_new - E < st->n_tail / SPF)) return CBX_OK; /* wait for more */
    const int64_t w0 = E > STREAM_HIFT_CONTEXT ? E - STREAM_HIFT_CONTEXT : 0, wn = M - w0;
    cbx_status rc;

    /* the window's mel [1, 80, wn] from the frame-major history */
    struct tensor *mel = op_cont(a, op_transpose(a, op_from_host(a, TYPE_F32, 3, (int64_t[]){1, wn, N_MEL},
                                                                  st->mel + w0 * N_MEL), 1, 2));
    /* f0 = f0_predictor(mel); committed frames keep their f0 (invariant 2) */
    struct tensor *f0 = hift_f0(a, h, mel);
    const int pre = w0 > 0; /* the phase frame (invariant 3) */
    float *f0h = arena_alloc_host(a, sizeof *f0h * (size_t)(wn + pre));
    if (!f0 || !f0h) goto fail;
    if ((rc = tensor_to_host(f0, f0h + pre)) != CBX_OK) return err_setf(err, rc, "stream: reading f0 failed");
    for (int64_t t = w0; t < E; t++) f0h[pre + t - w0] = st->f0[t];
    if (pre) {
        double c = st->cyc[w0];
        f0h[0] = (float)(50.0 * (c - floor(c))); /* v / 50 cycles per 480 samples at 24 kHz */
    }
    struct tensor *src = hift_source(a, h, op_from_host(a, TYPE_F32, 2, (int64_t[]){1, wn + pre}, f0h),
                                     st->p.seed);                               /* [1, 1, 480 (wn + pre)] */
    if (pre) src = op_cont(a, op_slice(a, src, 2, SPF, SPF * wn));
    struct tensor *wav = hift_decode(a, h, mel, src);                           /* [1, 480 wn] */
    float *wh = arena_alloc_host(a, sizeof *wh * (size_t)(SPF * wn));
    if (!wav || !wh) goto fail;
    if ((rc = tensor_to_host(wav, wh)) != CBX_OK) return err_setf(err, rc, "stream: reading audio failed");

    /* commit f0 and the phase of frames [E, e_new) */
    if ((rc = grow((void **)&st->f0, &st->cap_f0, e_new, sizeof(float), err)) != CBX_OK ||
        (rc = grow((void **)&st->cyc, &st->cap_cyc, e_new + 1, sizeof(double), err)) != CBX_OK)
        return rc;
    double *cyc = st->cyc;
    for (int64_t t = E; t < e_new; t++) {
        st->f0[t] = f0h[pre + t - w0];
        /* SineGen: F = f0 / 24000 per sample, 480 samples per frame */
        cyc[t + 1] = cyc[t] + (double)(st->f0[t] / (float)HIFT_SAMPLE_RATE) * SPF;
    }

    /* the chunk: frames [E, e_new), the held tail cross-faded in */
    const int64_t n = SPF * (e_new - E);
    const float *nw = wh + SPF * (E - w0);
    if ((rc = grow((void **)&st->out, &st->cap_out, n, sizeof(float), err)) != CBX_OK) return rc;
    float *o = st->out;
    assert(st->n_tail <= n);
    for (int64_t i = 0; i < n; i++) {
        float y = nw[i];
        if (i < st->n_tail) {
            float w = 0.5f * (1.0f + cosf((float)M_PI * ((float)i + 0.5f) / (float)st->n_tail));
            y = w * st->tail[i] + (1.0f - w) * y;
        }
        o[i] = y;
    }
    /* output_wavs[:, :len(trim_fade)] *= trim_fade, at the stream's start only */
    for (int64_t i = 0; i < n && st->n_out + i < S3GEN_TRIM_FADE; i++) o[i] *= st->s->trim_fade[st->n_out + i];
    /* hold the rendering of [e_new, M) for the next seam */
    st->n_tail = SPF * (M - e_new);
    if (st->n_tail > 0) {
        float *t = realloc(st->tail, sizeof *t * (size_t)st->n_tail);
        if (!t) return err_setf(err, CBX_ERR_NOMEM, "stream: out of memory");
        st->tail = t;
        memcpy(t, wh + SPF * (e_new - w0), sizeof *t * (size_t)st->n_tail);
    }
    st->E = e_new;
    if (st->stats.n_chunks == 0) st->stats.t_first = now() - st->t0;
    st->stats.n_chunks++;
    st->stats.n_samples += n;
    st->n_out += n;
    if (st->emit(st->user, o, n)) return err_setf(err, CBX_ERR_CANCELLED, "cancelled");
    return CBX_OK;
fail:
    return err_setf(err, arena_status(a) != CBX_OK ? arena_status(a) : CBX_ERR_INTERNAL, "stream: %s",
                    arena_errmsg(a));
}

static cbx_status chunk(struct stream *st, int64_t n, bool final, char *err)
{
    arena_reset(st->a);
    double t = now();
    cbx_status rc = flow_chunk(st, st->tok, n, final, err);
    st->stats.t_flow += now() - t;
    if (rc != CBX_OK) return rc;
    t = now();
    rc = hift_chunk(st, final, err);
    st->stats.t_hift += now() - t;
    return rc;
}

cbx_status stream_push(struct stream *st, const int32_t *tokens, int64_t n, char *err)
{
    if (st->rc != CBX_OK || st->finished)
        return err_setf(err, st->rc != CBX_OK ? st->rc : CBX_ERR_INVALID_ARG,
                        "stream: %s", st->rc != CBX_OK ? "an earlier chunk failed" : "already finished");
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= S3GEN_SPEECH_VOCAB)
            return st->rc = err_setf(err, CBX_ERR_INVALID_ARG, "stream: speech token %lld is %d, outside 0..%d",
                                     (long long)(st->n_tok + i), (int)tokens[i], S3GEN_SPEECH_VOCAB - 1);
    cbx_status rc = grow((void **)&st->tok, &st->cap_tok, st->n_tok + n, sizeof(int32_t), err);
    if (rc != CBX_OK) return st->rc = rc;
    memcpy(st->tok + st->n_tok, tokens, sizeof(int32_t) * (size_t)n);
    st->n_tok += n;
    while (st->n_tok >= st->next) {
        if ((rc = chunk(st, st->next, false, err)) != CBX_OK) return st->rc = rc;
        st->next += st->step;
        st->step = st->step * 2 < st->p.max_chunk_tokens ? st->step * 2 : st->p.max_chunk_tokens;
    }
    return CBX_OK;
}

cbx_status stream_finish(struct stream *st, const int32_t *tail, int64_t n_tail, char *err)
{
    if (st->rc != CBX_OK || st->finished)
        return err_setf(err, st->rc != CBX_OK ? st->rc : CBX_ERR_INVALID_ARG,
                        "stream: %s", st->rc != CBX_OK ? "an earlier chunk failed" : "already finished");
    st->finished = true;
    if (st->n_tok + n_tail < 1) return st->rc = err_setf(err, CBX_ERR_INVALID_ARG, "stream: no speech tokens");
    cbx_status rc = grow((void **)&st->tok, &st->cap_tok, st->n_tok + n_tail, sizeof(int32_t), err);
    if (rc != CBX_OK) return st->rc = rc;
    /* torch.cat([speech_tokens, tail]) at the true end only; not kept as
     * pushed tokens */
    if (n_tail > 0) memcpy(st->tok + st->n_tok, tail, sizeof(int32_t) * (size_t)n_tail);
    if ((rc = chunk(st, st->n_tok + n_tail, true, err)) != CBX_OK) return st->rc = rc;
    assert(st->E == st->n_mel && st->n_out == SPF * st->n_mel);
    return CBX_OK;
}

cbx_status stream_push_mel(struct stream *st, const float *mel, int64_t n, bool final, char *err)
{
    if (st->rc != CBX_OK || st->finished)
        return err_setf(err, st->rc != CBX_OK ? st->rc : CBX_ERR_INVALID_ARG,
                        "stream: %s", st->rc != CBX_OK ? "an earlier chunk failed" : "already finished");
    if (n < 0 || (n > 0 && !mel) || (final && st->n_mel + n < 1))
        return st->rc = err_setf(err, CBX_ERR_INVALID_ARG, "stream: %lld mel frames", (long long)n);
    cbx_status rc = grow((void **)&st->mel, &st->cap_mel, (st->n_mel + n) * N_MEL, sizeof(float), err);
    if (rc != CBX_OK) return st->rc = rc;
    if (n > 0) memcpy(st->mel + st->n_mel * N_MEL, mel, sizeof(float) * (size_t)(n * N_MEL));
    st->n_mel += n;
    st->finished = final;
    arena_reset(st->a);
    const double t = now();
    rc = hift_chunk(st, final, err);
    st->stats.t_hift += now() - t;
    return st->rc = rc;
}
