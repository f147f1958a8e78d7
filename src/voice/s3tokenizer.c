/* s3tokenizer.c - S3TokenizerV2 ("speech_tokenizer_v2_25hz"): log-mel,
 * AudioEncoderV2 (conv stem, six FSMN attention blocks with rotary
 * embedding) and the FSQ quantizer, eval mode, in call order.
 * Ports chatterbox/models/s3tokenizer/s3tokenizer.py (S3Tokenizer:
 * log_mel_spectrogram, forward) and the s3tokenizer package at commit
 * 2abe1c5, model_v2.py (precompute_freqs_cis, apply_rotary_emb,
 * FSQCodebook, FSMNMultiHeadAttention, ResidualAttentionBlock,
 * AudioEncoderV2, S3TokenizerV2.quantize and _quantize_mixed_batch) and
 * utils.py (merge_tokenized_segments). See spec/voice.md §5.
 *
 * One waveform at a time: upstream's batch masks (make_non_pad_mask,
 * mask_to_bias) are all ones / all zero for an unpadded input, so the
 * `x * mask` products and the attention bias are identities and are left
 * out; a padded-and-masked window of the long-input path computes the same
 * values as the window encoded at its true length, which is what is done. */
#include "voice/s3tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/backend.h"
#include "core/ops.h"
#include "core/weights.h"
#include "core/window.h"
#include "io/weights.h"
#include "voice/mel.h"

enum {
    N_FFT = 400, HOP = 160, N_FREQ = N_FFT / 2 + 1, N_MELS = 128,
    N_STATE = 1280, N_HEAD = 20, HEAD_DIM = 64, N_MLP = 4 * N_STATE,
    FSMN_K = 31, N_LAYER = 6, FSQ_DIM = 8,
    /* _quantize_mixed_batch: 30 s windows, 4 s overlap, 25 tokens/s */
    MAX_FRAMES = 3000, WINDOW_STRIDE = 2600, MERGE_DROP = (4 / 2) * 25,
};

struct s3tok_block {
    const struct tensor *attn_ln_w, *attn_ln_b;
    const struct tensor *query_w, *query_b, *key_w, *value_w, *value_b, *out_w, *out_b;
    const struct tensor *fsmn_w; /* [1280, 1, 31] depthwise */
    const struct tensor *mlp_ln_w, *mlp_ln_b;
    const struct tensor *mlp0_w, *mlp0_b, *mlp2_w, *mlp2_b;
};

struct s3tokenizer {
    float mel_filters[N_MELS * N_FREQ]; /* tokenizer._mel_filters [128, 201] */
    float window[N_FFT];                /* tokenizer.window (periodic Hann 400) */
    const struct tensor *conv1_w, *conv1_b, *conv2_w, *conv2_b;
    struct s3tok_block blocks[N_LAYER];
    const struct tensor *project_down_w, *project_down_b;
    struct weight_set *ws; /* every weight, placed on the load's backend */
};

/* A stored buffer as float32 on the host (F32/F16/BF16). */
static void buffer_f32(const struct tensor *t, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (t->type == TYPE_F32) dst[i] = ((const float *)t->data)[i];
        else if (t->type == TYPE_F16) dst[i] = fp16_to_f32(((const uint16_t *)t->data)[i]);
        else dst[i] = bf16_to_f32(((const uint16_t *)t->data)[i]);
    }
}

