/* encoder.c - S3Gen flow front end: speech tokens -> mu (1, 80, 2T).
 * Ports chatterbox models/s3gen/flow.py (CausalMaskedDiffWithXvec.inference:
 * input_embedding, encoder, encoder_proj) and transformer/
 * upsample_encoder.py (UpsampleConformerEncoder, PreLookaheadLayer,
 * Upsample1D), subsampling.py (LinearNoSubsampling), embedding.py
 * (EspnetRelPositionalEncoding), encoder_layer.py (ConformerEncoderLayer),
 * attention.py (RelPositionMultiHeadedAttention), positionwise_feed_forward.py
 * (PositionwiseFeedForward), chatterbox 0.1.x / CosyVoice 2, in call order.
 * spec/s3gen.md §2-§4.
 *
 * Configuration as upstream constructs it (spec §4): pre-norm conformer
 * layers without macaron feed-forward and without convolution module,
 * SiLU feed-forward, full (bidirectional) attention; the sizes (width,
 * heads, layer counts, look-ahead, upsampling stride, vocabulary) are read
 * from the weights. */
#include "encoder.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/weights.h"
#include "core/quant.h"

/* LinearNoSubsampling: out = Sequential(Linear, LayerNorm(eps 1e-5), Dropout). */
struct s3gen_embed {
    const struct tensor *out_0_w, *out_0_b; /* embed.out.0 [D, D] */
    const struct tensor *out_1_w, *out_1_b; /* embed.out.1 LayerNorm [D] */
};

/* ConformerEncoderLayer (normalize_before, no macaron, no conv module). */
struct s3gen_layer {
    const struct tensor *norm_mha_w, *norm_mha_b;  /* eps 1e-12 */
    const struct tensor *linear_q_w, *linear_q_b;  /* self_attn.* [D, D] / [D] */
    const struct tensor *linear_k_w, *linear_k_b;
    const struct tensor *linear_v_w, *linear_v_b;
    const struct tensor *linear_out_w, *linear_out_b;
    const struct tensor *linear_pos_w;             /* no bias */
    const struct tensor *pos_bias_u, *pos_bias_v;  /* [H, Dk] */
    const struct tensor *norm_ff_w, *norm_ff_b;    /* eps 1e-12 */
    const struct tensor *w_1_w, *w_1_b;            /* feed_forward.w_1 [F, D] */
    const struct tensor *w_2_w, *w_2_b;            /* feed_forward.w_2 [D, F] */
};

struct s3gen_encoder {
    int d_model, n_head, d_k;      /* 512, 8, 64 */
    int pre_lookahead_len;         /* 3 (conv1 kernel - 1) */
    int up_stride;                 /* 2 (up_layer conv kernel = 2*stride + 1) */
    int n_blocks, n_up_blocks;     /* 6, 4 */
    int64_t vocab;                 /* 6561 */
    const struct tensor *input_embedding;                    /* flow.input_embedding [V, D] */
    struct s3gen_embed embed, up_embed;
    const struct tensor *pre_conv1_w, *pre_conv1_b;          /* [D, D, L+1] */
    const struct tensor *pre_conv2_w, *pre_conv2_b;          /* [D, D, 3] */
    struct s3gen_layer *encoders, *up_encoders;
    const struct tensor *up_conv_w, *up_conv_b;              /* [D, D, 2s+1] */
    const struct tensor *after_norm_w, *after_norm_b;        /* eps 1e-5 */
    const struct tensor *encoder_proj_w, *encoder_proj_b;    /* flow.encoder_proj [80, D] */
    struct weight_set *ws;   /* every weight, placed on the load's backend */
};

void s3gen_encoder_free(struct s3gen_encoder *e)
{
    if (!e) return;
    weight_set_free(e->ws);
    free(e->encoders);
    free(e->up_encoders);
    free(e);
}

/* Placement: p(x, role) as stored; as_f32(x) a vector the ops want in F32
 * (biases; pos_bias_u/v), converted when stored otherwise. */
