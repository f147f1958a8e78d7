/* t3.c - T3: loading (GPT-2 and Llama backbones), T3CondEnc, input
 * assembly, inference_turbo and the CFG inference. Ports chatterbox
 * models/t3/t3.py (prepare_conditioning, prepare_input_embeds, inference,
 * inference_turbo) and modules/cond_enc.py; spec/t3.md §4, §6, §7. */
#include "t3.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/mman.h>

#include "core/backend.h"
#include "core/threadpool.h"
#include "t3/alignment.h"

/* The linear weights of the decode step: the backbone's, then the head.
 * slots: room for t3_backbone_linears + 1. */
static int linear_weights(struct t3_model *m, const struct tensor ***slots, int max)
{
    int n = t3_backbone_linears(&m->tfmr, slots, max);
    if (n < max) slots[n] = &m->speech_head_w;
    return n + 1;
}

void t3_free(struct t3_model *m)
{
    if (!m) return;
    t3_backbone_free(&m->tfmr);
    weight_set_free(m->ws);
    memset(m, 0, sizeof *m);
}

/* GPT2Model's blocks (tfmr.h.*): sizes from wpe and the tensor names. A
 * converted GGUF (io/model_file.h, chatterbox.t3.conv1d_layout = "out_in")
 * stores the Conv1D weights already transposed to [out, in], possibly
 * quantised: recognised by c_attn being [3D, D] rather than upstream's
 * [D, 3D]; *transpose tells which. */
static cbx_status load_gpt2(struct t3_backbone *g, const struct weights *w, bool *transpose, char *err)
{
    cbx_status rc = CBX_OK;
    const int64_t any2[2] = {-1, -1};
    const struct tensor *wpe = weights_get(w, "tfmr.wpe.weight", 2, any2, &rc, err);
    if (!wpe) return rc;
    const int64_t D = wpe->ne[1];
    if (D % 64) return err_setf(err, CBX_ERR_FORMAT, "T3 weights: width %lld is not a multiple of 64", (long long)D);
    int n_layer = 0;
    while (weights_has(w, "tfmr.h.%d.ln_1.weight", n_layer)) n_layer++;
    if (n_layer == 0) return err_setf(err, CBX_ERR_FORMAT, "T3 weights: no tfmr.h.0 block");
    g->arch = T3_ARCH_GPT2;
    g->n_layer = n_layer;
    g->d_model = (int)D;
    g->head_dim = 64; /* every GPT-2 config here */
    g->n_head = g->n_kv_head = (int)(D / 64);
    g->n_ctx = (int)wpe->ne[0];
    g->eps = 1e-5f;
    g->wpe = wpe;
    const int64_t d1[1] = {D};
    g->norm_w = weights_get(w, "tfmr.ln_f.weight", 1, d1, &rc, err);
    g->norm_b = weights_get(w, "tfmr.ln_f.bias", 1, d1, &rc, err);
    const struct tensor *ca = weights_get(w, "tfmr.h.0.attn.c_attn.weight", 2, any2, &rc, err);
    if (rc != CBX_OK) return rc;
    const bool out_in = ca->ne[0] == 3 * D && ca->ne[1] == D;
    *transpose = !out_in;
    if (!(g->gpt2 = calloc((size_t)n_layer, sizeof *g->gpt2)))
        return err_setf(err, CBX_ERR_NOMEM, "T3: out of memory for %d layers", n_layer);
    for (int i = 0; i < n_layer && rc == CBX_OK; i++) {
        struct gpt2_layer *l = &g->gpt2[i];
#define W(field, suffix, nd, shape) \
    l->field = weights_getf(w, &rc, err, nd, shape, "tfmr.h.%d." suffix, i)
        const int64_t d3[1] = {3 * D}, d4[1] = {4 * D};
        const int64_t attn_w[2] = {D, 3 * D}, proj_w[2] = {D, D}, fc_w[2] = {D, 4 * D}, mp_w[2] = {4 * D, D};
        const int64_t attn_oi[2] = {3 * D, D}, fc_oi[2] = {4 * D, D}, mp_oi[2] = {D, 4 * D};
        W(ln_1_w, "ln_1.weight", 1, d1);
        W(ln_1_b, "ln_1.bias", 1, d1);
        W(c_attn_w, "attn.c_attn.weight", 2, out_in ? attn_oi : attn_w);
        W(c_attn_b, "attn.c_attn.bias", 1, d3);
        W(c_proj_w, "attn.c_proj.weight", 2, proj_w);
        W(c_proj_b, "attn.c_proj.bias", 1, d1);
        W(ln_2_w, "ln_2.weight", 1, d1);
        W(ln_2_b, "ln_2.bias", 1, d1);
        W(c_fc_w, "mlp.c_fc.weight", 2, out_in ? fc_oi : fc_w);
        W(c_fc_b, "mlp.c_fc.bias", 1, d4);
        W(mlp_proj_w, "mlp.c_proj.weight", 2, out_in ? mp_oi : mp_w);
        W(mlp_proj_b, "mlp.c_proj.bias", 1, d1);
#undef W
        if (rc == CBX_OK && !out_in && dtype_traits(l->c_attn_w->type)->quantized)
            rc = err_setf(err, CBX_ERR_FORMAT, "T3 weights: quantised Conv1D weights must be stored [out, in]");
    }
    return rc;
}

/* LlamaModel's layers (tfmr.layers.*): sizes from the tensors (head dim
 * 64 as Llama_520M; heads = q rows / 64, KV heads = k rows / 64), RoPE as
 * Llama_520M (llama_configs.py). */
static cbx_status load_llama(struct t3_backbone *g, const struct weights *w, char *err)
{
    cbx_status rc = CBX_OK;
    const int64_t any2[2] = {-1, -1};
    const struct tensor *q0 = weights_get(w, "tfmr.layers.0.self_attn.q_proj.weight", 2, any2, &rc, err);
    const struct tensor *k0 = weights_get(w, "tfmr.layers.0.self_attn.k_proj.weight", 2, any2, &rc, err);
    const struct tensor *g0 = weights_get(w, "tfmr.layers.0.mlp.gate_proj.weight", 2, any2, &rc, err);
    if (rc != CBX_OK) return rc;
    const int64_t D = q0->ne[1], Dh = 64, I = g0->ne[0];
    if (D % Dh || q0->ne[0] % Dh || k0->ne[0] % Dh || k0->ne[1] != D || q0->ne[0] % k0->ne[0] || g0->ne[1] != D)
        return err_setf(err, CBX_ERR_FORMAT, "T3 weights: attention of width %lld with q %lld / k %lld rows",
                        (long long)D, (long long)q0->ne[0], (long long)k0->ne[0]);
    int n_layer = 0;
    while (weights_has(w, "tfmr.layers.%d.input_layernorm.weight", n_layer)) n_layer++;
    g->arch = T3_ARCH_LLAMA;
    g->n_layer = n_layer;
    g->d_model = (int)D;
    g->head_dim = (int)Dh;
    g->n_head = (int)(q0->ne[0] / Dh);
    g->n_kv_head = (int)(k0->ne[0] / Dh);
    g->eps = 1e-5f;
    g->rope = llama_rope_520m((int)Dh);
    const int64_t d1[1] = {D};
    g->norm_w = weights_get(w, "tfmr.norm.weight", 1, d1, &rc, err);
    if (rc != CBX_OK) return rc;
    if (!(g->llama = calloc((size_t)n_layer, sizeof *g->llama)))
        return err_setf(err, CBX_ERR_NOMEM, "T3: out of memory for %d layers", n_layer);
    const int64_t HD = q0->ne[0], KD = k0->ne[0];
    const int64_t qs[2] = {HD, D}, ks[2] = {KD, D}, os[2] = {D, HD}, up[2] = {I, D}, dn[2] = {D, I};
    for (int i = 0; i < n_layer && rc == CBX_OK; i++) {
        struct llama_layer *l = &g->llama[i];
#define W(field, suffix, nd, shape) \
    l->field = weights_getf(w, &rc, err, nd, shape, "tfmr.layers.%d." suffix, i)
        W(input_layernorm_w, "input_layernorm.weight", 1, d1);
        W(q_proj_w, "self_attn.q_proj.weight", 2, qs);
        W(k_proj_w, "self_attn.k_proj.weight", 2, ks);
        W(v_proj_w, "self_attn.v_proj.weight", 2, ks);
        W(o_proj_w, "self_attn.o_proj.weight", 2, os);
        W(post_attention_layernorm_w, "post_attention_layernorm.weight", 1, d1);
        W(gate_proj_w, "mlp.gate_proj.weight", 2, up);
        W(up_proj_w, "mlp.up_proj.weight", 2, up);
        W(down_proj_w, "mlp.down_proj.weight", 2, dn);
#undef W
    }
    return rc;
}

/* Whether linear weight t is used as stored, whatever wtype asks: the
 * quantised ones (a converted GGUF: convert chose their types) and, in a
 * GGUF whose GPT-2 Conv1D weights are stored [out, in], all of them. */
static bool as_stored(const struct t3_model *m, const struct tensor *t, bool transpose)
{
    return (m->tfmr.arch == T3_ARCH_GPT2 && !transpose) || dtype_traits(t->type)->quantized;
}

/* Every weight but the decode linears (placed by t3_load) onto m->ws, as
 * stored. */
static void place_rest(struct t3_model *m, cbx_status *rc, char *err)
{
    struct weight_set *s = m->ws;
    struct t3_backbone *g = &m->tfmr;
#define P(field, role) (field) = weight_place(s, (field), (role), WEIGHT_AS_STORED, 0, rc, err)
    P(m->text_emb, WEIGHT_EMBEDDING);
    P(m->speech_emb, WEIGHT_EMBEDDING);
    P(m->speech_head_b, WEIGHT_PLAIN);
    P(m->spkr_enc_w, WEIGHT_LINEAR);
    P(m->spkr_enc_b, WEIGHT_PLAIN);
    P(m->text_pos_emb, WEIGHT_EMBEDDING);
    P(m->speech_pos_emb, WEIGHT_EMBEDDING);
    P(m->emotion_adv_fc_w, WEIGHT_LINEAR);
    P(g->wpe, WEIGHT_EMBEDDING);
    P(g->norm_w, WEIGHT_NORM);
    P(g->norm_b, WEIGHT_NORM);
    for (int i = 0; i < g->n_layer; i++) {
        if (g->gpt2) {
            struct gpt2_layer *l = &g->gpt2[i];
            P(l->ln_1_w, WEIGHT_NORM);
            P(l->ln_1_b, WEIGHT_NORM);
            P(l->c_attn_b, WEIGHT_PLAIN);
            P(l->c_proj_b, WEIGHT_PLAIN);
            P(l->ln_2_w, WEIGHT_NORM);
            P(l->ln_2_b, WEIGHT_NORM);
            P(l->c_fc_b, WEIGHT_PLAIN);
            P(l->mlp_proj_b, WEIGHT_PLAIN);
        } else {
            struct llama_layer *l = &g->llama[i];
            P(l->input_layernorm_w, WEIGHT_NORM);
            P(l->post_attention_layernorm_w, WEIGHT_NORM);
        }
    }
#undef P
    if (g->arch == T3_ARCH_LLAMA) perceiver_place(&m->perceiver, s, rc, err);
}