/* The weights s3tok_load found, placed on t->ws as stored. */
static void place(struct s3tokenizer *t, cbx_status *rc, char *err)
{
#define P(field, role) (field) = weight_place(t->ws, (field), (role), WEIGHT_AS_STORED, 0, rc, err)
    P(t->conv1_w, WEIGHT_CONV1D);
    P(t->conv1_b, WEIGHT_PLAIN);
    P(t->conv2_w, WEIGHT_CONV1D);
    P(t->conv2_b, WEIGHT_PLAIN);
    for (int i = 0; i < N_LAYER; i++) {
        struct s3tok_block *b = &t->blocks[i];
        P(b->attn_ln_w, WEIGHT_NORM);
        P(b->attn_ln_b, WEIGHT_NORM);
        P(b->query_w, WEIGHT_LINEAR);
        P(b->query_b, WEIGHT_PLAIN);
        P(b->key_w, WEIGHT_LINEAR);
        P(b->value_w, WEIGHT_LINEAR);
        P(b->value_b, WEIGHT_PLAIN);
        P(b->out_w, WEIGHT_LINEAR);
        P(b->out_b, WEIGHT_PLAIN);
        P(b->fsmn_w, WEIGHT_CONV1D);
        P(b->mlp_ln_w, WEIGHT_NORM);
        P(b->mlp_ln_b, WEIGHT_NORM);
        P(b->mlp0_w, WEIGHT_LINEAR);
        P(b->mlp0_b, WEIGHT_PLAIN);
        P(b->mlp2_w, WEIGHT_LINEAR);
        P(b->mlp2_b, WEIGHT_PLAIN);
    }
    P(t->project_down_w, WEIGHT_LINEAR);
    P(t->project_down_b, WEIGHT_PLAIN);
#undef P
}

cbx_status s3tok_load(struct s3tokenizer **out, const struct weights *w, const struct backend *be, char *err)
{
    *out = NULL;
    struct s3tokenizer *t = calloc(1, sizeof *t);
    if (!t || !(t->ws = weight_set_create(be))) {
        free(t);
        return err_setf(err, CBX_ERR_NOMEM, "s3tokenizer: out of memory");
    }
    cbx_status rc = CBX_OK;
    const int64_t d1[1] = {N_STATE}, dd[2] = {N_STATE, N_STATE};
    /* The two buffers are in s3gen.pt and s3gen_meanflow.safetensors but
     * not in s3gen.safetensors, whose loader rebuilds them with the same
     * recipe (librosa mel bank, torch.hann_window(400)). */
    if (weights_has(w, "tokenizer._mel_filters")) {
        const struct tensor *mf = weights_get(w, "tokenizer._mel_filters", 2,
                                              (int64_t[]){N_MELS, N_FREQ}, &rc, err);
        if (mf && !dtype_traits(mf->type)->quantized) buffer_f32(mf, t->mel_filters, N_MELS * N_FREQ);
        else if (mf) rc = err_setf(err, CBX_ERR_FORMAT, "s3tokenizer: tokenizer._mel_filters is %s, "
                                   "want f32/f16/bf16", dtype_name(mf->type));
    } else {
        mel_filters_librosa(16000, N_FFT, N_MELS, 0.0, 8000.0, 0, t->mel_filters);
    }
    if (weights_has(w, "tokenizer.window")) {
        const struct tensor *wi = weights_get(w, "tokenizer.window", 1, (int64_t[]){N_FFT}, &rc, err);
        if (wi && !dtype_traits(wi->type)->quantized) buffer_f32(wi, t->window, N_FFT);
        else if (wi) rc = err_setf(err, CBX_ERR_FORMAT, "s3tokenizer: tokenizer.window is %s, "
                                   "want f32/f16/bf16", dtype_name(wi->type));
    } else {
        window_hann(t->window, N_FFT, true);
    }
    t->conv1_w = weights_get(w, "tokenizer.encoder.conv1.weight", 3,
                             (int64_t[]){N_STATE, N_MELS, 3}, &rc, err);
    t->conv1_b = weights_get(w, "tokenizer.encoder.conv1.bias", 1, d1, &rc, err);
    t->conv2_w = weights_get(w, "tokenizer.encoder.conv2.weight", 3,
                             (int64_t[]){N_STATE, N_STATE, 3}, &rc, err);
    t->conv2_b = weights_get(w, "tokenizer.encoder.conv2.bias", 1, d1, &rc, err);
    for (int i = 0; i < N_LAYER; i++) {
        struct s3tok_block *b = &t->blocks[i];
#define W(field, suffix, nd, shape) \
    b->field = weights_getf(w, &rc, err, nd, shape, "tokenizer.encoder.blocks.%d." suffix, i)
        W(attn_ln_w, "attn_ln.weight", 1, d1);
        W(attn_ln_b, "attn_ln.bias", 1, d1);
        W(query_w, "attn.query.weight", 2, dd);
        W(query_b, "attn.query.bias", 1, d1);
        W(key_w, "attn.key.weight", 2, dd);
        W(value_w, "attn.value.weight", 2, dd);
        W(value_b, "attn.value.bias", 1, d1);
        W(out_w, "attn.out.weight", 2, dd);
        W(out_b, "attn.out.bias", 1, d1);
        W(fsmn_w, "attn.fsmn_block.weight", 3, ((int64_t[]){N_STATE, 1, FSMN_K}));
        W(mlp_ln_w, "mlp_ln.weight", 1, d1);
        W(mlp_ln_b, "mlp_ln.bias", 1, d1);
        W(mlp0_w, "mlp.0.weight", 2, ((int64_t[]){N_MLP, N_STATE}));
        W(mlp0_b, "mlp.0.bias", 1, ((int64_t[]){N_MLP}));
        W(mlp2_w, "mlp.2.weight", 2, ((int64_t[]){N_STATE, N_MLP}));
        W(mlp2_b, "mlp.2.bias", 1, d1);
#undef W
    }
    t->project_down_w = weights_get(w, "tokenizer.quantizer._codebook.project_down.weight", 2,
                                    (int64_t[]){FSQ_DIM, N_STATE}, &rc, err);
    t->project_down_b = weights_get(w, "tokenizer.quantizer._codebook.project_down.bias", 1,
                                    (int64_t[]){FSQ_DIM}, &rc, err);
    place(t, &rc, err);
    if (rc != CBX_OK) {
        s3tok_free(t);
        return rc;
    }
    *out = t;
    return CBX_OK;
}

