/* t3.c - T3 for Turbo/Nano: loading, T3CondEnc (GPT-2 path), input
 * assembly and inference_turbo. Ports chatterbox models/t3/t3.py
 * (prepare_conditioning, prepare_input_embeds, inference_turbo) and
 * modules/cond_enc.py; spec/t3.md §4, §6.2, §7.2. */
#include "t3.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>

#include "core/backend.h"
#include "core/cpu/linear_kernels.h"
#include "core/quant.h"
#include "io/variant.h"

/* The linear weights of the decode step: 4 per block, then the head. */
static const struct tensor **linear_weight(struct t3_model *m, int i)
{
    if (i == 4 * m->tfmr.n_layer) return &m->speech_head_w;
    struct gpt2_layer *l = &m->tfmr.h[i / 4];
    const struct tensor **f[4] = {&l->c_attn_w, &l->c_proj_w, &l->c_fc_w, &l->mlp_proj_w};
    return f[i % 4];
}

void t3_free(struct t3_model *m)
{
    if (!m) return;
    free(m->tfmr.h);
    free(m->owned);
    free(m->packed);
    memset(m, 0, sizeof *m);
}

/* GPT-2 Conv1D stores [in, out]; our linear wants [out, in]. The result is
 * written as `wtype` rows (F32, F16, BF16 or a block type) into *buf. */
static const struct tensor *transposed(const struct tensor *w, enum dtype wtype, char **buf,
                                       struct tensor **desc, float *row)
{
    int64_t in = w->ne[0], out = w->ne[1];
    size_t rs = dtype_row_size(wtype, in);
    for (int64_t o = 0; o < out; o++) {
        for (int64_t i = 0; i < in; i++) {
            const char *src = (const char *)w->data + i * w->nb[0] + o * w->nb[1];
            float v;
            if (w->type == TYPE_F32) memcpy(&v, src, 4);
            else if (w->type == TYPE_F16) v = fp16_to_f32(*(const uint16_t *)src);
            else v = bf16_to_f32(*(const uint16_t *)src);
            row[i] = v;
        }
        quantize_row(wtype, row, *buf + (size_t)o * rs, in);
    }
    const int64_t ne[2] = {out, in};
    **desc = tensor_make(wtype, 2, ne, *buf, NULL);
    (*desc)->name = w->name;
    *buf += (size_t)out * rs;
    return (*desc)++;
}

/* A linear weight [out, in] converted to wtype (or borrowed when it already
 * has that type). */
static const struct tensor *converted(const struct tensor *w, enum dtype wtype, char **buf,
                                      struct tensor **desc, float *row)
{
    if (w->type == wtype) return w;
    int64_t out = w->ne[0], in = w->ne[1];
    size_t rs = dtype_row_size(wtype, in);
    for (int64_t o = 0; o < out; o++) {
        dequantize_row(w->type, (const char *)w->data + o * w->nb[0], row, in);
        quantize_row(wtype, row, *buf + (size_t)o * rs, in);
    }
    **desc = tensor_make(wtype, 2, w->ne, *buf, NULL);
    (*desc)->name = w->name;
    *buf += (size_t)out * rs;
    return (*desc)++;
}

#define HUGE_PAGE ((size_t)2 << 20)

/* The q4_0 / q8_0 linear weights repacked for the cpu decode GEMV
 * (linear_pack; core/cpu/linear_kernels.h): the ones in owned memory in
 * place; the ones borrowed from the weight source (a mapped GGUF), when
 * linear_pack_copies() (not with CBX_PACK=1: the copy's fresh pages cost
 * load time), into m->packed, each source
 * then unmapped from this process (MADV_DONTNEED on the clean file pages:
 * resident memory does not grow, while the pages stay in the page cache, so
 * the next process to load the file still finds them there; MADV_PAGEOUT
 * would evict them and make that load read the disk).
 * desc: free descriptors for the copies; [own0, own1): the owned
 * weights. Weights that cannot be packed, or all when memory runs out,
 * stay as they are (the usual path). */