cbx_status t3_load(struct t3_model *m, const struct weights *w, const struct backend *be, enum dtype wtype,
                   char *err)
{
    memset(m, 0, sizeof *m);
    cbx_status rc = CBX_OK;
    const struct tensor ***slots = NULL;
    bool transpose = false;
    const bool gpt2 = weights_has(w, "tfmr.wpe.weight");
    if (gpt2) rc = load_gpt2(&m->tfmr, w, &transpose, err);
    else if (weights_has(w, "tfmr.layers.0.input_layernorm.weight")) rc = load_llama(&m->tfmr, w, err);
    else rc = err_setf(err, CBX_ERR_FORMAT, "T3 weights: neither a GPT-2 (tfmr.wpe) nor a Llama (tfmr.layers.0) backbone");
    if (rc != CBX_OK) goto fail;
    struct t3_backbone *g = &m->tfmr;
    const int64_t D = g->d_model;
    const int64_t any1[1] = {-1}, any2[2] = {-1, -1}, d1[1] = {D}, dd[2] = {-1, D};
    m->text_emb = weights_get(w, "text_emb.weight", 2, dd, &rc, err);
    m->speech_emb = weights_get(w, "speech_emb.weight", 2, dd, &rc, err);
    m->speech_head_w = weights_get(w, "speech_head.weight", 2, dd, &rc, err);
    if (gpt2) m->speech_head_b = weights_get(w, "speech_head.bias", 1, any1, &rc, err);
    m->spkr_enc_w = weights_get(w, "cond_enc.spkr_enc.weight", 2, any2, &rc, err);
    m->spkr_enc_b = weights_get(w, "cond_enc.spkr_enc.bias", 1, d1, &rc, err);
    if (!gpt2) {
        const int64_t e1[2] = {D, 1};
        m->text_pos_emb = weights_get(w, "text_pos_emb.emb.weight", 2, dd, &rc, err);
        m->speech_pos_emb = weights_get(w, "speech_pos_emb.emb.weight", 2, dd, &rc, err);
        m->emotion_adv_fc_w = weights_get(w, "cond_enc.emotion_adv_fc.weight", 2, e1, &rc, err);
        if (rc == CBX_OK) rc = perceiver_load(&m->perceiver, w, "cond_enc.perceiver.", D, err);
    }
    if (rc != CBX_OK) goto fail;
    if (m->spkr_enc_w->ne[0] != D || m->speech_head_w->ne[0] != m->speech_emb->ne[0] ||
        (m->speech_head_b && m->speech_head_b->ne[0] != m->speech_head_w->ne[0])) {
        rc = err_setf(err, CBX_ERR_FORMAT, "T3 weights: speech head / embedding / speaker projection sizes disagree");
        goto fail;
    }
    m->hp.text_vocab = m->text_emb->ne[0];
    m->hp.speech_vocab = m->speech_emb->ne[0];
    m->hp.start_speech = 6561;
    m->hp.stop_speech = 6562;
    m->hp.start_text = gpt2 ? -1 : 255;
    m->hp.stop_text = gpt2 ? -1 : 0;
    m->hp.speaker_embed_size = m->spkr_enc_w->ne[1];
    m->order = gpt2 ? T3_ORDER_TURBO : T3_ORDER_CFG;
    if (m->hp.speech_vocab <= m->hp.stop_speech || (!gpt2 && m->hp.text_vocab <= m->hp.start_text)) {
        rc = err_setf(err, CBX_ERR_FORMAT, "T3 weights: vocabularies of %lld text / %lld speech ids lack the start/stop tokens",
                      (long long)m->hp.text_vocab, (long long)m->hp.speech_vocab);
        goto fail;
    }
    if (!gpt2) /* [cond (34); text (<= text table); 2 x start; speech (<= speech table)] */
        g->n_ctx = (int)(t3_cond_len(m, 1) + m->text_pos_emb->ne[0] + 1 + m->speech_pos_emb->ne[0]);

    const struct dtype_traits *wt = dtype_traits(wtype);
    if (!wt || wtype == TYPE_I32 || wtype == TYPE_I64 || D % wt->blck || (4 * D) % wt->blck) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "T3: cannot hold weights as %s", dtype_name(wtype));
        goto fail;
    }
    /* the linear weights of the decode step converted to wtype (GPT-2
     * Conv1D ones transposed; weights already of wtype and [out, in] used
     * as stored), the rest as stored */
    const int max = 7 * g->n_layer + 1;
    if (!(slots = malloc(sizeof *slots * (size_t)max)) || !(m->ws = weight_set_create(be))) {
        rc = err_setf(err, CBX_ERR_NOMEM, "T3: out of memory");
        goto fail;
    }
    const int n = linear_weights(m, slots, max);
    for (int i = 0; i < n; i++) {
        const struct tensor *t = *slots[i];
        const bool tr = transpose && slots[i] != &m->speech_head_w;
        const int64_t in = tr ? t->ne[0] : t->ne[1];
        if (in % wt->blck) {
            rc = err_setf(err, CBX_ERR_INVALID_ARG, "T3: %s rows of %lld cannot be held as %s", t->name, (long long)in,
                          dtype_name(wtype));
            goto fail;
        }
    }
    for (int i = 0; i < n && rc == CBX_OK; i++) {
        const bool stored = as_stored(m, *slots[i], transpose);
        const bool tr = !stored && transpose && slots[i] != &m->speech_head_w;
        *slots[i] = weight_place(m->ws, *slots[i], WEIGHT_LINEAR, stored ? WEIGHT_AS_STORED : (int)wtype,
                                 WEIGHT_DECODE | (tr ? WEIGHT_TRANSPOSE : 0), &rc, err);
    }
    free(slots);
    slots = NULL;
    place_rest(m, &rc, err);
    if (rc != CBX_OK) goto fail;
    g->kv_type = kv_cache_type(g->gpt2 ? g->gpt2[0].c_attn_w->type : g->llama[0].q_proj_w->type);
    m->bf16 = dtype_traits(m->speech_head_w->type)->quantized;
    return CBX_OK;
fail:
    free(slots);
    t3_free(m);
    return rc;
}

int t3_cond_len(const struct t3_model *m, int64_t n_prompt)
{
    if (m->tfmr.arch == T3_ARCH_LLAMA) return 1 + (int)m->perceiver.pre_attention_query->ne[1] + 1;
    return (int)(1 + n_prompt);
}

bool t3_has_emotion(const struct t3_model *m) { return m->emotion_adv_fc_w != NULL; }

int t3_cond_tensors(const struct t3_model *m, const struct tensor **ts, int max)
{
    int n = 0;
#define ADD(t) do { if ((t) && n < max) ts[n++] = (t); } while (0)
    const struct perceiver *pc = &m->perceiver;
    const struct t3_backbone *g = &m->tfmr;
    ADD(m->speech_emb); ADD(m->spkr_enc_w); ADD(m->spkr_enc_b);
    ADD(m->speech_pos_emb); ADD(m->emotion_adv_fc_w); ADD(g->wpe);
    ADD(pc->pre_attention_query); ADD(pc->norm_w); ADD(pc->norm_b);
    ADD(pc->to_q_w); ADD(pc->to_q_b); ADD(pc->to_k_w); ADD(pc->to_k_b);
    ADD(pc->to_v_w); ADD(pc->to_v_b); ADD(pc->proj_out_w); ADD(pc->proj_out_b);
    for (int i = 0; i < g->n_layer; i++) {
        if (g->gpt2) {
            const struct gpt2_layer *l = &g->gpt2[i];
            ADD(l->ln_1_w); ADD(l->ln_1_b); ADD(l->c_attn_w); ADD(l->c_attn_b);
            ADD(l->c_proj_w); ADD(l->c_proj_b); ADD(l->ln_2_w); ADD(l->ln_2_b);
            ADD(l->c_fc_w); ADD(l->c_fc_b); ADD(l->mlp_proj_w); ADD(l->mlp_proj_b);
        } else {
            const struct llama_layer *l = &g->llama[i];
            ADD(l->input_layernorm_w); ADD(l->q_proj_w); ADD(l->k_proj_w); ADD(l->v_proj_w);
            ADD(l->o_proj_w); ADD(l->post_attention_layernorm_w); ADD(l->gate_proj_w);
            ADD(l->up_proj_w); ADD(l->down_proj_w);
        }
    }
#undef ADD
    return n;
}

/* Rows [from, from + n) of a position table, [1, n, D]. */
static struct tensor *pos_rows(struct arena *a, const struct tensor *table, int64_t from, int64_t n)
{
    const int64_t ne[3] = {1, n, table->ne[1]};
    return op_reshape(a, op_slice(a, table, 0, from, n), 3, ne);
}

/* embedding rows of ids[n] -> [1, n, D] */
static struct tensor *embed(struct arena *a, const struct tensor *table, const int32_t *ids, int64_t n)
{
    const int64_t ne[2] = {1, n};
    return op_get_rows(a, table, op_from_host(a, TYPE_I32, 2, ne, ids));
}

struct tensor *t3_prepare_conditioning(struct arena *a, const struct t3_model *m,
                                       const struct t3_cond *c)
{
    /* T3CondEnc: spkr_enc(speaker_emb.view(-1, 256))[:, None] */
    const int64_t spk_ne[3] = {1, 1, m->hp.speaker_embed_size};
    struct tensor *spk = op_from_host(a, TYPE_F32, 3, spk_ne, c->speaker_emb);
    struct tensor *cond_spkr = op_linear(a, spk, m->spkr_enc_w, m->spkr_enc_b); /* [1, 1, D] */
    if (m->tfmr.arch == T3_ARCH_GPT2) {
        if (c->n_prompt == 0) return cond_spkr;
        /* cond_prompt_speech_emb = speech_emb(tokens); no position table on GPT-2 */
        return op_concat(a, cond_spkr, embed(a, m->speech_emb, c->prompt_tokens, c->n_prompt), 1);
    }
    /* Llama: speech_emb(tokens) + speech_pos_emb(0..P-1) -> Perceiver; then
     * emotion_adv_fc(exaggeration) = exaggeration x its weight column */
    if (c->n_prompt < 1 || c->n_prompt > m->speech_pos_emb->ne[0]) {
        arena_fail(a, CBX_ERR_INVALID_ARG, "T3: a voice prompt of %lld speech tokens (the model takes 1 to %lld)",
                   (long long)c->n_prompt, (long long)m->speech_pos_emb->ne[0]);
        return NULL;
    }
    struct tensor *e = op_add(a, embed(a, m->speech_emb, c->prompt_tokens, c->n_prompt),
                              pos_rows(a, m->speech_pos_emb, 0, c->n_prompt));
    const int64_t one[3] = {1, 1, 1};
    struct tensor *emo = op_linear(a, op_from_host(a, TYPE_F32, 3, one, &c->emotion_adv), m->emotion_adv_fc_w, NULL);
    return op_concat(a, op_concat(a, cond_spkr, perceiver_forward(a, &m->perceiver, e), 1), emo, 1);
}