#define PL(x, role) weight_place(e->ws, (x), (role), WEIGHT_AS_STORED, 0, rc, err)
#define as_f32(x) weight_place(e->ws, (x), WEIGHT_PLAIN, TYPE_F32, 0, rc, err)

static void load_embed(struct s3gen_encoder *e, const struct weights *w, const char *prefix,
                       struct s3gen_embed *m, cbx_status *rc, char *err)
{
    const int64_t D = e->d_model, dd[2] = {D, D}, d1[1] = {D};
    m->out_0_w = PL(weights_getf(w, rc, err, 2, dd, "flow.encoder.%s.out.0.weight", prefix), WEIGHT_LINEAR);
    m->out_0_b = as_f32(weights_getf(w, rc, err, 1, d1, "flow.encoder.%s.out.0.bias", prefix));
    m->out_1_w = PL(weights_getf(w, rc, err, 1, d1, "flow.encoder.%s.out.1.weight", prefix), WEIGHT_NORM);
    m->out_1_b = PL(weights_getf(w, rc, err, 1, d1, "flow.encoder.%s.out.1.bias", prefix), WEIGHT_NORM);
}

static void load_layer(struct s3gen_encoder *e, const struct weights *w, const char *stack, int i,
                       struct s3gen_layer *l, cbx_status *rc, char *err)
{
    const int64_t D = e->d_model, dd[2] = {D, D}, d1[1] = {D};
    const int64_t hk[2] = {e->n_head, e->d_k}, f1[1] = {-1}, fw[2] = {-1, D};
#define W(field, nd, shape, suffix) \
    l->field = PL(weights_getf(w, rc, err, nd, shape, "flow.encoder.%s.%d." suffix, stack, i), \
                  nd == 2 ? WEIGHT_LINEAR : WEIGHT_NORM)
#define B(field, nd, shape, suffix) \
    l->field = as_f32(weights_getf(w, rc, err, nd, shape, "flow.encoder.%s.%d." suffix, stack, i))
    W(norm_mha_w, 1, d1, "norm_mha.weight");
    W(norm_mha_b, 1, d1, "norm_mha.bias");
    W(linear_q_w, 2, dd, "self_attn.linear_q.weight");
    B(linear_q_b, 1, d1, "self_attn.linear_q.bias");
    W(linear_k_w, 2, dd, "self_attn.linear_k.weight");
    B(linear_k_b, 1, d1, "self_attn.linear_k.bias"); /* key_bias True */
    W(linear_v_w, 2, dd, "self_attn.linear_v.weight");
    B(linear_v_b, 1, d1, "self_attn.linear_v.bias");
    W(linear_out_w, 2, dd, "self_attn.linear_out.weight");
    B(linear_out_b, 1, d1, "self_attn.linear_out.bias");
    W(linear_pos_w, 2, dd, "self_attn.linear_pos.weight");
    B(pos_bias_u, 2, hk, "self_attn.pos_bias_u");
    B(pos_bias_v, 2, hk, "self_attn.pos_bias_v");
    W(norm_ff_w, 1, d1, "norm_ff.weight");
    W(norm_ff_b, 1, d1, "norm_ff.bias");
    W(w_1_w, 2, fw, "feed_forward.w_1.weight");
    B(w_1_b, 1, f1, "feed_forward.w_1.bias");
    if (*rc == CBX_OK) {
        const int64_t F = l->w_1_w->ne[0], df[2] = {D, F};
        if (l->w_1_b->ne[0] != F)
            *rc = err_setf(err, CBX_ERR_FORMAT, "s3gen weights: flow.encoder.%s.%d.feed_forward.w_1.bias "
                           "has %lld entries, weight has %lld rows", stack, i,
                           (long long)l->w_1_b->ne[0], (long long)F);
        W(w_2_w, 2, df, "feed_forward.w_2.weight");
        B(w_2_b, 1, d1, "feed_forward.w_2.bias");
    }
#undef W
#undef B
    /* macaron_style and use_cnn_module are False upstream: a checkpoint
     * holding those modules was made with another configuration */
    if (*rc == CBX_OK && (weights_has(w, "flow.encoder.%s.%d.norm_ff_macaron.weight", stack, i) ||
                          weights_has(w, "flow.encoder.%s.%d.norm_conv.weight", stack, i)))
        *rc = err_setf(err, CBX_ERR_UNSUPPORTED,
                       "s3gen weights: flow.encoder.%s.%d has a macaron feed-forward or "
                       "convolution module, which this encoder configuration does not use",
                       stack, i);
}