void s3tok_free(struct s3tokenizer *t)
{
    if (t) weight_set_free(t->ws);
    free(t);
}

/* S3Tokenizer.log_mel_spectrogram(audio) -> [128, n // 160] (arena-owned). */
static struct tensor *log_mel(struct arena *a, const struct s3tokenizer *t, const float *wav,
                              int64_t n)
{
    struct tensor *audio = op_from_host(a, TYPE_F32, 1, (int64_t[]){n}, wav);
    struct tensor *window = op_from_host(a, TYPE_F32, 1, (int64_t[]){N_FFT}, t->window);
    struct tensor *filters = op_from_host(a, TYPE_F32, 2, (int64_t[]){N_MELS, N_FREQ},
                                          t->mel_filters);
    /* torch.stft(audio, 400, 160, window=window, return_complex=True):
     * center=True, pad_mode reflect */
    struct stft_params sp = {.n_fft = N_FFT, .hop = HOP, .win_length = N_FFT,
                             .center = true, .pad_mode = PAD_REFLECT};
    struct tensor *stft = op_stft(a, audio, window, &sp);           /* [201, n//160 + 1, 2] */
    if (!stft) return NULL;
    int64_t frames = stft->ne[1] - 1;
    /* magnitudes = stft[..., :-1].abs()**2: |z| rounded to float32 first */
    struct tensor *mag = op_slice(a, stft, 1, 0, frames);          /* [201, F, 2] */
    mag = op_reduce(a, op_unary(a, mag, UN_SQR, 0, 0), RED_SUM);   /* [201, F, 1] */
    mag = op_unary(a, op_unary(a, mag, UN_SQRT, 0, 0), UN_SQR, 0, 0);
    mag = op_reshape(a, mag, 2, (int64_t[]){N_FREQ, frames});
    struct tensor *mel_spec = op_matmul(a, filters, mag);            /* [128, F] */
    /* torch.clamp(mel_spec, min=1e-10).log10() */
    struct tensor *log_spec = op_unary(a, mel_spec, UN_CLAMP, 1e-10f, INFINITY);
    log_spec = op_unary(a, op_unary(a, log_spec, UN_LOG, 0, 0), UN_SCALE,
                        (float)(1.0 / M_LN10), 0.0f);
    /* torch.maximum(log_spec, log_spec.max() - 8.0): a global max */
    struct tensor *flat = op_reshape(a, log_spec, 2, (int64_t[]){1, N_MELS * frames});
    struct tensor *mx = op_reduce(a, flat, RED_MAX);                /* [1, 1] */
    float mx_h = 0;
    if (!mx || tensor_to_host(mx, &mx_h) != CBX_OK) {
        if (mx) arena_fail(a, CBX_ERR_INTERNAL, "s3tokenizer: device read-back failed");
        return NULL;
    }
    log_spec = op_unary(a, log_spec, UN_CLAMP, mx_h - 8.0f, INFINITY);
    /* (log_spec + 4.0) / 4.0, exactly x * 0.25 + 1 in float32 */
    return op_unary(a, log_spec, UN_SCALE, 0.25f, 1.0f);
}