/* x[1, T, D] repeated to [n_rows, T, D] */
static struct tensor *rows(struct arena *a, struct tensor *x, int n_rows)
{
    struct tensor *r = x;
    for (int i = 1; i < n_rows; i++) r = op_concat(a, r, x, 0);
    return r;
}

/* speech_emb(token) (+ speech_pos_emb[pos] on Llama) for n_rows rows:
 * [n_rows, 1, D] */
static struct tensor *speech_input(struct arena *a, const struct t3_model *m, const int32_t *token, int64_t pos,
                                   int n_rows)
{
    struct tensor *x = embed(a, m->speech_emb, token, 1);
    if (m->speech_pos_emb) x = op_add(a, x, pos_rows(a, m->speech_pos_emb, pos, 1));
    return rows(a, x, n_rows);
}

/* The part of prepare_input_embeds after the conditioning, for n_rows
 * rows: [text; start] -> [n_rows, L + 1, D]. GPT-2: text_emb(text);
 * Llama: text_emb(text) + text_pos_emb (row 1, unconditional: the
 * position embeddings alone). */
/* The conditional row's text (n_text > 0): text_emb(text), + text_pos_emb
 * on Llama -> [1, L, D]; NULL (recorded in a) past the text table. */
static struct tensor *text_input(struct arena *a, const struct t3_model *m, const int32_t *text, int64_t n_text)
{
    if (m->text_pos_emb && n_text > m->text_pos_emb->ne[0]) {
        arena_fail(a, CBX_ERR_INVALID_ARG, "T3: %lld text tokens exceed the %lld-position text table",
                   (long long)n_text, (long long)m->text_pos_emb->ne[0]);
        return NULL;
    }
    struct tensor *t = embed(a, m->text_emb, text, n_text);
    return m->text_pos_emb ? op_add(a, t, pos_rows(a, m->text_pos_emb, 0, n_text)) : t;
}

static struct tensor *text_and_start(struct arena *a, const struct t3_model *m, const int32_t *text,
                                     int64_t n_text, int n_rows)
{
    struct tensor *bos = speech_input(a, m, &m->hp.start_speech, 0, n_rows);
    if (n_text == 0) return bos;
    struct tensor *t = text_input(a, m, text, n_text);
    if (!m->text_pos_emb || !t) return op_concat(a, rows(a, t, n_rows), bos, 1);
    if (n_rows == 2) t = op_concat(a, t, op_cont(a, pos_rows(a, m->text_pos_emb, 0, n_text)), 0);
    return op_concat(a, t, bos, 1);
}

struct tensor *t3_prepare_input_embeds(struct arena *a, const struct t3_model *m,
                                       const struct t3_cond *c, const int32_t *text,
                                       int64_t n_text, int n_rows)
{
    if (n_rows < 1 || n_rows > (m->order == T3_ORDER_CFG ? 2 : 1)) {
        arena_fail(a, CBX_ERR_INVALID_ARG, "T3: %d rows (GPT-2: 1; Llama: 1, or 2 with CFG)", n_rows);
        return NULL;
    }
    return op_concat(a, rows(a, t3_prepare_conditioning(a, m, c), n_rows),
                     text_and_start(a, m, text, n_text, n_rows), 1);
}

struct t3_gen_params t3_gen_default_params(const struct t3_model *m)
{
    struct t3_gen_params p = {{0.8, 1000, 0.95, 0.0, 1.2}, 1000, 0.0, 0, false, NULL, false, false};
    if (m && m->order == T3_ORDER_CFG) {
        struct sampler_params s = {0.8, 0, 1.0, 0.05, 1.2};
        p.s = s;
        p.cfg_weight = 0.5;
    }
    return p;
}

/* speech_head(hidden[:, -1]) of every row: logits [n_rows, 1, V] */
static struct tensor *head(struct arena *a, const struct t3_model *m, const struct tensor *h)
{
    return op_linear(a, op_slice(a, h, 1, h ? h->ne[1] - 1 : 0, 1), m->speech_head_w, m->speech_head_b);
}

/* head()'s logits to the host: [n_rows, V] */
static cbx_status last_logits(struct arena *a, const struct t3_model *m, const struct tensor *h,
                              float *logits)
{
    struct tensor *l = head(a, m, h);
    if (!l) return arena_status(a);
    return tensor_to_host(l, logits);
}

/* ---- workspace ------------------------------------------------------------- */

enum { WS_CACHE, WS_STEP, WS_SCRATCH0, WS_SCRATCH1, WS_N };
struct t3_workspace {
    const struct backend *be;
    struct arena *a[WS_N];
};

static void free_arenas(struct arena **a)
{
    for (int i = 0; i < WS_N; i++) arena_free(a[i]);
}

/* The precision of m's products in the arenas of a call (t3_model.bf16):
 * the cache arena holds keys and values only. */
static void set_precision(const struct t3_model *m, struct arena *const *a)
{
    for (int i = WS_STEP; i < WS_N; i++) arena_set_bf16(a[i], m->bf16);
}

/* WS_N new arenas of be; false (none kept) when one fails */
static bool make_arenas(const struct backend *be, struct arena **a)
{
    bool ok = true;
    for (int i = 0; i < WS_N; i++) ok = (a[i] = arena_create(be, 0)) && ok;
    if (!ok) {
        free_arenas(a);
        for (int i = 0; i < WS_N; i++) a[i] = NULL;
    }
    return ok;
}

struct t3_workspace *t3_workspace_create(const struct backend *be)
{
    struct t3_workspace *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->be = be;
    if (!make_arenas(be, w->a)) {
        free(w);
        return NULL;
    }
    return w;
}

void t3_workspace_free(struct t3_workspace *w)
{
    if (!w) return;
    free_arenas(w->a);
    free(w);
}

void t3_workspace_set_pool(struct t3_workspace *w, struct arena_pool *p)
{
    for (int i = 0; i < WS_N; i++) arena_set_pool(w->a[i], p);
}

/* ---- voice prefix ---------------------------------------------------------- */

/* ---- the unconditional tail ----------------------------------------------
 * In a CFG pair the unconditional row carries text_pos_emb[j] alone at
 * text position j (spec/t3.md §6.1: its text embeddings are zeroed), after
 * the same voice prefix as the conditional row. Its keys and values over
 * the text thus depend on the voice and j, not on the text: a prefix keeps
 * them once computed, and a pair's prefill restores them instead of running
 * the unconditional row over the text (half of a CFG prefill's products).
 * They are computed by blocks of UNC_BLOCK positions, block k over text
 * positions [k UNC_BLOCK, (k + 1) UNC_BLOCK) (the last one cut at the end
 * of the text position table) on top of the blocks before it. A block's
 * forward has the same shapes and operands whatever the text, so a block is
 * the same bit for bit whether it is computed for this call or was kept
 * from an earlier one: an utterance's tokens never depend on what was said
 * before in the voice. Rules: blocks are published in order, under mu,
 * with n (release); blk[0, n) never change again and are read without the
 * lock; a prefix keeps at most UNC_KEEP blocks (512 positions; a block of
 * the 30-layer English / multilingual T3 is 2.1 MB with a Q8_0 cache, 7.9
 * MB with an F32 one), later ones are computed for each call. */
#define UNC_BLOCK 32
#define UNC_KEEP 16
struct t3_unc {
    pthread_mutex_t mu;
    atomic_int n;          /* blocks published */
    void *blk[UNC_KEEP];   /* t3_backbone_kv_bytes(, UNC_BLOCK) bytes each, host */
};

struct t3_prefix *t3_prefix_new(const struct t3_model *m)
{
    struct t3_prefix *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->m = m;
    if (m->order != T3_ORDER_CFG) return p;
    if (!(p->unc = calloc(1, sizeof *p->unc)) || pthread_mutex_init(&p->unc->mu, NULL)) {
        free(p->unc);
        free(p);
        return NULL;
    }
    atomic_init(&p->unc->n, 0);
    return p;
}

/* Positions in block k of the unconditional tail of m. */
static int unc_block_len(const struct t3_model *m, int k)
{
    const int64_t left = m->text_pos_emb->ne[0] - (int64_t)k * UNC_BLOCK;
    return (int)(left < UNC_BLOCK ? left : UNC_BLOCK);
}

int t3_prefix_unc_len(const struct t3_prefix *p)
{
    if (!p || !p->unc) return 0;
    const int n = atomic_load_explicit(&p->unc->n, memory_order_acquire);
    int len = 0;
    for (int k = 0; k < n; k++) len += unc_block_len(p->m, k);
    return len;
}

/* Text positions the tail blocks covering n_text positions span. */
static int64_t unc_span(const struct t3_model *m, int64_t n_text)
{
    const int64_t r = (n_text + UNC_BLOCK - 1) / UNC_BLOCK * UNC_BLOCK;
    return r < m->text_pos_emb->ne[0] ? r : m->text_pos_emb->ne[0];
}

/* Keep block k (bytes from malloc, taken) in u unless it holds k already
 * or is full. */
static void unc_publish(struct t3_unc *u, int k, void *blk)
{
    if (k < UNC_KEEP) {
        pthread_mutex_lock(&u->mu);
        if (atomic_load_explicit(&u->n, memory_order_relaxed) == k) {
            u->blk[k] = blk;
            blk = NULL;
            atomic_store_explicit(&u->n, k + 1, memory_order_release);
        }
        pthread_mutex_unlock(&u->mu);
    }
    free(blk);
}

/* Blocks of m's tail making up n_pos positions, or -1 when n_pos is not
 * a whole number of blocks a prefix keeps. */
static int unc_blocks_of(const struct t3_model *m, int64_t n_pos)
{
    int64_t len = 0;
    for (int k = 0; k <= UNC_KEEP; k++) {
        if (len == n_pos) return k;
        if (k == UNC_KEEP || len >= m->text_pos_emb->ne[0]) break;
        len += unc_block_len(m, k);
    }
    return -1;
}