static int count_layers(const struct weights *w, const char *stack)
{
    int n = 0;
    while (weights_has(w, "flow.encoder.%s.%d.norm_mha.weight", stack, n)) n++;
    return n;
}

#undef PL
#undef as_f32
#define PL(x, role) weight_place(e->ws, (x), (role), WEIGHT_AS_STORED, 0, &rc, err)
#define as_f32(x) weight_place(e->ws, (x), WEIGHT_PLAIN, TYPE_F32, 0, &rc, err)

cbx_status s3gen_encoder_load(struct s3gen_encoder **out, const struct weights *w, const struct backend *be,
                              char *err)
{
    *out = NULL;
    cbx_status rc = CBX_OK;
    struct s3gen_encoder *e = calloc(1, sizeof *e);
    if (!e || !(e->ws = weight_set_create(be))) {
        free(e);
        return err_setf(err, CBX_ERR_NOMEM, "s3gen encoder: out of memory");
    }
    const int64_t any2[2] = {-1, -1}, any3[3] = {-1, -1, -1};
    e->input_embedding = PL(weights_get(w, "flow.input_embedding.weight", 2, any2, &rc, err), WEIGHT_EMBEDDING);
    const struct tensor *u0 =
        weights_get(w, "flow.encoder.encoders.0.self_attn.pos_bias_u", 2, any2, &rc, err);
    if (rc != CBX_OK) goto fail;
    e->vocab = e->input_embedding->ne[0];
    e->d_model = (int)e->input_embedding->ne[1];
    e->n_head = (int)u0->ne[0];
    e->d_k = (int)u0->ne[1];
    if (e->n_head < 1 || (int64_t)e->n_head * e->d_k != e->d_model) {
        rc = err_setf(err, CBX_ERR_FORMAT, "s3gen weights: pos_bias_u is [%d, %d], want [heads, %d / heads]",
                      e->n_head, e->d_k, e->d_model);
        goto fail;
    }
    const int64_t D = e->d_model, d1[1] = {D};
    load_embed(e, w, "embed", &e->embed, &rc, err);
    load_embed(e, w, "up_embed", &e->up_embed, &rc, err);
    e->pre_conv1_w = PL(weights_get(w, "flow.encoder.pre_lookahead_layer.conv1.weight", 3, any3, &rc, err), WEIGHT_CONV1D);
    e->pre_conv1_b = as_f32(weights_get(w, "flow.encoder.pre_lookahead_layer.conv1.bias", 1, d1, &rc, err));
    e->pre_conv2_w = PL(weights_get(w, "flow.encoder.pre_lookahead_layer.conv2.weight", 3, any3, &rc, err), WEIGHT_CONV1D);
    e->pre_conv2_b = as_f32(weights_get(w, "flow.encoder.pre_lookahead_layer.conv2.bias", 1, d1, &rc, err));
    e->up_conv_w = PL(weights_get(w, "flow.encoder.up_layer.conv.weight", 3, any3, &rc, err), WEIGHT_CONV1D);
    e->up_conv_b = as_f32(weights_get(w, "flow.encoder.up_layer.conv.bias", 1, d1, &rc, err));
    e->after_norm_w = PL(weights_get(w, "flow.encoder.after_norm.weight", 1, d1, &rc, err), WEIGHT_NORM);
    e->after_norm_b = PL(weights_get(w, "flow.encoder.after_norm.bias", 1, d1, &rc, err), WEIGHT_NORM);
    const int64_t proj[2] = {-1, D};
    e->encoder_proj_w = PL(weights_get(w, "flow.encoder_proj.weight", 2, proj, &rc, err), WEIGHT_LINEAR);
    e->encoder_proj_b = as_f32(weights_get(w, "flow.encoder_proj.bias", 1, any2, &rc, err));
    if (rc != CBX_OK) goto fail;
    /* PreLookaheadLayer: conv1 kernel pre_lookahead_len + 1, conv2 kernel 3;
     * Upsample1D: kernel stride * 2 + 1 */
    const struct tensor *c1 = e->pre_conv1_w, *c2 = e->pre_conv2_w, *cu = e->up_conv_w;
    e->pre_lookahead_len = (int)c1->ne[2] - 1;
    e->up_stride = (int)(cu->ne[2] - 1) / 2;
    if (c1->ne[0] != D || c1->ne[1] != D || c2->ne[0] != D || c2->ne[1] != D || c2->ne[2] != 3 ||
        cu->ne[0] != D || cu->ne[1] != D || e->up_stride < 1 || cu->ne[2] != 2 * e->up_stride + 1) {
        char s1[64], s2[64], s3[64];
        rc = err_setf(err, CBX_ERR_FORMAT,
                      "s3gen weights: pre_lookahead_layer.conv1 %s, conv2 %s, up_layer.conv %s; want "
                      "[%lld, %lld, L+1], [%lld, %lld, 3], [%lld, %lld, 2s+1]",
                      tensor_shape_str(c1, s1, sizeof s1), tensor_shape_str(c2, s2, sizeof s2),
                      tensor_shape_str(cu, s3, sizeof s3), (long long)D, (long long)D,
                      (long long)D, (long long)D, (long long)D, (long long)D);
        goto fail;
    }
    if (e->encoder_proj_b->ndim != 1 || e->encoder_proj_b->ne[0] != e->encoder_proj_w->ne[0]) {
        rc = err_setf(err, CBX_ERR_FORMAT, "s3gen weights: flow.encoder_proj bias and weight sizes disagree");
        goto fail;
    }
    e->n_blocks = count_layers(w, "encoders");
    e->n_up_blocks = count_layers(w, "up_encoders");
    if (e->n_blocks == 0 || e->n_up_blocks == 0) {
        rc = err_setf(err, CBX_ERR_FORMAT, "s3gen weights: no flow.encoder.%s.0 layer",
                      e->n_blocks == 0 ? "encoders" : "up_encoders");
        goto fail;
    }
    e->encoders = calloc((size_t)e->n_blocks, sizeof *e->encoders);
    e->up_encoders = calloc((size_t)e->n_up_blocks, sizeof *e->up_encoders);
    if (!e->encoders || !e->up_encoders) {
        rc = err_setf(err, CBX_ERR_NOMEM, "s3gen encoder: out of memory");
        goto fail;
    }
    for (int i = 0; i < e->n_blocks; i++) load_layer(e, w, "encoders", i, &e->encoders[i], &rc, err);
    for (int i = 0; i < e->n_up_blocks; i++)
        load_layer(e, w, "up_encoders", i, &e->up_encoders[i], &rc, err);
    if (rc != CBX_OK) goto fail;
    *out = e;
    return CBX_OK;
fail:
    s3gen_encoder_free(e);
    return rc;
}