/* FSMNMultiHeadAttention.forward (mask and mask_pad all ones). x[L, 1280]. */
static struct tensor *fsmn_attention(struct arena *a, const struct s3tok_block *b,
                                     const struct tensor *x, const struct tensor *pos)
{
    int64_t L = x->ne[0];
    struct tensor *q = op_linear(a, x, b->query_w, b->query_b);    /* [L, 1280] */
    struct tensor *k = op_linear(a, x, b->key_w, NULL);
    struct tensor *v = op_linear(a, x, b->value_w, b->value_b);
    /* view(B, T, n_head, 64); apply_rotary_emb: rotate-half layout with
     * cos/sin of precompute_freqs_cis(64, 2048) duplicated to 64 */
    const int to_heads[4] = {0, 2, 1, 3};                          /* [1,L,H,D] -> [1,H,L,D] */
    const int64_t heads[4] = {1, L, N_HEAD, HEAD_DIM};
    struct rope_params rp = {.theta = 10000.0f, .n_dims = HEAD_DIM};
    q = op_rope(a, op_permute(a, op_reshape(a, q, 4, heads), to_heads), pos, &rp);
    k = op_rope(a, op_permute(a, op_reshape(a, k, 4, heads), to_heads), pos, &rp);
    struct tensor *vh = op_permute(a, op_reshape(a, v, 4, heads), to_heads);
    /* forward_fsmn(v): depthwise conv (k 31, zero pad 15 | 15) over time + v */
    struct conv1d_params cp = {.stride = 1, .dilation = 1, .groups = N_STATE,
                               .pad_left = (FSMN_K - 1) / 2,
                               .pad_right = FSMN_K - 1 - (FSMN_K - 1) / 2};
    struct tensor *fsm = op_conv1d(a, op_transpose(a, v, 0, 1), b->fsmn_w, NULL, &cp); /* [1280, L] */
    struct tensor *fsm_memory = op_add(a, op_transpose(a, fsm, 0, 1), v);             /* [L, 1280] */
    /* (q * 64^-0.25) @ (k * 64^-0.25)^T, softmax, @ v: overall scale 1/8 */
    struct attn_params ap = {.scale = 1.0f / sqrtf((float)HEAD_DIM), .causal = false};
    struct tensor *wv = op_attention(a, q, k, vh, NULL, &ap);        /* [1, H, L, D] */
    wv = op_reshape(a, op_cont(a, op_permute(a, wv, to_heads)), 2,
                    (int64_t[]){L, N_STATE});                       /* [L, 1280] */
    /* self.out(wv) + fsm_memory */
    return op_add(a, op_linear(a, wv, b->out_w, b->out_b), fsm_memory);
}

/* AudioEncoderV2.forward + FSQCodebook.encode of one unpadded mel
 * [128, F] (a view of the arena's log-mel); tokens written to host.
 * Each block runs in the scratch arena s, reset after the block once its
 * output is copied back into x (so the activations of one block, ~25 MB
 * for 10 s, are the peak rather than those of all six). */