size_t t3_prefix_unc_bytes(const struct t3_prefix *p, int n_pos)
{
    const int nb = p && p->unc ? unc_blocks_of(p->m, n_pos) : -1;
    size_t b = 0;
    for (int k = 0; k < nb; k++) b += t3_backbone_kv_bytes(&p->m->tfmr, unc_block_len(p->m, k));
    return b;
}

cbx_status t3_prefix_unc_get(const struct t3_prefix *p, int n_pos, void *dst, char *err)
{
    const int nb = p && p->unc ? unc_blocks_of(p->m, n_pos) : -1;
    if (nb < 0 || nb > atomic_load_explicit(&p->unc->n, memory_order_acquire))
        return err_setf(err, CBX_ERR_INVALID_ARG, "T3: the voice prefix keeps no unconditional tail of %d positions",
                        n_pos);
    char *o = dst;
    for (int k = 0; k < nb; k++) {
        const size_t b = t3_backbone_kv_bytes(&p->m->tfmr, unc_block_len(p->m, k));
        memcpy(o, p->unc->blk[k], b);
        o += b;
    }
    return CBX_OK;
}

cbx_status t3_prefix_unc_put(struct t3_prefix *p, int n_pos, const void *src, char *err)
{
    const int nb = p && p->unc ? unc_blocks_of(p->m, n_pos) : -1;
    if (nb < 0 || atomic_load_explicit(&p->unc->n, memory_order_acquire) != 0)
        return err_setf(err, CBX_ERR_INVALID_ARG, "T3: an unconditional tail of %d positions does not fit this prefix",
                        n_pos);
    const char *in = src;
    for (int k = 0; k < nb; k++) {
        const size_t b = t3_backbone_kv_bytes(&p->m->tfmr, unc_block_len(p->m, k));
        void *blk = malloc(b);
        if (!blk) return err_setf(err, CBX_ERR_NOMEM, "T3: out of memory for an unconditional tail");
        memcpy(blk, in, b);
        unc_publish(p->unc, k, blk);
        in += b;
    }
    return CBX_OK;
}

/* The unconditional row r1 (a row view of a pair's cache holding the voice
 * prefix, C positions) over text positions [0, unc_span(n_text)): blocks
 * that u keeps restored, the others computed and offered to u. Arena a is
 * reset after each block. */
static cbx_status unc_tail(struct arena *a, const struct t3_model *m, struct t3_unc *u, struct kv_cache *r1,
                           int C, int64_t n_text)
{
    const int nb = (int)(unc_span(m, n_text) + UNC_BLOCK - 1) / UNC_BLOCK;
    const int have = atomic_load_explicit(&u->n, memory_order_acquire);
    cbx_status rc = CBX_OK;
    for (int k = 0; k < nb && rc == CBX_OK; k++) {
        const int p0 = C + k * UNC_BLOCK, len = unc_block_len(m, k);
        if (k < have) {
            rc = kv_cache_restore_at(a, r1, p0, len, u->blk[k], false);
            continue;
        }
        r1->n_past = p0;
        rc = t3_backbone_prefill_kv(a, &m->tfmr, r1,
                                    op_cont(a, pos_rows(a, m->text_pos_emb, (int64_t)k * UNC_BLOCK, len)));
        if (rc == CBX_OK && k < UNC_KEEP) {
            void *blk = malloc(t3_backbone_kv_bytes(&m->tfmr, len));
            if (!blk) return arena_fail(a, CBX_ERR_NOMEM, "out of memory for the unconditional tail");
            if ((rc = kv_cache_save_at(a, r1, p0, len, blk)) != CBX_OK) free(blk);
            else unc_publish(u, k, blk);
        }
        if (rc == CBX_OK) arena_reset(a);
    }
    return rc;
}

cbx_status t3_prefix_extend(const struct t3_prefix *p, const struct backend *be, int64_t n_text, char *err)
{
    if (!p || !p->unc || !be->host || n_text <= 0) return CBX_OK;
    const struct t3_model *m = p->m;
    if (n_text > (int64_t)UNC_KEEP * UNC_BLOCK) n_text = (int64_t)UNC_KEEP * UNC_BLOCK;
    const int64_t span = unc_span(m, n_text);
    if (t3_prefix_unc_len(p) >= span) return CBX_OK;
    struct arena *ar[WS_N] = {0};
    if (!make_arenas(be, ar)) return err_setf(err, CBX_ERR_NOMEM, "T3: out of memory");
    set_precision(m, ar);
    struct arena *a = ar[WS_STEP];
    struct kv_cache kv;
    cbx_status rc = t3_backbone_kv_init(&m->tfmr, &kv, 1, ar[WS_CACHE], (int)(p->n + span));
    if (rc != CBX_OK) {
        err_setf(err, rc, "T3: %s", arena_errmsg(ar[WS_CACHE]));
    } else {
        kv.scratch[0] = ar[WS_SCRATCH0];
        kv.scratch[1] = ar[WS_SCRATCH1];
        rc = kv_cache_restore(a, &kv, p->n, p->kv, false);
        if (rc == CBX_OK) rc = unc_tail(a, m, p->unc, &kv, p->n, n_text);
        if (rc != CBX_OK) err_setf(err, rc, "T3: unconditional tail: %s", arena_errmsg(a));
    }
    free_arenas(ar);
    return rc;
}

void t3_prefix_free(struct t3_prefix *p)
{
    if (!p) return;
    if (p->unc) {
        for (int k = 0; k < UNC_KEEP; k++) free(p->unc->blk[k]);
        pthread_mutex_destroy(&p->unc->mu);
        free(p->unc);
    }
    if (p->map) munmap(p->map, p->map_bytes);
    else free(p->kv);
    if (p->dev_kv) backend_buf_free(p->dev_be, p->dev_kv);
    free(p->speaker_emb);
    free(p->prompt_tokens);
    free(p);
}

bool t3_prefix_matches(const struct t3_prefix *p, const struct t3_model *m, const struct t3_cond *c)
{
    return p && c && p->m == m && p->n_prompt == c->n_prompt &&
           (!t3_has_emotion(m) || !memcmp(&p->emotion_adv, &c->emotion_adv, sizeof c->emotion_adv)) &&
           !memcmp(p->speaker_emb, c->speaker_emb, sizeof(float) * (size_t)m->hp.speaker_embed_size) &&
           (c->n_prompt == 0 ||
            !memcmp(p->prompt_tokens, c->prompt_tokens, sizeof(int32_t) * (size_t)c->n_prompt));
}

cbx_status t3_prefix_place(struct t3_prefix *p, char *err)
{
    const struct backend *be = weight_set_backend(p->m->ws);
    if (!be || be->host || !be->copy_2d || p->dev_kv) return CBX_OK;
    const size_t kb = t3_backbone_kv_bytes(&p->m->tfmr, p->n);
    if (!(p->dev_kv = backend_buf_alloc(be, kb)))
        return err_setf(err, CBX_ERR_NOMEM, "T3: out of %s memory for a voice prefix (%zu bytes)", be->name, kb);
    p->dev_be = be;
    if (!be->from_host(be, p->dev_kv, p->kv, kb)) {
        backend_buf_free(be, p->dev_kv);
        p->dev_kv = NULL;
        return err_setf(err, CBX_ERR_INTERNAL, "T3: placing a voice prefix on %s failed", be->name);
    }
    return CBX_OK;
}

/* The conditioning must fit the context with at least the start-of-speech
 * token after it. */
static cbx_status check_prompt(const struct t3_model *m, int64_t n_prompt, char *err)
{
    const int64_t lim = m->speech_pos_emb ? m->speech_pos_emb->ne[0] : m->tfmr.n_ctx;
    if (n_prompt < (m->speech_pos_emb ? 1 : 0) || n_prompt > lim || t3_cond_len(m, n_prompt) + 1 > m->tfmr.n_ctx)
        return err_setf(err, CBX_ERR_INVALID_ARG, "T3: a voice prompt of %lld tokens does not fit the model",
                        (long long)n_prompt);
    return CBX_OK;
}

/* Prompt speech ids enter T3 here (op_get_rows does not check them on the
 * device): each must index the speech table. */
static cbx_status check_prompt_ids(const struct t3_model *m, const struct t3_cond *c, char *err)
{
    for (int64_t i = 0; i < c->n_prompt; i++)
        if (c->prompt_tokens[i] < 0 || c->prompt_tokens[i] >= m->hp.speech_vocab)
            return err_setf(err, CBX_ERR_INVALID_ARG, "T3: prompt speech token %d at %lld is outside the vocabulary of %lld",
                            c->prompt_tokens[i], (long long)i, (long long)m->hp.speech_vocab);
    return CBX_OK;
}

cbx_status t3_prefix_build(const struct t3_model *m, const struct backend *be,
                           const struct t3_cond *c, struct t3_prefix **out, char *err)
{
    *out = NULL;
    cbx_status rc = check_prompt(m, c->n_prompt, err);
    if (rc == CBX_OK) rc = check_prompt_ids(m, c, err);
    if (rc != CBX_OK) return rc;
    const int n = t3_cond_len(m, c->n_prompt);
    const size_t kb = t3_backbone_kv_bytes(&m->tfmr, n), ns = (size_t)m->hp.speaker_embed_size;
    struct t3_prefix *p = t3_prefix_new(m);
    struct arena *ar[WS_N] = {0};
    const bool have = make_arenas(be, ar);
    struct arena *cache = ar[WS_CACHE], *a = ar[WS_STEP];
    if (p) {
        p->kv = malloc(kb);
        p->speaker_emb = malloc(sizeof(float) * ns);
        p->prompt_tokens = malloc(sizeof(int32_t) * (size_t)(c->n_prompt > 0 ? c->n_prompt : 1));
    }
    if (!p || !p->kv || !p->speaker_emb || !p->prompt_tokens || !have) {
        rc = err_setf(err, CBX_ERR_NOMEM, "T3: out of memory for a voice prefix of %d positions", n);
        goto done;
    }
    p->m = m;
    p->n = n;
    p->kv_type = m->tfmr.kv_type;
    p->n_prompt = c->n_prompt;
    p->emotion_adv = t3_has_emotion(m) ? c->emotion_adv : 0.0f;
    memcpy(p->speaker_emb, c->speaker_emb, sizeof(float) * ns);
    if (c->n_prompt > 0) memcpy(p->prompt_tokens, c->prompt_tokens, sizeof(int32_t) * (size_t)c->n_prompt);
    p->bytes = sizeof *p + kb + sizeof(float) * ns + sizeof(int32_t) * (size_t)c->n_prompt;
    struct kv_cache kv;
    if ((rc = t3_backbone_kv_init(&m->tfmr, &kv, 1, cache, n)) != CBX_OK) {
        rc = err_setf(err, rc, "T3: %s", arena_errmsg(cache));
        goto done;
    }
    kv.scratch[0] = ar[WS_SCRATCH0];
    kv.scratch[1] = ar[WS_SCRATCH1];
    set_precision(m, ar);
    rc = t3_backbone_prefill_kv(a, &m->tfmr, &kv, t3_prepare_conditioning(a, m, c));
    if (rc == CBX_OK) rc = kv_cache_save(a, &kv, n, p->kv);
    if (rc != CBX_OK) err_setf(err, rc, "T3: voice prefix: %s", arena_errmsg(a));
    else rc = t3_prefix_place(p, err);
done:
    free_arenas(ar);
    if (rc != CBX_OK) t3_prefix_free(p);
    else *out = p;
    return rc;
}