/* ---- forward ------------------------------------------------------------ */

/* EspnetRelPositionalEncoding.extend_pe + position_encoding for length T:
 * [1, 2T-1, D], row k holds relative distance d = (T-1) - k:
 * [2m] = sin(d * div_m), [2m+1] = cos(d * div_m), div_m =
 * exp(2m * -(ln(10000) / D)), all in float32 as upstream (the table does not
 * depend on its allocated length). Upstream computes the negative half as
 * sin(-p * div), cos(-p * div); sin is odd and cos even, so rows mirror. */
static struct tensor *rel_pos_table(struct arena *a, int64_t T, int D)
{
    const int64_t L = 2 * T - 1, ne[3] = {1, L, D};
    float *pe = arena_alloc_host(a, sizeof(float) * (size_t)(L * D));
    float *div = arena_alloc_host(a, sizeof(float) * (size_t)(D / 2));
    if (!pe || !div) return NULL;
    const float step = (float)(-(log(10000.0) / D)); /* python float -> f32 scalar */
    for (int m = 0; m < D / 2; m++) div[m] = expf((float)(2 * m) * step);
    for (int64_t p = 0; p < T; p++) {
        float *pos = pe + (T - 1 - p) * D, *neg = pe + (T - 1 + p) * D;
        for (int m = 0; m < D / 2; m++) {
            float arg = (float)p * div[m];
            float s = sinf(arg), c = cosf(arg);
            pos[2 * m] = s;
            pos[2 * m + 1] = c;
            neg[2 * m] = -s;
            neg[2 * m + 1] = c;
        }
    }
    return op_from_host(a, TYPE_F32, 3, ne, pe);
}