static cbx_status encode(struct arena *a, struct arena *s, const struct s3tokenizer *t,
                         const struct tensor *mel, int32_t *tokens, int64_t *n_out)
{
    *n_out = 0;
    struct conv1d_params cp = {.stride = 2, .dilation = 1, .groups = 1,
                               .pad_left = 1, .pad_right = 1};
    /* x = gelu(conv1(x)); x = gelu(conv2(x)); L -> (L - 1) // 2 + 1 twice */
    struct tensor *x = op_unary(a, op_conv1d(a, mel, t->conv1_w, t->conv1_b, &cp), UN_GELU, 0, 0);
    x = op_unary(a, op_conv1d(a, x, t->conv2_w, t->conv2_b, &cp), UN_GELU, 0, 0); /* [1280, L] */
    x = op_cont(a, op_transpose(a, x, 0, 1));                       /* [L, 1280] */
    if (!x) return arena_status(a);
    int64_t L = x->ne[0];
    int32_t *pos_h = arena_alloc_host(a, (size_t)L * sizeof *pos_h);
    if (!pos_h) return arena_status(a);
    for (int64_t i = 0; i < L; i++) pos_h[i] = (int32_t)i;
    struct tensor *pos = op_from_host(a, TYPE_I32, 1, (int64_t[]){L}, pos_h);
    for (int i = 0; i < N_LAYER && arena_status(a) == CBX_OK; i++) {
        const struct s3tok_block *b = &t->blocks[i];
        arena_reset(s);
        /* ResidualAttentionBlock: x = x + attn(attn_ln(x)); x = x + mlp(mlp_ln(x)) */
        struct tensor *h = op_layer_norm(s, x, b->attn_ln_w, b->attn_ln_b, 1e-6f);
        struct tensor *y = op_add(s, x, fsmn_attention(s, b, h, pos));
        h = op_layer_norm(s, y, b->mlp_ln_w, b->mlp_ln_b, 1e-5f);
        h = op_unary(s, op_linear(s, h, b->mlp0_w, b->mlp0_b), UN_GELU, 0, 0);
        y = op_add(s, y, op_linear(s, h, b->mlp2_w, b->mlp2_b));
        if (!y) {
            arena_fail(a, arena_status(s), "encoder.blocks.%d: %s", i, arena_errmsg(s));
            break;
        }
        op_copy_into(a, x, y);
    }
    if (arena_status(a) != CBX_OK) return arena_status(a);
    /* FSQCodebook.encode: h = tanh(project_down(x)) * 0.999 (float32) */
    struct tensor *h = op_linear(a, x, t->project_down_w, t->project_down_b); /* [L, 8] */
    h = op_unary(a, op_unary(a, h, UN_TANH, 0, 0), UN_SCALE, 0.9990000128746033f, 0.0f);
    float *hh = arena_alloc_host(a, (size_t)L * FSQ_DIM * sizeof *hh);
    if (!h || !hh) return arena_status(a);
    cbx_status rc = tensor_to_host(h, hh);
    if (rc != CBX_OK) return rc;
    /* h.round() + 1 (half to even) -> digits 0..2; sum(h * 3^i) */
    for (int64_t r = 0; r < L; r++) {
        int32_t tok = 0, p3 = 1;
        for (int i = 0; i < FSQ_DIM; i++, p3 *= 3)
            tok += ((int32_t)rintf(hh[r * FSQ_DIM + i]) + 1) * p3;
        tokens[r] = tok;
    }
    *n_out = L;
    return CBX_OK;
}

static int64_t n_tokens_for(int64_t frames)
{
    int64_t l1 = (frames - 1) / 2 + 1;
    return (l1 - 1) / 2 + 1;
}

int64_t s3tok_n_tokens(int64_t n)
{
    return n > N_FFT / 2 ? n_tokens_for(n / HOP) : 0;
}