/* CFG: l = cond + w (cond - uncond) of rows [cond, uncond]; one row: a copy */
static void cfg_combine(const float *rows, int n_rows, double w, float *l, int64_t V)
{
    if (n_rows == 2) {
        const float wf = (float)w;
        for (int64_t i = 0; i < V; i++) l[i] = rows[i] + wf * (rows[i] - rows[V + i]);
    } else {
        memcpy(l, rows, sizeof(float) * (size_t)V);
    }
}

/* Apply the processors of m's order to l (the row a token is sampled
 * from); hist: the repetition history. With top_k 1 (greedy) the Llama
 * order stops after the repetition penalty (the argmax, which none of the
 * later steps moves). */
struct sample_buf { float *probs, *scratch; int32_t *idx; uint8_t *seen; };
static void process(const struct t3_model *m, const struct sampler_params *s, float *l, int64_t V,
                    const int32_t *hist, int64_t n_hist, const struct sample_buf *b)
{
    if (m->order == T3_ORDER_TURBO) {
        /* inference_turbo: temperature, top-k, top-p, repetition penalty */
        if (s->temperature > 0 && s->temperature != 1.0) sampler_temperature(l, V, (float)s->temperature);
        if (s->top_k > 0) sampler_top_k(l, V, s->top_k);
        if (s->top_p < 1.0) sampler_top_p(l, V, s->top_p, b->scratch, b->idx);
        if (s->repetition_penalty != 1.0) sampler_repetition_penalty(l, V, hist, n_hist, (float)s->repetition_penalty, b->seen);
    } else {
        /* inference: repetition penalty, temperature, min-p, top-p; no top-k */
        if (s->repetition_penalty != 1.0) sampler_repetition_penalty(l, V, hist, n_hist, (float)s->repetition_penalty, b->seen);
        if (s->top_k != 1) {
            if (s->temperature > 0 && s->temperature != 1.0) sampler_temperature(l, V, (float)s->temperature);
            if (s->min_p > 0) sampler_min_p(l, V, s->min_p, b->scratch);
            if (s->top_p < 1.0) sampler_top_p(l, V, s->top_p, b->scratch, b->idx);
        }
    }
}

/* process(), then draw: top_k 1 is the argmax. Returns the token, or -1
 * when nothing can be drawn (every logit -inf). */
static int64_t sample(const struct t3_model *m, const struct sampler_params *s, float *l, int64_t V,
                      const int32_t *hist, int64_t n_hist, struct rng_stream *rs, const struct sample_buf *b)
{
    process(m, s, l, V, hist, n_hist, b);
    if (sampler_all_neg_inf(l, V)) return -1;
    if (s->top_k == 1) {
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            if (l[i] > l[best]) best = i;
        return best;
    }
    sampler_softmax(l, b->probs, V);
    return rng_categorical(rs, b->probs, V);
}

struct sample_params t3_sample_params(const struct t3_model *m, const struct t3_gen_params *p)
{
    const struct sampler_params *s = &p->s;
    const struct sample_params sp = {
        .order = m->order == T3_ORDER_TURBO ? SAMPLE_TURBO : SAMPLE_LLAMA,
        .cfg_weight = (float)p->cfg_weight,
        .temperature = s->temperature > 0 && s->temperature != 1.0 ? (float)s->temperature : 0.0f,
        .top_k = s->top_k > 0 ? s->top_k : 0,
        .top_p = s->top_p < 1.0,
        .top_p_cut = (float)(1.0 - s->top_p),
        .min_p = s->min_p > 0 ? (float)s->min_p : 0.0f,
        .repetition_penalty = (float)s->repetition_penalty,
    };
    return sp;
}

/* t3_step_probs (rs NULL: the probabilities into probs) and t3_step_draw
 * (the token into *token) */
static cbx_status step_host(const struct t3_model *m, const struct t3_gen_params *p, const float *raw, int n_rows,
                            const int32_t *hist, int64_t n_hist, float *probs, struct rng_stream *rs, int32_t *token,
                            char *err)
{
    const int64_t V = m->hp.speech_vocab;
    if (n_rows < 1 || n_rows > (m->order == T3_ORDER_CFG ? 2 : 1))
        return err_setf(err, CBX_ERR_INVALID_ARG, "t3_step_probs: %d rows", n_rows);
    float *l = malloc(sizeof(float) * (size_t)V * (rs ? 4 : 3));
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)V);
    uint8_t *seen = malloc((size_t)V);
    cbx_status rc = l && idx && seen ? CBX_OK : err_setf(err, CBX_ERR_NOMEM, "t3_step_probs: out of memory");
    if (rc == CBX_OK) {
        const struct sample_buf b = {rs ? l + 3 * V : probs, l + V, idx, seen};
        cfg_combine(raw, n_rows, p->cfg_weight, l, V);
        if (rs) {
            *token = (int32_t)sample(m, &p->s, l, V, hist, n_hist, rs, &b);
        } else {
            process(m, &p->s, l, V, hist, n_hist, &b);
            sampler_softmax(l, probs, V);
        }
    }
    free(l);
    free(idx);
    free(seen);
    return rc;
}

cbx_status t3_step_probs(const struct t3_model *m, const struct t3_gen_params *p, const float *raw, int n_rows,
                         const int32_t *hist, int64_t n_hist, float *probs, char *err)
{
    return step_host(m, p, raw, n_rows, hist, n_hist, probs, NULL, NULL, err);
}

cbx_status t3_step_draw(const struct t3_model *m, const struct t3_gen_params *p, const float *raw, int n_rows,
                        const int32_t *hist, int64_t n_hist, struct rng_stream *rs, int32_t *token, char *err)
{
    return step_host(m, p, raw, n_rows, hist, n_hist, NULL, rs, token, err);
}

/* ---- sequences: prefill, then one step per token -------------------------- */

struct t3_seq {
    const struct t3_model *m;
    struct t3_gen_params p;
    const struct backend *be;
    t3_step_cb cb;
    void *user;
    struct arena *own[WS_N];    /* the call's arenas, or none with p.ws */
    struct arena *const *ar;    /* the arenas in use */
    struct kv_cache kv;
    int n_rows;                 /* 1, or 2 for a CFG pair */
    bool cfg;
    int max_samples, step;
    int64_t cap, V;
    float *logits;              /* [n_rows][V] raw logits of the next step,
                                 * then raw copy, processed row, scratch */
    int32_t *idx;
    uint8_t *seen;
    int32_t *hist;              /* start token, then the samples */
    int64_t n;                  /* samples so far */
    bool done;
    struct rng_stream rs;
    /* the alignment guard (p.alignment_guard), else al NULL: the three
     * heads' probabilities of the last forward ([3][2][cap] in probs) */
    struct alignment *al;
    struct kv_export exp;
    float *probs;
    /* the decode step's operands on the backend (kv_cache.h invariant 5),
     * written before each step's forward: io is I32 [IO_N]; tok and spos
     * are [1, 1] views of it for the embedding lookups, at and len [1]
     * views for the cache (kv.at, kv.len once the prefill is done) */
    struct tensor *io, *io_tok, *io_spos, *io_at, *io_len;
    /* the decode step as a backend graph (backend.h): the first step runs
     * as usual (the arenas take their size), the second is recorded and
     * every later one replays the recording. gl: the logits it leaves. */
    enum { GRAPH_WARM, GRAPH_RECORD, GRAPH_REPLAY, GRAPH_OFF } gstate;
    struct backend_graph *graph;
    const struct tensor *gl;
    int replays;
    /* sampling on the device (op_sample; p.host_logits false and the
     * backend has it), else dev false: a recorded step ends in the draw of
     * its token into dev_tok. dev_seen [V] and dev_rng [4] are the
     * repetition history and the stream's position there, made from
     * hist and rs whenever the host drew in between (dev_synced false);
     * drawn: dev_tok's id, due at the next seq_sample */
    bool dev;
    struct tensor *dev_tok, *dev_seen, *dev_rng;
    struct sample_params dev_p;
    bool dev_synced, drawn;
    int32_t drawn_id;
};

enum { IO_TOKEN, IO_AT, IO_LEN, IO_SPEECH_POS, IO_N };
static cbx_status io_init(struct t3_seq *s, struct arena *cache);

void t3_seq_free(struct t3_seq *s)
{
    if (!s) return;
    if (s->graph) s->be->graph_free(s->be, s->graph);
    alignment_free(s->al);
    free(s->al);
    free(s->probs);
    free(s->hist);
    free(s->seen);
    free(s->idx);
    free(s->logits);
    /* the caller's workspace: its blocks to its pool, if any */
    if (s->ar && s->ar != s->own)
        for (int i = 0; i < WS_N; i++) arena_release(s->ar[i]);
    free_arenas(s->own);
    free(s);
}

/* Whether s's prefill takes the unconditional tail ("The unconditional
 * tail"): a CFG pair with text on a host backend. A device computes the
 * pair's text in one batched forward instead (its prefill is launch-bound,
 * so a forward per tail block would cost more than the row it saves). */
static bool uses_tail(const struct t3_seq *s, int64_t n_text)
{
    return s->n_rows == 2 && n_text > 0 && s->be->host;
}

/* A CFG pair's text after the voice prefix pfx (in both rows of s->kv): the
 * conditional row over text + text_pos_emb alone, the unconditional row
 * from pfx's tail ("The unconditional tail"); both rows then hold
 * C + n_text positions, and the start-of-speech rows follow in one forward
 * over both. */