/* LinearNoSubsampling + EspnetRelPositionalEncoding: x[1, T, D] ->
 * LayerNorm(Linear(x)) * sqrt(D); *pos = the table for T. */
static struct tensor *embed_fwd(struct arena *a, const struct s3gen_encoder *e,
                                const struct s3gen_embed *m, const struct tensor *x,
                                struct tensor **pos)
{
    if (!x) return NULL;
    struct tensor *h = op_linear(a, x, m->out_0_w, m->out_0_b);
    h = op_layer_norm(a, h, m->out_1_w, m->out_1_b, 1e-5f);
    h = op_scale(a, h, (float)sqrt((double)e->d_model)); /* xscale = math.sqrt(d_model) */
    *pos = rel_pos_table(a, x->ne[1], e->d_model);
    return h;
}

/* PreLookaheadLayer: x[1, T, D]; each output frame sees frames t..t+L. */
static struct tensor *pre_lookahead(struct arena *a, const struct s3gen_encoder *e,
                                    const struct tensor *x)
{
    struct tensor *h = op_transpose(a, x, 1, 2);                    /* [1, D, T] */
    const struct conv1d_params p1 = {.pad_right = e->pre_lookahead_len}; /* look ahead */
    h = op_conv1d(a, h, e->pre_conv1_w, e->pre_conv1_b, &p1);      /* [1, D, T] */
    h = op_unary(a, h, UN_LEAKY_RELU, 0.01f, 0);                    /* F.leaky_relu default */
    const struct conv1d_params p2 = {.pad_left = 2};
    h = op_conv1d(a, h, e->pre_conv2_w, e->pre_conv2_b, &p2);      /* [1, D, T] */
    h = op_transpose(a, h, 1, 2);                                   /* [1, T, D] */
    return op_add(a, h, x);                                         /* residual */
}

/* RelPositionMultiHeadedAttention.rel_shift on bd[1, H, T, 2T-1]: a view
 * [1, H, T, T] with bd(h, i, j) = raw(h, i, (T-1) - i + j), i.e. query i and
 * key j use relative distance i - j. Upstream gets it by padding a zero
 * column and reshaping; the same elements are addressed here by viewing
 * each head's T x (2T-1) block as rows of 2T-2 starting at column T-1. */
static struct tensor *rel_shift(struct arena *a, struct tensor *bd)
{
    if (!bd) return NULL;
    const int64_t H = bd->ne[1], T = bd->ne[2], L = bd->ne[3];
    if (L == T) return bd; /* T = 1: shapes already match, no shift upstream */
    const int64_t flat[3] = {1, H, T * L};
    struct tensor *v = op_reshape(a, bd, 3, flat);
    v = op_slice(a, v, 2, T - 1, T * (L - 1));
    v = op_split_dim(a, v, 2, T);                                   /* [1, H, T, 2T-2] */
    return op_slice(a, v, 3, 0, T);                                 /* [1, H, T, T] */
}