/* The log-mel [128, F0] of wav16 [n] in a new arena of be (*ap, the
 * caller's to free); NULL, with *rc and err set and no arena, when n is
 * too short or the computation failed. */
static struct tensor *mel_arena(const struct s3tokenizer *t, const struct backend *be, const float *wav16,
                                int64_t n, struct arena **ap, cbx_status *rc, char *err)
{
    *ap = NULL;
    if (n <= N_FFT / 2) { /* torch.stft's reflect padding needs more than 200 samples */
        *rc = err_setf(err, CBX_ERR_INVALID_ARG, "s3tokenizer: %lld samples at 16 kHz, need more than %d",
                       (long long)n, N_FFT / 2);
        return NULL;
    }
    struct arena *a = arena_create(be, 0);
    if (!a) {
        *rc = err_setf(err, CBX_ERR_NOMEM, "s3tokenizer: out of memory");
        return NULL;
    }
    struct tensor *m = log_mel(a, t, wav16, n);
    if (!m) {
        *rc = err_setf(err, arena_status(a) != CBX_OK ? arena_status(a) : CBX_ERR_INTERNAL,
                       "s3tokenizer log-mel: %s", arena_errmsg(a));
        arena_free(a);
        return NULL;
    }
    *ap = a;
    return m;
}

cbx_status s3tok_log_mel(const struct s3tokenizer *t, const struct backend *be,
                         const float *wav16, int64_t n, float **mel, int64_t *frames,
                         char *err)
{
    *mel = NULL;
    *frames = 0;
    struct arena *a;
    cbx_status rc = CBX_OK;
    struct tensor *m = mel_arena(t, be, wav16, n, &a, &rc, err);
    if (!m) return rc;
    float *res = malloc(tensor_nbytes(m));
    if (!res) {
        rc = err_setf(err, CBX_ERR_NOMEM, "s3tokenizer: out of memory");
    } else if ((rc = tensor_to_host(m, res)) != CBX_OK) {
        err_setf(err, rc, "s3tokenizer log-mel: device read-back failed");
    } else {
        *mel = res;
        *frames = m->ne[1];
        res = NULL;
    }
    free(res);
    arena_free(a);
    return rc;
}

/* quantize() of mel[128, F0] cut to its first F frames: a host mel
 * (melh, stride F0) or one already in the arena (mel). */