static cbx_status pair_text(struct t3_seq *s, const struct t3_prefix *pfx, const int32_t *text, int64_t n_text)
{
    const struct t3_model *m = s->m;
    struct arena *a = s->ar[WS_STEP], *cache = s->ar[WS_CACHE];
    const int C = s->kv.n_past;
    struct kv_cache r0, r1;
    cbx_status rc = kv_cache_row(cache, &s->kv, 0, &r0);
    if (rc == CBX_OK) rc = kv_cache_row(cache, &s->kv, 1, &r1);
    if (rc != CBX_OK) return arena_fail(a, rc, "%s", arena_errmsg(cache));
    if (!pfx->unc) return arena_fail(a, CBX_ERR_INTERNAL, "T3: a voice prefix without an unconditional tail");
    rc = unc_tail(a, m, pfx->unc, &r1, C, n_text);
    if (rc != CBX_OK) return rc;
    arena_reset(a);
    rc = t3_backbone_prefill_kv(a, &m->tfmr, &r0, text_input(a, m, text, n_text));
    s->kv.n_past = C + (int)n_text;
    return rc;
}

/* The prefill of t3_seq_start: over [cond; text; start-of-speech (x2 on
 * Llama)]: the voice prefix (restored, or computed as t3_prefix_build
 * does), then the rest (a CFG pair: pair_text, then both start-of-speech
 * rows); or all in one pass (p.one_pass, no pfx). */
static cbx_status prefill(struct t3_seq *s, const struct backend *be, const struct t3_cond *c,
                          const struct t3_prefix *pfx, const int32_t *text, int64_t n_text, char *err)
{
    const struct t3_model *m = s->m;
    struct arena *a = s->ar[WS_STEP];
    struct t3_prefix *tmp = NULL;
    cbx_status rc = CBX_OK;
    struct tensor *x;
    if (s->p.one_pass && !pfx) {
        x = t3_prepare_input_embeds(a, m, c, text, n_text, s->n_rows);
    } else {
        if (!pfx && s->n_rows == 1) {
            rc = t3_backbone_prefill_kv(a, &m->tfmr, &s->kv, t3_prepare_conditioning(a, m, c));
        } else {
            /* a CFG pair: one row's prefix, restored into both */
            if (!pfx && (rc = t3_prefix_build(m, be, c, &tmp, err)) != CBX_OK) return rc;
            const struct t3_prefix *use = pfx ? pfx : tmp;
            const bool dev = use->dev_kv && backend_compatible(be, use->dev_be);
            rc = kv_cache_restore(a, &s->kv, use->n, dev ? use->dev_kv : use->kv, dev);
            if (rc == CBX_OK && uses_tail(s, n_text)) rc = pair_text(s, use, text, n_text);
        }
        if (rc == CBX_OK) arena_reset(a);
        /* with the tail, a pair's text is in its cache already (pair_text) */
        x = rc != CBX_OK              ? NULL
            : uses_tail(s, n_text) ? speech_input(a, m, &m->hp.start_speech, 0, 2)
                                    : text_and_start(a, m, text, n_text, s->n_rows);
    }
    if (s->cfg && x) x = op_concat(a, x, speech_input(a, m, &m->hp.start_speech, 0, s->n_rows), 1);
    /* the guard reads this forward's two start-of-speech rows */
    s->kv.exp = s->al ? &s->exp : NULL;
    if (rc == CBX_OK) rc = last_logits(a, m, t3_backbone_forward(a, &m->tfmr, &s->kv, x), s->logits);
    t3_prefix_free(tmp);
    if (rc != CBX_OK && arena_status(a) != CBX_OK) err_setf(err, rc, "T3: %s", arena_errmsg(a));
    else if (rc != CBX_OK && !err[0]) err_setf(err, rc, "T3: %s", cbx_status_str(rc));
    return rc;
}

/* The alignment guard of sequence s (t3/alignment.h): the analyzer over
 * the n_text text tokens after the C conditioning positions, and the
 * export of its three heads (row 0, the conditional row) from every
 * forward after the voice prefix. */
static cbx_status guard_start(struct t3_seq *s, int64_t C, int64_t n_text, char *err)
{
    const struct t3_backbone *bb = &s->m->tfmr;
    for (int e = 0; e < ALIGNMENT_N_HEADS; e++)
        if (alignment_heads[e][0] >= bb->n_layer || alignment_heads[e][1] >= bb->n_head)
            return err_setf(err, CBX_ERR_INVALID_ARG,
                            "T3: the alignment guard reads layer %d, head %d of the attention; this model has %d "
                            "layers of %d heads", alignment_heads[e][0], alignment_heads[e][1], bb->n_layer,
                            bb->n_head);
    if (!(s->al = calloc(1, sizeof *s->al))) return err_setf(err, CBX_ERR_NOMEM, "T3: out of memory");
    cbx_status rc = alignment_init(s->al, (int)C, (int)n_text, err);
    if (rc != CBX_OK) {
        free(s->al);
        s->al = NULL;
        return rc;
    }
    s->probs = malloc(sizeof(float) * (size_t)(ALIGNMENT_N_HEADS * 2) * (size_t)s->cap);
    if (!s->probs) return err_setf(err, CBX_ERR_NOMEM, "T3: out of memory for the alignment guard");
    s->exp.n = ALIGNMENT_N_HEADS;
    s->exp.row = 0;
    s->exp.n_q = 2; /* the prefill's two start-of-speech rows */
    s->exp.ld = s->cap;
    for (int e = 0; e < ALIGNMENT_N_HEADS; e++) {
        s->exp.layer[e] = alignment_heads[e][0];
        s->exp.head[e] = alignment_heads[e][1];
        s->exp.dst[e] = s->probs + (size_t)e * 2 * (size_t)s->cap;
    }
    return CBX_OK;
}

cbx_status t3_seq_start(const struct t3_model *m, const struct backend *be, const struct t3_cond *c,
                        const struct t3_prefix *pfx, const int32_t *text, int64_t n_text,
                        const struct t3_gen_params *p, t3_step_cb cb, void *user, struct t3_seq **out,
                        char *err)
{
    *out = NULL;
    if (!pfx && !c) return err_setf(err, CBX_ERR_INVALID_ARG, "T3: no conditioning and no voice prefix");
    if (pfx && pfx->m != m) return err_setf(err, CBX_ERR_INVALID_ARG, "T3: the voice prefix belongs to another model");
    if (pfx && pfx->kv_type != m->tfmr.kv_type)
        return err_setf(err, CBX_ERR_INVALID_ARG, "T3: the voice prefix holds %s values, the cache is %s",
                        dtype_name(pfx->kv_type), dtype_name(m->tfmr.kv_type));
    const int64_t n_prompt = pfx ? pfx->n_prompt : c->n_prompt;
    if (n_text < 0) return err_setf(err, CBX_ERR_INVALID_ARG, "T3: %lld text tokens", (long long)n_text);
    if (p->max_gen_len < 0) return err_setf(err, CBX_ERR_INVALID_ARG, "T3: at most %d tokens", p->max_gen_len);
    cbx_status rc = pfx ? CBX_OK : check_prompt(m, n_prompt, err);
    if (rc == CBX_OK && !pfx) rc = check_prompt_ids(m, c, err);
    if (rc != CBX_OK) return rc;
    if (m->text_pos_emb && n_text > m->text_pos_emb->ne[0])
        return err_setf(err, CBX_ERR_INVALID_ARG, "T3: %lld text tokens exceed the %lld-position text table",
                        (long long)n_text, (long long)m->text_pos_emb->ne[0]);
    for (int64_t i = 0; i < n_text; i++)
        if (text[i] < 0 || text[i] >= m->hp.text_vocab)
            return err_setf(err, CBX_ERR_INVALID_ARG, "T3: text token %d at %lld is outside the vocabulary of %lld",
                            text[i], (long long)i, (long long)m->hp.text_vocab);
    if (p->ws && p->ws->be != be) return err_setf(err, CBX_ERR_INVALID_ARG, "T3: the workspace belongs to another backend");
    const bool cfg = m->order == T3_ORDER_CFG;
    if (p->alignment_guard && !cfg)
        return err_setf(err, CBX_ERR_INVALID_ARG,
                        "T3: the alignment guard is for the Llama T3 (English, multilingual), not a GPT-2 one");
    if (p->alignment_guard && n_text < 1)
        return err_setf(err, CBX_ERR_INVALID_ARG, "T3: the alignment guard needs text tokens");
    const int64_t V = m->hp.speech_vocab, C = t3_cond_len(m, n_prompt);
    /* Llama: inference appends a second start-of-speech (bos_embed) */
    const int64_t L0 = C + n_text + 1 + (cfg ? 1 : 0);
    /* samples: GPT-2 up to 1 + max_gen_len, Llama up to max_gen_len */
    const int max_samples = p->max_gen_len + (cfg ? 0 : 1);
    if (cfg && max_samples >= m->speech_pos_emb->ne[0])
        return err_setf(err, CBX_ERR_INVALID_ARG, "T3: %d speech tokens exceed the %lld-position speech table",
                        max_samples, (long long)m->speech_pos_emb->ne[0]);
    if (L0 > m->tfmr.n_ctx)
        return err_setf(err, CBX_ERR_INVALID_ARG, "T3: prompt of %lld positions exceeds the %d-position context",
                        (long long)L0, m->tfmr.n_ctx);
    struct t3_seq *s = calloc(1, sizeof *s);
    if (!s) return err_setf(err, CBX_ERR_NOMEM, "T3: out of memory");
    s->m = m;
    s->p = *p;
    s->be = be;
    s->cb = cb;
    s->user = user;
    s->cfg = cfg;
    /* CFG: [cond, uncond] rows; weight 0 gives cond exactly, so one row */
    s->n_rows = cfg && p->cfg_weight != 0 ? 2 : 1;
    s->max_samples = max_samples;
    s->V = V;
    s->cap = L0 + max_samples < m->tfmr.n_ctx ? L0 + max_samples : m->tfmr.n_ctx;
    /* a pair's unconditional row takes whole tail blocks (pair_text) */
    if (uses_tail(s, n_text) && C + unc_span(m, n_text) > s->cap) s->cap = C + unc_span(m, n_text);
    /* the caller's workspace (reset, blocks kept) or arenas of this call */
    bool have = true;
    if (p->ws) {
        s->ar = p->ws->a;
        for (int i = 0; i < WS_N; i++) arena_reset(s->ar[i]);
    } else {
        have = make_arenas(be, s->own);
        s->ar = s->own;
    }
    s->logits = malloc(sizeof(float) * (size_t)V * 7);
    s->idx = malloc(sizeof(int32_t) * (size_t)V);
    s->seen = malloc((size_t)V);
    s->hist = malloc(sizeof(int32_t) * (size_t)(max_samples + 2));
    if (!have || !s->logits || !s->idx || !s->seen || !s->hist) {
        t3_seq_free(s);
        return err_setf(err, CBX_ERR_NOMEM, "T3: out of memory");
    }
    s->hist[0] = m->hp.start_speech;
    s->done = max_samples <= 0;
    rng_stream_init(&s->rs, "t3.sample", p->seed);
    struct arena *cache = s->ar[WS_CACHE];
    if ((rc = t3_backbone_kv_init(&m->tfmr, &s->kv, s->n_rows, cache, (int)s->cap)) != CBX_OK) {
        err_setf(err, rc, "T3: %s", arena_errmsg(cache));
        t3_seq_free(s);
        return rc;
    }
    s->kv.scratch[0] = s->ar[WS_SCRATCH0];
    s->kv.scratch[1] = s->ar[WS_SCRATCH1];
    if ((rc = io_init(s, cache)) != CBX_OK) {
        err_setf(err, rc, "T3: %s", arena_errmsg(cache));
        t3_seq_free(s);
        return rc;
    }
    set_precision(m, s->ar);
    err[0] = 0;
    if (p->alignment_guard && (rc = guard_start(s, C, n_text, err)) != CBX_OK) {
        t3_seq_free(s);
        return rc;
    }
    if ((rc = prefill(s, be, c, pfx, text, n_text, err)) != CBX_OK) {
        t3_seq_free(s);
        return rc;
    }
    /* every forward from here is one position: fixed shapes */
    s->kv.at = s->io_at;
    s->kv.len = s->io_len;
    *out = s;
    return CBX_OK;
}