/* RelPositionMultiHeadedAttention(x, x, x, mask, pos): x[1, T, D],
 * pos[1, 2T-1, D]. The padding mask of one unpadded row is all true
 * (static_chunk_size 0, no dynamic chunks), so no key is masked. */
static struct tensor *rel_attn(struct arena *a, const struct s3gen_encoder *e,
                               const struct s3gen_layer *l, const struct tensor *x,
                               const struct tensor *pos)
{
    if (!x || !pos) return NULL;
    const int64_t H = e->n_head;
    const float scale = 1.0f / sqrtf((float)e->d_k);              /* 1 / math.sqrt(d_k) */
    const int to_heads[4] = {0, 2, 1, 3};                          /* [1,T,H,Dk] <-> [1,H,T,Dk] */
    struct tensor *q = op_split_dim(a, op_linear(a, x, l->linear_q_w, l->linear_q_b), 2, H);
    struct tensor *k = op_split_heads(a, op_linear(a, x, l->linear_k_w, l->linear_k_b), H); /* [1, H, T, Dk] */
    struct tensor *v = op_split_heads(a, op_linear(a, x, l->linear_v_w, l->linear_v_b), H);
    /* p = linear_pos(pos_emb).view(1, -1, H, Dk) */
    struct tensor *p = op_split_dim(a, op_linear(a, pos, l->linear_pos_w, NULL), 2, H);
    const int to_heads_t[4] = {0, 2, 3, 1};
    p = op_permute(a, p, to_heads_t);                               /* [1, H, Dk, 2T-1] */
    /* q_with_bias_u = q + pos_bias_u; q_with_bias_v = q + pos_bias_v */
    struct tensor *qu = op_permute(a, op_add(a, q, l->pos_bias_u), to_heads);
    /* matrix_bd = q_with_bias_v @ p^T, then rel_shift. Upstream scores are
     * (ac + bd) / sqrt(d_k); scaling q_v by the power of two 1/8 first gives
     * bd / 8 exactly, and the attention adds it to ac * (1/8). */
    struct tensor *qv = op_scale(a, op_add(a, q, l->pos_bias_v), scale);
    struct tensor *bd = op_matmul(a, op_permute(a, qv, to_heads), p); /* [1, H, T, 2T-1] */
    bd = rel_shift(a, bd);                                          /* [1, H, T, T] */
    const struct attn_params ap = {.scale = scale, .causal = false};
    struct tensor *o = op_attention(a, qu, k, v, bd, &ap);          /* [1, H, T, Dk] */
    o = op_merge_heads(a, o);
    return op_linear(a, o, l->linear_out_w, l->linear_out_b);
}

/* ConformerEncoderLayer, normalize_before: x = x + mha(norm_mha(x));
 * x = x + 1.0 * ff(norm_ff(x)), ff = w_2(SiLU(w_1(.))). */
static struct tensor *conformer_layer(struct arena *a, const struct s3gen_encoder *e,
                                      const struct s3gen_layer *l, struct tensor *x,
                                      const struct tensor *pos)
{
    struct tensor *h = op_layer_norm(a, x, l->norm_mha_w, l->norm_mha_b, 1e-12f);
    /* the residual add and norm_ff in one pass */
    h = op_add_layer_norm(a, x, rel_attn(a, e, l, h, pos), l->norm_ff_w, l->norm_ff_b, 1e-12f, &x);
    h = op_linear_ex(a, h, l->w_1_w, l->w_1_b, UN_SILU, NULL);
    return op_linear_ex(a, h, l->w_2_w, l->w_2_b, -1, x);
}

/* One conformer layer whose intermediates (the [H, T, 2T-1] position
 * scores above all) live in the scratch arena s, reset afterwards; only the
 * output is kept, in a. So a grows with T per layer, not with T^2. */