static void pack_weights(struct t3_model *m, struct tensor *desc, const char *own0, const char *own1)
{
    const int n = 4 * m->tfmr.n_layer + 1;
    const bool copies = linear_pack_copies();
    size_t copy = 0;
    for (int i = 0; copies && i < n; i++) {
        const struct tensor *t = *linear_weight(m, i);
        const char *p = t->data;
        bool owned = p >= own0 && p < own1;
        if (!owned && linear_pack_supported(t))
            copy += (tensor_nbytes(t) + 63) & ~(size_t)63;
    }
    char *dst = NULL;
    if (copy) {
        size_t cap = (copy + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
        /* transparent huge pages: the decode streams these ~174 MB (Q4_0
         * Turbo) once per token, and with 4 KiB pages every 4 KiB costs a
         * TLB miss. bench_e2e, Q4_0 gguf, quiet, builds alternating: T3
         * 250 tokens 3.00 / 2.96 s with, 3.96 / 3.78 s without; a fresh
         * process's load 0.34-0.36 s with, 0.37-0.45 s without. (An
         * earlier measurement under load had shown no gain and a slower
         * first load.) Advisory only. */
        dst = m->packed = aligned_alloc(HUGE_PAGE, cap);
#ifdef MADV_HUGEPAGE
        if (dst) (void)madvise(dst, cap, MADV_HUGEPAGE);
#endif
    }
    for (int i = 0; i < n; i++) {
        const struct tensor **f = linear_weight(m, i), *t = *f;
        const char *p = t->data;
        if (!linear_pack_supported(t)) continue;
        if (p >= own0 && p < own1) {
            /* owned weights' descriptors live in m->owned too */
            (void)linear_pack(t, t->data, (struct tensor *)t);
            continue;
        }
        if (!dst || !linear_pack(t, dst, desc)) continue;
        *f = desc++;
        dst += (tensor_nbytes(t) + 63) & ~(size_t)63;
        /* the whole pages inside the source only */
        uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
        uintptr_t e = ((uintptr_t)p + tensor_nbytes(t)) & ~(uintptr_t)4095;
        if (e > a) (void)madvise((void *)a, e - a, MADV_DONTNEED);
    }
}

cbx_status t3_load_gpt2(struct t3_model *m, const struct weights *w, enum dtype wtype, char *err)
{
    memset(m, 0, sizeof *m);
    cbx_status rc = CBX_OK;
    const int64_t any1[1] = {-1}, any2[2] = {-1, -1};
    const struct tensor *wpe = weights_get(w, "tfmr.wpe.weight", 2, any2, &rc, err);
    if (!wpe) return rc;
    int64_t D = wpe->ne[1];
    if (D % 64) return err_setf(err, CBX_ERR_FORMAT, "T3 weights: width %lld is not a multiple of 64", (long long)D);
    int n_layer = 0;
    for (;; n_layer++) {
        if (!weights_has(w, "tfmr.h.%d.ln_1.weight", n_layer)) break;
    }
    if (n_layer == 0) return err_setf(err, CBX_ERR_FORMAT, "T3 weights: no tfmr.h.0 block");

    struct gpt2 *g = &m->tfmr;
    g->n_layer = n_layer;
    g->d_model = (int)D;
    g->n_head = (int)(D / 64);
    g->n_ctx = (int)wpe->ne[0];
    g->eps = 1e-5f;
    g->wpe = wpe;
    g->kv_type = TYPE_F32;
    const int64_t d1[1] = {D}, dd[2] = {-1, D};
    g->ln_f_w = weights_get(w, "tfmr.ln_f.weight", 1, d1, &rc, err);
    g->ln_f_b = weights_get(w, "tfmr.ln_f.bias", 1, d1, &rc, err);
    m->text_emb = weights_get(w, "text_emb.weight", 2, dd, &rc, err);
    m->speech_emb = weights_get(w, "speech_emb.weight", 2, dd, &rc, err);
    m->speech_head_w = weights_get(w, "speech_head.weight", 2, dd, &rc, err);
    m->speech_head_b = weights_get(w, "speech_head.bias", 1, any1, &rc, err);
    m->spkr_enc_w = weights_get(w, "cond_enc.spkr_enc.weight", 2, any2, &rc, err);
    m->spkr_enc_b = weights_get(w, "cond_enc.spkr_enc.bias", 1, d1, &rc, err);
    if (rc != CBX_OK) return rc;
    if (m->spkr_enc_w->ne[0] != D || m->speech_head_b->ne[0] != m->speech_head_w->ne[0] ||
        m->speech_head_w->ne[0] != m->speech_emb->ne[0])
        return err_setf(err, CBX_ERR_FORMAT, "T3 weights: speech head / embedding / speaker projection sizes disagree");
    m->hp.text_vocab = m->text_emb->ne[0];
    m->hp.speech_vocab = m->speech_emb->ne[0];
    m->hp.start_speech = VARIANT_START_SPEECH; /* 6561 */
    m->hp.stop_speech = VARIANT_STOP_SPEECH;   /* 6562 */
    m->hp.speaker_embed_size = m->spkr_enc_w->ne[1];
    if (m->hp.speech_vocab <= m->hp.stop_speech)
        return err_setf(err, CBX_ERR_FORMAT, "T3 weights: speech vocabulary of %lld has no stop token",
                        (long long)m->hp.speech_vocab);

    /* A converted GGUF (io/model_file.h, chatterbox.t3.conv1d_layout =
     * "out_in") stores the Conv1D weights already transposed to [out, in],
     * possibly quantised: recognised by c_attn being [3D, D] rather than
     * upstream's [D, 3D]. Those weights, and the speech head, are then used
     * in place as stored (convert chose their types), not copied. */
    const struct tensor *ca = weights_get(w, "tfmr.h.0.attn.c_attn.weight", 2, any2, &rc, err);
    if (!ca) return rc;
    const bool out_in = ca->ne[0] == 3 * D && ca->ne[1] == D;
    const struct dtype_traits *wt = dtype_traits(wtype);
    if (!wt || wtype == TYPE_I32 || wtype == TYPE_I64 || D % wt->blck || (4 * D) % wt->blck)
        return err_setf(err, CBX_ERR_INVALID_ARG, "T3: cannot hold weights as %s", dtype_name(wtype));
    /* one buffer: transposed/converted linear weights, their descriptors,
     * one float row of scratch */
    g->h = calloc((size_t)n_layer, sizeof *g->h);
    size_t per_layer = out_in ? 0 : dtype_row_size(wtype, D) * (size_t)(3 * D + D + 4 * D) +
                                    dtype_row_size(wtype, 4 * D) * (size_t)D;
    size_t head = out_in ? 0 : dtype_row_size(wtype, D) * (size_t)m->speech_head_w->ne[0];
    size_t n_desc = 4 * (size_t)n_layer + 1;
    /* huge-page aligned and asked for (the decode streams the weights) */
    size_t own_bytes = per_layer * (size_t)n_layer + head + sizeof(struct tensor) * n_desc +
                       sizeof(float) * 4 * (size_t)D + 64;
    own_bytes = (own_bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    m->owned = aligned_alloc(HUGE_PAGE, own_bytes);
#ifdef MADV_HUGEPAGE
    if (m->owned && per_layer) (void)madvise(m->owned, own_bytes, MADV_HUGEPAGE);
#endif
    if (!g->h || !m->owned) {
        t3_free(m);
        return err_setf(err, CBX_ERR_NOMEM, "T3: out of memory for %d layers", n_layer);
    }
    struct tensor *desc = m->owned;
    float *row = (float *)(desc + n_desc);
    char *buf = (char *)(row + 4 * D);
    buf += (64 - (uintptr_t)buf % 64) % 64;
    char *const wbeg = buf;
    if (!out_in) m->speech_head_w = converted(m->speech_head_w, wtype, &buf, &desc, row);
    for (int i = 0; i < n_layer && rc == CBX_OK; i++) {
        struct gpt2_layer *l = &g->h[i];
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
        if (rc != CBX_OK || out_in) continue; /* [out, in] already: used in place */
        if (dtype_traits(l->c_attn_w->type)->quantized) {
            rc = err_setf(err, CBX_ERR_FORMAT, "T3 weights: quantised Conv1D weights must be stored [out, in]");
            break;
        }
        l->c_attn_w = transposed(l->c_attn_w, wtype, &buf, &desc, row);
        l->c_proj_w = transposed(l->c_proj_w, wtype, &buf, &desc, row);
        l->c_fc_w = transposed(l->c_fc_w, wtype, &buf, &desc, row);
        l->mlp_proj_w = transposed(l->mlp_proj_w, wtype, &buf, &desc, row);
    }
    if (rc == CBX_OK) {
        g->kv_type = gpt2_kv_type(g->h[0].c_attn_w->type);
        m->bf16 = dtype_traits(g->h[0].c_attn_w->type)->quantized;
    }
    if (rc == CBX_OK) pack_weights(m, desc, wbeg, buf);
    if (rc != CBX_OK) t3_free(m);
    return rc;
}

struct tensor *t3_prepare_conditioning(struct arena *a, const struct t3_model *m,
                                       const struct t3_cond *c)
{
    /* T3CondEnc: spkr_enc(speaker_emb.view(-1, 256))[:, None] */
    const int64_t spk_ne[3] = {1, 1, m->hp.speaker_embed_size};
    struct tensor *spk = op_from_host(a, TYPE_F32, 3, spk_ne, c->speaker_emb);
    struct tensor *cond_spkr = op_linear(a, spk, m->spkr_enc_w, m->spkr_enc_b); /* [1, 1, D] */
    if (c->n_prompt == 0) return cond_spkr;
    /* cond_prompt_speech_emb = speech_emb(tokens); no position table on GPT-2 */
    const int64_t pne[2] = {1, c->n_prompt};
    struct tensor *ids = op_from_host(a, TYPE_I32, 2, pne, c->prompt_tokens);
    struct tensor *prompt = op_get_rows(a, m->speech_emb, ids);                  /* [1, P, D] */
    return op_concat(a, cond_spkr, prompt, 1);
}

/* The part of prepare_input_embeds after the conditioning:
 * [text_emb(text); speech_emb(start)] -> [1, L + 1, D]. */
static struct tensor *text_and_start(struct arena *a, const struct t3_model *m, const int32_t *text,
                                     int64_t n_text)
{
    const int64_t one[2] = {1, 1};
    struct tensor *bos = op_get_rows(a, m->speech_emb, op_from_host(a, TYPE_I32, 2, one, &m->hp.start_speech));
    if (n_text == 0) return bos;
    const int64_t tne[2] = {1, n_text};
    return op_concat(a, op_get_rows(a, m->text_emb, op_from_host(a, TYPE_I32, 2, tne, text)), bos, 1);
}

struct tensor *t3_prepare_input_embeds(struct arena *a, const struct t3_model *m,
                                       const struct t3_cond *c, const int32_t *text,
                                       int64_t n_text)
{
    return op_concat(a, t3_prepare_conditioning(a, m, c), text_and_start(a, m, text, n_text), 1);
}

struct t3_gen_params t3_gen_default_params(void)
{
    /* the Turbo row's generate() defaults; max_gen_len excludes the first sample */
    const struct variant_sampling *d = &variant_get(MODEL_TURBO)->sampling;
    struct t3_gen_params p = {{d->temperature, d->top_k, d->top_p, d->min_p, d->repetition_penalty},
                              d->max_tokens - 1, 0, false, NULL};
    return p;
}

int64_t t3_filter_speech_tokens(int32_t *tokens, int64_t n)
{
    return variant_filter_speech(variant_get(MODEL_TURBO), tokens, n);
}

/* speech_head(hidden[:, -1]) -> host logits */
static cbx_status last_logits(struct arena *a, const struct t3_model *m, const struct tensor *h,
                              float *logits)
{
    struct tensor *last = op_slice(a, h, 1, h ? h->ne[1] - 1 : 0, 1);
    struct tensor *l = op_linear(a, last, m->speech_head_w, m->speech_head_b);
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

/* ---- voice prefix ---------------------------------------------------------- */

void t3_prefix_free(struct t3_prefix *p)
{
    if (!p) return;
    if (p->map) munmap(p->map, p->map_bytes);
    else free(p->kv);
    free(p->speaker_emb);
    free(p->prompt_tokens);
    free(p);
}

bool t3_prefix_matches(const struct t3_prefix *p, const struct t3_model *m, const struct t3_cond *c)
{
    return p && c && p->m == m && p->n_prompt == c->n_prompt &&
           !memcmp(p->speaker_emb, c->speaker_emb, sizeof(float) * (size_t)m->hp.speaker_embed_size) &&
           (c->n_prompt == 0 ||
            !memcmp(p->prompt_tokens, c->prompt_tokens, sizeof(int32_t) * (size_t)c->n_prompt));
}

/* The prompt must fit the context with at least the start-of-speech token
 * after it. */
static cbx_status check_prompt(const struct t3_model *m, int64_t n_prompt, char *err)
{
    if (n_prompt < 0 || 1 + n_prompt + 1 > m->tfmr.n_ctx)
        return err_setf(err, CBX_ERR_INVALID_ARG, "T3: a prompt of %lld tokens does not fit the %d-position context",
                        (long long)n_prompt, m->tfmr.n_ctx);
    return CBX_OK;
}

cbx_status t3_prefix_build(const struct t3_model *m, const struct backend *be,
                           const struct t3_cond *c, struct t3_prefix **out, char *err)
{
    *out = NULL;
    cbx_status rc = check_prompt(m, c->n_prompt, err);
    if (rc != CBX_OK) return rc;
    const int n = (int)(1 + c->n_prompt);
    const size_t kb = gpt2_kv_bytes(&m->tfmr, n), ns = (size_t)m->hp.speaker_embed_size;
    struct t3_prefix *p = calloc(1, sizeof *p);
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
    memcpy(p->speaker_emb, c->speaker_emb, sizeof(float) * ns);
    if (c->n_prompt > 0) memcpy(p->prompt_tokens, c->prompt_tokens, sizeof(int32_t) * (size_t)c->n_prompt);
    p->bytes = sizeof *p + kb + sizeof(float) * ns + sizeof(int32_t) * (size_t)c->n_prompt;
    struct gpt2_kv kv;
    if ((rc = gpt2_kv_init(&kv, &m->tfmr, cache, n)) != CBX_OK) {
        rc = err_setf(err, rc, "T3: %s", arena_errmsg(cache));
        goto done;
    }
    kv.scratch[0] = ar[WS_SCRATCH0];
    kv.scratch[1] = ar[WS_SCRATCH1];
    set_precision(m, ar);
    rc = gpt2_prefill_kv(a, &m->tfmr, &kv, t3_prepare_conditioning(a, m, c));
    if (rc == CBX_OK) rc = gpt2_kv_save(a, &m->tfmr, &kv, n, p->kv);
    if (rc != CBX_OK) err_setf(err, rc, "T3: voice prefix: %s", arena_errmsg(a));
done:
    free_arenas(ar);
    if (rc != CBX_OK) t3_prefix_free(p);
    else *out = p;
    return rc;
}

/* inference_turbo with the prefix from pfx (when not NULL) or computed from
 * c (one or two passes, p->one_pass). */
static cbx_status generate(const struct t3_model *m, const struct backend *be, const struct t3_cond *c,
                           const struct t3_prefix *pfx, const int32_t *text, int64_t n_text,
                           const struct t3_gen_params *p, t3_step_cb cb, void *user, int32_t **tokens,
                           int64_t *n_tokens, char *err)
{
    *tokens = NULL;
    *n_tokens = 0;
    if (pfx && pfx->m != m) return err_setf(err, CBX_ERR_INVALID_ARG, "T3: the voice prefix belongs to another model");
    if (pfx && pfx->kv_type != m->tfmr.kv_type)
        return err_setf(err, CBX_ERR_INVALID_ARG, "T3: the voice prefix holds %s values, the cache is %s",
                        dtype_name(pfx->kv_type), dtype_name(m->tfmr.kv_type));
    const int64_t n_prompt = pfx ? pfx->n_prompt : c->n_prompt;
    if (n_text < 0) return err_setf(err, CBX_ERR_INVALID_ARG, "T3: %lld text tokens", (long long)n_text);
    const int64_t V = m->hp.speech_vocab;
    int64_t L0 = 1 + n_prompt + n_text + 1;
    int cap = (int)(L0 + p->max_gen_len + 1);
    if (p->ws && p->ws->be != be) return err_setf(err, CBX_ERR_INVALID_ARG, "T3: the workspace belongs to another backend");
    /* the caller's workspace (reset, blocks kept) or arenas of this call */
    struct arena *own[WS_N] = {0}, *const *ar = own;
    bool have = true;
    if (p->ws) {
        ar = p->ws->a;
        for (int i = 0; i < WS_N; i++) arena_reset(ar[i]);
    } else {
        have = make_arenas(be, own);
    }
    struct arena *cache = ar[WS_CACHE], *a = ar[WS_STEP];
    float *logits = malloc(sizeof(float) * (size_t)V * 5);
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)V);
    uint8_t *seen = malloc((size_t)V);
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(p->max_gen_len + 2));
    int64_t n = 0;
    struct gpt2_kv kv;
    cbx_status rc = CBX_OK;
    if (!have || !logits || !idx || !seen || !out) {
        rc = err_setf(err, CBX_ERR_NOMEM, "T3: out of memory");
        goto cleanup;
    }
    if (L0 > m->tfmr.n_ctx) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "T3: prompt of %lld positions exceeds the %d-position context",
                      (long long)L0, m->tfmr.n_ctx);
        goto cleanup;
    }
    if (cap > m->tfmr.n_ctx) cap = m->tfmr.n_ctx;
    if ((rc = gpt2_kv_init(&kv, &m->tfmr, cache, cap)) != CBX_OK) {
        rc = err_setf(err, rc, "T3: %s", arena_errmsg(cache));
        goto cleanup;
    }
    kv.scratch[0] = ar[WS_SCRATCH0];
    kv.scratch[1] = ar[WS_SCRATCH1];
    set_precision(m, ar);
    float *probs = logits + V, *scratch = logits + 2 * V, *raw = logits + 4 * V;
    struct rng_stream rs;
    rng_stream_init(&rs, "t3.sample", p->seed);

    /* prefill over [cond; text; start-of-speech]: the voice prefix (restored,
     * or computed as t3_prefix_build does), then the rest */
    struct tensor *x;
    if (p->one_pass && !pfx) {
        x = t3_prepare_input_embeds(a, m, c, text, n_text);
    } else {
        if (pfx) rc = gpt2_kv_restore(a, &m->tfmr, &kv, pfx->n, pfx->kv);
        else rc = gpt2_prefill_kv(a, &m->tfmr, &kv, t3_prepare_conditioning(a, m, c));
        if (rc == CBX_OK) arena_reset(a);
        x = rc == CBX_OK ? text_and_start(a, m, text, n_text) : NULL;
    }
    if (rc == CBX_OK) rc = last_logits(a, m, gpt2_forward(a, &m->tfmr, &kv, x), logits);
    int32_t cur = 0;
    for (int step = 0; rc == CBX_OK; step++) {
        if (cb) memcpy(raw, logits, sizeof(float) * (size_t)V);
        /* processors in inference_turbo's order: temperature, top-k, top-p,
         * repetition penalty (history: [6561] at the first step, then the
         * generated tokens) */
        const struct sampler_params *s = &p->s;
        if (s->temperature > 0 && s->temperature != 1.0) sampler_temperature(logits, V, (float)s->temperature);
        if (s->top_k > 0) sampler_top_k(logits, V, s->top_k, scratch);
        if (s->top_p < 1.0) sampler_top_p(logits, V, s->top_p, scratch, idx);
        if (s->repetition_penalty != 1.0) {
            if (step == 0) sampler_repetition_penalty(logits, V, &m->hp.start_speech, 1, (float)s->repetition_penalty, seen);
            else sampler_repetition_penalty(logits, V, out, n, (float)s->repetition_penalty, seen);
        }
        if (step > 0 && sampler_all_neg_inf(logits, V)) break; /* upstream warns and stops */
        sampler_softmax(logits, probs, V);
        int64_t tok = rng_categorical(&rs, probs, V);
        if (tok < 0) break;
        cur = (int32_t)tok;
        out[n++] = cur;
        if (cb && cb(user, step, cur, raw, V)) { rc = CBX_ERR_CANCELLED; break; }
        /* the first sample is not checked for the stop token */
        if ((step > 0 && cur == m->hp.stop_speech) || step >= p->max_gen_len) break;
        if (kv.n_past >= cap) break;
        arena_reset(a);
        const int64_t one[2] = {1, 1};
        x = op_get_rows(a, m->speech_emb, op_from_host(a, TYPE_I32, 2, one, &cur));
        rc = last_logits(a, m, gpt2_forward(a, &m->tfmr, &kv, x), logits);
    }
    if (rc != CBX_OK && rc != CBX_ERR_CANCELLED) {
        const char *msg = arena_status(a) != CBX_OK ? arena_errmsg(a) : cbx_status_str(rc);
        rc = err_setf(err, rc, "T3: %s", msg);
    } else if (rc == CBX_ERR_CANCELLED) {
        err_setf(err, rc, "T3: cancelled");
    }
    if (rc == CBX_OK) {
        if (n > 0 && out[n - 1] == m->hp.stop_speech) n--;
        *tokens = out;
        *n_tokens = n;
        out = NULL;
    }
cleanup:
    free(out);
    free(seen);
    free(idx);
    free(logits);
    free_arenas(own);
    return rc;
}

cbx_status t3_inference_turbo(const struct t3_model *m, const struct backend *be,
                              const struct t3_cond *c, const int32_t *text, int64_t n_text,
                              const struct t3_gen_params *p, t3_step_cb cb, void *user,
                              int32_t **tokens, int64_t *n_tokens, char *err)
{
    return generate(m, be, c, NULL, text, n_text, p, cb, user, tokens, n_tokens, err);
}

cbx_status t3_inference_turbo_prefixed(const struct t3_model *m, const struct backend *be,
                                       const struct t3_prefix *pfx, const int32_t *text,
                                       int64_t n_text, const struct t3_gen_params *p,
                                       t3_step_cb cb, void *user, int32_t **tokens,
                                       int64_t *n_tokens, char *err)
{
    if (!pfx) {
        *tokens = NULL;
        *n_tokens = 0;
        return err_setf(err, CBX_ERR_INVALID_ARG, "T3: no voice prefix");
    }
    return generate(m, be, NULL, pfx, text, n_text, p, cb, user, tokens, n_tokens, err);
}