/* The repetition history of the next draw: Turbo [start] at the first
 * step, then the samples alone; Llama the start token and the samples. */
static const int32_t *rep_history(const struct t3_seq *s, int64_t *n)
{
    *n = s->cfg ? s->n + 1 : (s->n == 0 ? 1 : s->n);
    return s->cfg || s->n == 0 ? s->hist : s->hist + 1;
}

/* The sampling half of a step: one token from the current logits into
 * *token (-1: none) and whether the sequence goes on, so that its next
 * forward (of *token) is due. */
static cbx_status seq_sample(struct t3_seq *s, int32_t *token, char *err)
{
    *token = -1;
    if (s->done) return CBX_OK;
    const struct t3_model *m = s->m;
    const int64_t V = s->V;
    float *raw = s->logits + 2 * (size_t)V, *l = s->logits + 4 * (size_t)V;
    const struct sample_buf sb = {l + V, s->logits + 5 * (size_t)V, s->idx, s->seen};
    int32_t *out = s->hist + 1;
    int64_t tok;
    if (s->drawn) { /* drawn on the device; the host's stream keeps pace */
        tok = s->drawn_id;
        s->drawn = false;
        raw = NULL;
        if (tok >= 0 && s->p.s.top_k != 1) s->rs.counter++;
    } else {
        if (s->cb) memcpy(raw, s->logits, sizeof(float) * (size_t)(V * s->n_rows));
        cfg_combine(s->logits, s->n_rows, s->p.cfg_weight, l, V);
        /* the alignment guard, between the CFG combine and the repetition
         * penalty (spec/t3.md §10); the last id of generated_ids goes in */
        if (s->al) {
            const float *heads[ALIGNMENT_N_HEADS];
            for (int e = 0; e < ALIGNMENT_N_HEADS; e++) heads[e] = s->exp.dst[e];
            alignment_step(s->al, heads, s->exp.n_q, s->exp.ld, s->hist[s->n], l, V, m->hp.stop_speech);
            s->exp.n_q = 1; /* decode steps: one new row */
        }
        int64_t nh;
        const int32_t *h = rep_history(s, &nh);
        tok = sample(m, &s->p.s, l, V, h, nh, &s->rs, &sb);
        s->dev_synced = false;
    }
    if (tok < 0) { /* every logit -inf: upstream warns and stops */
        s->done = true;
        return CBX_OK;
    }
    const int32_t cur = (int32_t)tok;
    const int step = s->step++;
    out[s->n++] = cur;
    *token = cur;
    if (s->cb && s->cb(s->user, step, cur, raw, s->n_rows, V)) {
        s->done = true;
        return err_setf(err, CBX_ERR_CANCELLED, "T3: cancelled");
    }
    /* Turbo does not check the first sample for the stop token */
    if (((s->cfg || step > 0) && cur == m->hp.stop_speech) || s->step >= s->max_samples ||
        s->kv.n_past >= s->cap) {
        s->done = true;
        return CBX_OK;
    }
    return CBX_OK;
}

/* The operands of the decode step and, where the draw is on the device,
 * its sampler state and parameters (the host sampler's, as op_sample
 * takes them). */
static cbx_status io_init(struct t3_seq *s, struct arena *cache)
{
    const int64_t n[1] = {IO_N}, one[2] = {1, 1}, V[1] = {s->V}, four[1] = {4};
    s->io = arena_tensor(cache, TYPE_I32, 1, n);
    if (s->io) {
        s->io_tok = op_reshape(cache, op_slice(cache, s->io, 0, IO_TOKEN, 1), 2, one);
        s->io_spos = op_reshape(cache, op_slice(cache, s->io, 0, IO_SPEECH_POS, 1), 2, one);
        s->io_at = op_slice(cache, s->io, 0, IO_AT, 1);
        s->io_len = op_slice(cache, s->io, 0, IO_LEN, 1);
    }
    s->dev = s->be->k.sample && !s->p.host_logits && !s->p.alignment_guard && s->V <= OP_SAMPLE_MAX_V;
    if (!s->dev) return arena_status(cache);
    s->dev_tok = arena_tensor(cache, TYPE_I32, 1, one);
    s->dev_seen = arena_tensor(cache, TYPE_I32, 1, V);
    s->dev_rng = arena_tensor(cache, TYPE_I32, 1, four);
    s->dev_p = t3_sample_params(s->m, &s->p);
    return arena_status(cache);
}

/* The device's sampler state from the host's: the repetition history of
 * the next draw and the stream's position (before a recorded step whose
 * previous token the host drew). false when an upload failed. */
static bool dev_sync(struct t3_seq *s)
{
    int64_t nh;
    const int32_t *h = rep_history(s, &nh);
    int32_t *seen = s->idx;
    memset(seen, 0, sizeof(int32_t) * (size_t)s->V);
    for (int64_t i = 0; i < nh; i++)
        if (h[i] >= 0 && h[i] < s->V) seen[h[i]] = 1;
    const uint32_t r[4] = {(uint32_t)s->rs.key, (uint32_t)(s->rs.key >> 32), (uint32_t)s->rs.counter,
                           (uint32_t)(s->rs.counter >> 32)};
    if (!s->be->from_host(s->be, s->dev_seen->data, seen, sizeof(int32_t) * (size_t)s->V) ||
        !s->be->from_host(s->be, s->dev_rng->data, r, sizeof r))
        return false;
    s->dev_synced = true;
    return true;
}

/* What a recorded step leaves for the host: the drawn id (s->dev), else
 * the logits. */
static cbx_status step_fetch(struct t3_seq *s)
{
    if (!s->dev) return tensor_to_host(s->gl, s->logits);
    s->drawn = true;
    return tensor_to_host(s->dev_tok, &s->drawn_id);
}

/* The operands of the next decode step (kv_cache.h invariant 5): the last
 * sample, its cache position and length, its speech position. The ids
 * enter here: the sample is one of the V speech tokens, the positions are
 * checked by the forward. false when the upload failed. */
static bool io_write(struct t3_seq *s)
{
    const int32_t v[IO_N] = {s->hist[s->n], s->kv.n_past, s->kv.n_past + 1, s->step};
    if (!s->be->host) return s->be->from_host(s->be, s->io->data, v, sizeof v);
    memcpy(s->io->data, v, sizeof v);
    return true;
}

/* The decode step's input from the operands: the embedding of the last
 * sample, fed back, [n_rows, 1, D]. Llama: the k-th sample goes in at
 * speech position k + 1. */
static struct tensor *step_input(struct arena *a, const struct t3_seq *s)
{
    const struct t3_model *m = s->m;
    struct tensor *x = op_get_rows(a, m->speech_emb, s->io_tok);
    if (m->speech_pos_emb) x = op_add(a, x, op_get_rows(a, m->speech_pos_emb, s->io_spos));
    return rows(a, x, s->n_rows);
}

/* The decode step's logits on the backend (the forward advances the cache). */
static struct tensor *step_logits(struct t3_seq *s)
{
    struct arena *a = s->ar[WS_STEP];
    arena_reset(a);
    return head(a, s->m, t3_backbone_forward(a, &s->m->tfmr, &s->kv, step_input(a, s)));
}

/* Record the step (s->gstate GRAPH_RECORD) and replay it once; false when
 * the backend could not record it: the sequence then steps as usual (no
 * graph, the cache as before), the reason dropped. */
static bool step_record(struct t3_seq *s)
{
    const struct backend *be = s->be;
    char e[ERR_MAX] = "";
    const int n_past = s->kv.n_past;
    s->gstate = GRAPH_OFF;
    if (be->graph_begin(be, e) != CBX_OK) return false;
    const struct tensor *l = step_logits(s);
    if (l && s->dev && op_sample(s->ar[WS_STEP], s->dev_tok, l, s->dev_seen, s->dev_rng, &s->dev_p) != CBX_OK)
        l = NULL;
    struct backend_graph *g = NULL;
    if (be->graph_end(be, &g, e) != CBX_OK || !l) {
        if (g) be->graph_free(be, g);
        s->kv.n_past = n_past;
        return false;
    }
    if (be->graph_run(be, g, e) != CBX_OK) {
        be->graph_free(be, g);
        s->kv.n_past = n_past;
        return false;
    }
    s->graph = g;
    s->gl = l;
    s->gstate = GRAPH_REPLAY;
    return true;
}

cbx_status t3_seq_step(struct t3_seq *s, int32_t *token, char *err)
{
    cbx_status rc = seq_sample(s, token, err);
    if (rc != CBX_OK || s->done) return rc;
    struct arena *a = s->ar[WS_STEP];
    const struct backend *be = s->be;
    err[0] = 0;
    const bool sync = s->dev && !s->dev_synced && (s->gstate == GRAPH_RECORD || s->gstate == GRAPH_REPLAY);
    if (!io_write(s) || (sync && !dev_sync(s))) {
        rc = arena_fail(a, CBX_ERR_INTERNAL, "uploading a step's operands to %s failed", be->name);
    } else if (s->gstate == GRAPH_REPLAY) {
        if (s->kv.n_past + 1 > s->kv.capacity) {
            rc = arena_fail(a, CBX_ERR_INVALID_ARG, "t3: the cache of %d positions is full", s->kv.capacity);
        } else if ((rc = be->graph_run(be, s->graph, err)) == CBX_OK) {
            s->kv.n_past++;
            s->replays++;
            rc = step_fetch(s);
        }
    } else if (s->gstate == GRAPH_RECORD && step_record(s)) {
        rc = step_fetch(s);
    } else {
        /* graphs: the recording follows a step that ran as usual */
        if (s->gstate == GRAPH_WARM) s->gstate = be->graph_begin && !s->al ? GRAPH_RECORD : GRAPH_OFF;
        const struct tensor *l = step_logits(s);
        rc = l ? tensor_to_host(l, s->logits) : arena_status(a);
    }
    if (rc != CBX_OK) {
        s->done = true;
        if (arena_status(a) != CBX_OK) err_setf(err, rc, "T3: %s", arena_errmsg(a));
        else if (!err[0]) err_setf(err, rc, "T3: %s", cbx_status_str(rc));
        return rc;
    }
    return CBX_OK;
}