static struct tensor *layer_in_scratch(struct arena *a, struct arena *s,
                                       const struct s3gen_encoder *e,
                                       const struct s3gen_layer *l, struct tensor *x,
                                       const struct tensor *pos)
{
    if (!x || !pos) return NULL;
    struct tensor *y = conformer_layer(s, e, l, x, pos);
    if (!y) {
        arena_fail(a, arena_status(s), "%s", arena_errmsg(s));
        return NULL;
    }
    y = op_cont(a, y);
    arena_reset(s);
    return y;
}

/* Upsample1D: x[1, T, D] -> nearest x stride, left pad 2*stride zeros,
 * conv (kernel 2*stride + 1) -> [1, stride*T, D]. */
static struct tensor *up_layer(struct arena *a, const struct s3gen_encoder *e,
                               const struct tensor *x)
{
    struct tensor *h = op_transpose(a, x, 1, 2);                    /* [1, D, T] */
    h = op_upsample_nearest(a, h, e->up_stride);                    /* [1, D, sT] */
    const struct conv1d_params p = {.pad_left = 2 * e->up_stride};
    h = op_conv1d(a, h, e->up_conv_w, e->up_conv_b, &p);            /* [1, D, sT] */
    return op_cont(a, op_transpose(a, h, 1, 2));                    /* [1, sT, D] */
}

struct tensor *s3gen_encoder_forward(struct arena *a, const struct s3gen_encoder *e,
                                     const int32_t *tokens, int64_t n)
{
    if (!e || !tokens || n < 1) {
        arena_fail(a, CBX_ERR_INVALID_ARG, "s3gen encoder: no tokens");
        return NULL;
    }
    /* CausalMaskedDiffWithXvec.inference:
     * token = input_embedding(clamp(token, min=0)) * mask (mask all ones) */
    int32_t *ids = arena_alloc_host(a, sizeof *ids * (size_t)n);
    if (!ids) return NULL;
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] >= e->vocab) {
            arena_fail(a, CBX_ERR_INVALID_ARG,
                       "s3gen encoder: speech token %d at position %lld is outside the "
                       "vocabulary of %lld", tokens[i], (long long)i, (long long)e->vocab);
            return NULL;
        }
        ids[i] = tokens[i] < 0 ? 0 : tokens[i];
    }
    const int64_t ne[2] = {1, n};
    struct tensor *x = op_get_rows(a, e->input_embedding, op_from_host(a, TYPE_I32, 2, ne, ids));
    if (x) x->name = "flow.input_embedding";                        /* [1, T, D] */

    /* UpsampleConformerEncoder.forward */
    struct arena *s = arena_scratch(a);
    if (!s) return NULL;
    struct tensor *pos = NULL;
    x = embed_fwd(a, e, &e->embed, x, &pos);                        /* [1, T, D] */
    x = pre_lookahead(a, e, x);
    for (int i = 0; i < e->n_blocks; i++) x = layer_in_scratch(a, s, e, &e->encoders[i], x, pos);
    x = up_layer(a, e, x);                                          /* [1, 2T, D] */
    x = embed_fwd(a, e, &e->up_embed, x, &pos);
    for (int i = 0; i < e->n_up_blocks; i++)
        x = layer_in_scratch(a, s, e, &e->up_encoders[i], x, pos);
    arena_scratch_done(a, s);
    x = op_layer_norm(a, x, e->after_norm_w, e->after_norm_b, 1e-5f);
    if (x) x->name = "flow.encoder";

    /* mu = encoder_proj(h).transpose(1, 2) */
    x = op_linear(a, x, e->encoder_proj_w, e->encoder_proj_b);      /* [1, 2T, 80] */
    x = op_cont(a, op_transpose(a, x, 1, 2));                       /* [1, 80, 2T] */
    if (x) x->name = "flow.encoder_proj";
    return arena_status(a) == CBX_OK ? x : NULL;
}