static cbx_status quantize(struct arena *a, const struct s3tokenizer *t, struct tensor *mel,
                           const float *melh, int64_t F0, int64_t F, int32_t **tokens,
                           int64_t *n_tokens, char *err)
{
    int32_t *res = NULL, *seg = NULL;
    float *win = NULL, *host = NULL;
    cbx_status rc = CBX_OK;
    struct arena *scratch = arena_create(arena_backend(a), 0);
    if (!scratch) return err_setf(err, CBX_ERR_NOMEM, "s3tokenizer: out of memory");
    /* one pass up to 3000 frames; otherwise 3000-frame windows every 2600
     * frames (_quantize_mixed_batch), merged by dropping 50 tokens at each
     * inner edge (merge_tokenized_segments) */
    int64_t n_win = F > MAX_FRAMES ? (F - 1) / WINDOW_STRIDE + 1 : 1;
    int64_t wmax = F > MAX_FRAMES ? MAX_FRAMES : F;
    res = malloc((size_t)n_tokens_for(F) * sizeof *res);
    seg = malloc((size_t)n_tokens_for(wmax) * sizeof *seg);
    if (!res || !seg) {
        rc = err_setf(err, CBX_ERR_NOMEM, "s3tokenizer: out of memory");
        goto cleanup;
    }
    if (n_win > 1 && !melh) { /* the arena is reset per window: keep the mel on the host */
        host = malloc(tensor_nbytes(mel));
        if (!host) {
            rc = err_setf(err, CBX_ERR_NOMEM, "s3tokenizer: out of memory (%lld mel frames)",
                          (long long)F0);
            goto cleanup;
        }
        if ((rc = tensor_to_host(mel, host)) != CBX_OK) {
            err_setf(err, rc, "s3tokenizer: device read-back failed");
            goto cleanup;
        }
        melh = host;
    }
    if (melh) {
        win = malloc((size_t)N_MELS * (size_t)wmax * sizeof *win);
        if (!win) {
            rc = err_setf(err, CBX_ERR_NOMEM, "s3tokenizer: out of memory");
            goto cleanup;
        }
    }
    int64_t count = 0;
    for (int64_t w = 0; w < n_win; w++) {
        int64_t start = w * WINDOW_STRIDE, len = F - start, got = 0;
        if (len > wmax) len = wmax;
        struct tensor *x;
        if (melh) {
            arena_reset(a);
            for (int m = 0; m < N_MELS; m++)
                memcpy(win + m * len, melh + m * F0 + start, (size_t)len * sizeof *win);
            x = op_from_host(a, TYPE_F32, 2, (int64_t[]){N_MELS, len}, win);
        } else {
            x = op_slice(a, mel, 1, 0, len);
        }
        rc = encode(a, scratch, t, x, seg, &got);
        if (rc != CBX_OK) {
            err_setf(err, rc, "s3tokenizer: %s", arena_errmsg(a));
            goto cleanup;
        }
        int64_t lo = 0, hi = got;
        if (n_win > 1) {
            if (w > 0) lo = MERGE_DROP;
            if (w < n_win - 1) hi = got - MERGE_DROP;
        }
        for (int64_t i = lo; i < hi; i++) res[count++] = seg[i];
    }
    *tokens = res;
    *n_tokens = count;
    res = NULL;
cleanup:
    arena_free(scratch);
    free(win);
    free(host);
    free(seg);
    free(res);
    return rc;
}

cbx_status s3tok_quantize(const struct s3tokenizer *t, const struct backend *be,
                          const float *mel, int64_t frames, int32_t **tokens,
                          int64_t *n_tokens, char *err)
{
    *tokens = NULL;
    *n_tokens = 0;
    if (frames < 1)
        return err_setf(err, CBX_ERR_INVALID_ARG, "s3tokenizer: %lld mel frames, need at least 1",
                        (long long)frames);
    struct arena *a = arena_create(be, 0);
    if (!a) return err_setf(err, CBX_ERR_NOMEM, "s3tokenizer: out of memory");
    cbx_status rc = quantize(a, t, NULL, mel, frames, frames, tokens, n_tokens, err);
    arena_free(a);
    return rc;
}

cbx_status s3tok_tokenize(const struct s3tokenizer *t, const struct backend *be,
                          const float *wav16, int64_t n, int64_t max_len,
                          int32_t **tokens, int64_t *n_tokens, char *err)
{
    *tokens = NULL;
    *n_tokens = 0;
    if (max_len < 0)
        return err_setf(err, CBX_ERR_INVALID_ARG, "s3tokenizer: max_len %lld < 0",
                        (long long)max_len);
    struct arena *a;
    cbx_status rc = CBX_OK;
    struct tensor *mel = mel_arena(t, be, wav16, n, &a, &rc, err); /* [128, F0] */
    if (!mel) return rc;
    int64_t F0 = mel->ne[1], F = F0;
    /* forward(max_len=P): mel[..., :4 * P], after the normalisation */
    if (max_len > 0 && F > 4 * max_len) F = 4 * max_len;
    rc = quantize(a, t, mel, NULL, F0, F, tokens, n_tokens, err);
    arena_free(a);
    return rc;
}

int64_t s3tok_reconcile_prompt(int64_t n_tokens, int64_t mel_frames)
{
    /* if prompt_feat.shape[1] != 2 * prompt_token.shape[1]:
     *     prompt_token = prompt_token[:, :prompt_feat.shape[1] // 2] */
    if (mel_frames == 2 * n_tokens) return n_tokens;
    int64_t keep = mel_frames / 2;
    return keep < n_tokens ? keep : n_tokens;
}