int t3_seq_replays(const struct t3_seq *s) { return s->replays; }
bool t3_seq_done(const struct t3_seq *s) { return s->done; }
int t3_seq_rows(const struct t3_seq *s) { return s->n_rows; }
const struct backend *t3_seq_backend(const struct t3_seq *s) { return s->be; }

cbx_status t3_seq_tokens(const struct t3_seq *s, int32_t **tokens, int64_t *n_tokens, char *err)
{
    int64_t n = s->n;
    const int32_t *out = s->hist + 1;
    if (!s->cfg && n > 0 && out[n - 1] == s->m->hp.stop_speech) n--;
    int32_t *res = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!res) return err_setf(err, CBX_ERR_NOMEM, "T3: out of memory");
    memcpy(res, out, sizeof(int32_t) * (size_t)n);
    *tokens = res;
    *n_tokens = n;
    return CBX_OK;
}

/* t3_inference with the prefix from pfx (when not NULL) or computed from c:
 * a sequence run to its end. */
static cbx_status generate(const struct t3_model *m, const struct backend *be, const struct t3_cond *c,
                           const struct t3_prefix *pfx, const int32_t *text, int64_t n_text,
                           const struct t3_gen_params *p, t3_step_cb cb, void *user, int32_t **tokens,
                           int64_t *n_tokens, char *err)
{
    *tokens = NULL;
    *n_tokens = 0;
    struct t3_seq *s = NULL;
    cbx_status rc = t3_seq_start(m, be, c, pfx, text, n_text, p, cb, user, &s, err);
    int32_t tok;
    while (rc == CBX_OK && !t3_seq_done(s)) rc = t3_seq_step(s, &tok, err);
    if (rc == CBX_OK) rc = t3_seq_tokens(s, tokens, n_tokens, err);
    t3_seq_free(s);
    return rc;
}

cbx_status t3_inference(const struct t3_model *m, const struct backend *be, const struct t3_cond *c,
                        const int32_t *text, int64_t n_text, const struct t3_gen_params *p,
                        t3_step_cb cb, void *user, int32_t **tokens, int64_t *n_tokens, char *err)
{
    return generate(m, be, c, NULL, text, n_text, p, cb, user, tokens, n_tokens, err);
}

cbx_status t3_inference_prefixed(const struct t3_model *m, const struct backend *be,
                                 const struct t3_prefix *pfx, const int32_t *text, int64_t n_text,
                                 const struct t3_gen_params *p, t3_step_cb cb, void *user,
                                 int32_t **tokens, int64_t *n_tokens, char *err)
{
    if (!pfx) {
        *tokens = NULL;
        *n_tokens = 0;
        return err_setf(err, CBX_ERR_INVALID_ARG, "T3: no voice prefix");
    }
    return generate(m, be, NULL, pfx, text, n_text, p, cb, user, tokens, n_tokens, err);
}

/* ---- batched decode -------------------------------------------------------- */

struct t3_batch {
    const struct backend *be;
    /* the draws of a step's sequences run in parallel here: be's pool,
     * or on a device the process-wide pool of every core (own_tp: the
     * batch's reference to it) */
    struct threadpool *tp, *own_tp;
    struct t3_batch_stats st;
    struct arena *a[3];        /* step values, then the two layer scratches */
    float *logits;             /* [rows][V] of the last batched forward */
    size_t n_logits;
    int32_t *in;               /* [2][rows]: each row's token, its speech position */
    int n_in;
    struct kv_cache **kv;      /* the group's members, n_cap of them */
    struct t3_seq **go;
    int n_cap;
};

struct t3_batch *t3_batch_create(const struct backend *be)
{
    struct t3_batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->be = be;
    bool ok = true;
    if (be->host) {
        b->tp = be->tp;
    } else { /* the process-wide pool of every core: no threads of its own */
        ok = (b->tp = b->own_tp = tp_shared(tp_default_threads())) != NULL;
    }
    for (int i = 0; i < 3; i++) {
        ok = (b->a[i] = arena_create(be, 0)) && ok;
        /* each row's products as it would be alone (arena.h); no BF16 */
        if (b->a[i]) arena_set_row_exact(b->a[i], true);
    }
    if (!ok) {
        t3_batch_free(b);
        return NULL;
    }
    return b;
}

void t3_batch_free(struct t3_batch *b)
{
    if (!b) return;
    for (int i = 0; i < 3; i++) arena_free(b->a[i]);
    if (b->own_tp) tp_shared_release(b->own_tp);
    free(b->logits);
    free(b->in);
    free(b->kv);
    free(b->go);
    free(b);
}

void t3_batch_set_row_exact(struct t3_batch *b, bool on)
{
    for (int i = 0; i < 3; i++) arena_set_row_exact(b->a[i], on);
}

/* Room for n sequences of rows rows in all and V logits each. */
static bool batch_room(struct t3_batch *b, int n, int rows, int64_t V)
{
    if (n > b->n_cap) {
        struct kv_cache **kv = realloc(b->kv, sizeof *kv * (size_t)n);
        if (kv) b->kv = kv;
        struct t3_seq **go = realloc(b->go, sizeof *go * (size_t)n);
        if (go) b->go = go;
        if (!kv || !go) return false;
        b->n_cap = n;
    }
    if (rows > b->n_in) {
        int32_t *in = realloc(b->in, sizeof *in * 2 * (size_t)rows);
        if (!in) return false;
        b->in = in;
        b->n_in = rows;
    }
    const size_t need = (size_t)rows * (size_t)V;
    if (need > b->n_logits) {
        float *l = realloc(b->logits, sizeof(float) * need);
        if (!l) return false;
        b->logits = l;
        b->n_logits = need;
    }
    return true;
}

void t3_batch_get_stats(const struct t3_batch *b, struct t3_batch_stats *st) { *st = b->st; }

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* the draws of sequences [i0, i1) of a step (tp_parallel_for) */
struct draws {
    struct t3_seq *const *s;
    int32_t *token;
    cbx_status *rc;
};
static void draw_range(void *ctx, int64_t i0, int64_t i1, int ith)
{
    (void)ith;
    const struct draws *d = ctx;
    for (int64_t i = i0; i < i1; i++) {
        char e[ERR_MAX] = "";
        d->rc[i] = seq_sample(d->s[i], &d->token[i], e);
    }
}

cbx_status t3_batch_step(struct t3_batch *b, struct t3_seq *const *s, int n, int32_t *token, cbx_status *rc,
                         char *err)
{
    err[0] = 0;
    for (int i = 0; i < n; i++) {
        token[i] = -1;
        rc[i] = CBX_OK;
        if (s[i]->m != s[0]->m || !backend_compatible(s[i]->be, b->be))
            return err_setf(err, CBX_ERR_INVALID_ARG, "T3 batch: sequence %d belongs to another model or backend", i);
    }
    if (n == 0) return CBX_OK;
    const struct t3_model *m = s[0]->m;
    /* every sequence samples from its own logits, with its own processors,
     * stream and callback; a cancelled one is done and drops out */
    const double t0 = now_s();
    struct draws d = {s, token, rc};
    tp_parallel_for(n >= BATCH_DRAW_MIN ? b->tp : NULL, n, 1, draw_range, &d);
    if (b->own_tp) tp_release_cores(b->own_tp);
    const double t1 = now_s();
    b->st.draw += t1 - t0;
    b->st.steps++;
    int k = 0, rows = 0;
    for (int i = 0; i < n; i++) {
        if (rc[i] != CBX_OK) continue;
        if (!s[i]->done) rows += s[i]->n_rows;
        k += !s[i]->done;
    }
    if (k == 0) return CBX_OK;
    if (!batch_room(b, k, rows, m->hp.speech_vocab)) return err_setf(err, CBX_ERR_NOMEM, "T3 batch: out of memory");
    k = 0;
    for (int i = 0; i < n; i++)
        if (rc[i] == CBX_OK && !s[i]->done) {
            b->go[k] = s[i];
            b->kv[k++] = &s[i]->kv;
        }
    struct arena *a = b->a[0];
    arena_reset(a);
    /* every row's step_input in one lookup: [rows, 1, D] */
    int r = 0;
    for (int i = 0; i < k; i++)
        for (int j = 0; j < b->go[i]->n_rows; j++, r++) {
            b->in[r] = b->go[i]->hist[b->go[i]->n];
            b->in[rows + r] = b->go[i]->step;
        }
    const int64_t ne[2] = {rows, 1};
    struct tensor *x = op_get_rows(a, m->speech_emb, op_from_host(a, TYPE_I32, 2, ne, b->in));
    if (m->speech_pos_emb)
        x = op_add(a, x, op_get_rows(a, m->speech_pos_emb, op_from_host(a, TYPE_I32, 2, ne, b->in + rows)));
    struct kv_cache g;
    kv_cache_group(&g, b->kv, k, b->a[1], b->a[2]);
    const struct tensor *l = head(a, m, t3_backbone_forward(a, &m->tfmr, &g, x));
    const double t2 = now_s();
    cbx_status frc = l ? tensor_to_host(l, b->logits) : arena_status(a);
    b->st.issue += t2 - t1;
    b->st.wait += now_s() - t2;
    b->st.rows += rows;
    const int64_t V = m->hp.speech_vocab;
    size_t off = 0;
    for (int i = 0; i < k; i++) {
        struct t3_seq *q = b->go[i];
        if (frc != CBX_OK) {
            q->done = true;
            continue;
        }
        memcpy(q->logits, b->logits + off, sizeof(float) * (size_t)(V * q->n_rows));
        off += (size_t)(V * q->n_rows);
    }
    if (frc != CBX_OK)
        return err_setf(err, frc, "T3 batch: %s", arena_status(a) != CBX_OK ? arena_errmsg(a) : cbx_status_str(frc));
    return CBX_OK;
}
