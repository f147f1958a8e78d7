/* t3.h - T3: text tokens + conditioning -> speech tokens (chatterbox
 * models/t3/t3.py). This file holds the GPT-2 variant used by Turbo and
 * Nano (inference_turbo); the Llama variant arrives with the English and
 * multilingual models and shares the conditioning and sampling code.
 * Thread safety: a loaded t3_model is read-only and may serve any number of
 * concurrent calls, each with its own arenas. */
#ifndef CBX_T3_T3_H
#define CBX_T3_T3_H

#include <stdbool.h>
#include <stdint.h>

#include "core/ops.h"
#include "io/weights.h"
#include "t3/gpt2.h"
#include "t3/sampler.h"

struct t3_hparams {
    int64_t text_vocab, speech_vocab;   /* rows of text_emb / speech_emb */
    int32_t start_speech, stop_speech;  /* 6561, 6562 */
    int64_t speaker_embed_size;         /* 256 */
};

struct t3_model {
    struct t3_hparams hp;
    const struct tensor *text_emb, *speech_emb;       /* [V, D] */
    const struct tensor *speech_head_w, *speech_head_b;
    const struct tensor *spkr_enc_w, *spkr_enc_b;     /* cond_enc.spkr_enc */
    struct gpt2 tfmr;
    void *owned;      /* transposed Conv1D weights and descriptors */
    void *packed;     /* packed copies of weights used in place (t3_load_gpt2) */
    bool bf16;        /* BF16 products (arena_set_bf16) for the linears of
                       * prefills (64 rows or more: the voice prefix, long
                       * texts); set at load for quantised weights, whose
                       * own error is larger (decode steps are one row and
                       * keep the quantised dot products); may be changed
                       * before the model is used */
};

/* The conditioning of T3Cond used by the GPT-2 variant. */
struct t3_cond {
    const float *speaker_emb;               /* [speaker_embed_size] */
    const int32_t *prompt_tokens;           /* cond_prompt_speech_tokens */
    int64_t n_prompt;
};

/* Load a GPT-2 T3 (t3_turbo_v1 / t3_nano_v1 layout) from a weight source.
 * The linear weights (Conv1D blocks, speech head) are held as wtype (F32,
 * F16, BF16 or a block type; quantisation policy: tables, norms and biases
 * stay as stored). The KV cache type follows (tfmr.kv_type, gpt2_kv_type):
 * Q8_0 with quantised weights, F32 otherwise; a caller may set it (F16
 * too) before the model is used. On failure the model is left empty and
 * err names the missing/odd tensor. */
cbx_status t3_load_gpt2(struct t3_model *m, const struct weights *w, enum dtype wtype, char *err);
void t3_free(struct t3_model *m); /* no-op on a zeroed model */

/* T3.prepare_conditioning: [spkr_enc(speaker_emb); speech_emb(prompt)]
 * -> [1, 1 + P, D]. */
struct tensor *t3_prepare_conditioning(struct arena *a, const struct t3_model *m,
                                       const struct t3_cond *c);
/* T3.prepare_input_embeds: [cond; text_emb(text); speech_emb(start)]
 * -> [1, 1 + P + L + 1, D]. */
struct tensor *t3_prepare_input_embeds(struct arena *a, const struct t3_model *m,
                                       const struct t3_cond *c, const int32_t *text,
                                       int64_t n_text);

/* Memory kept from one call to the next: the arenas of the KV cache, the
 * per-layer scratch and the per-step values keep their blocks, so calls
 * after the first fault in no new pages (a ~410-position prefill touches
 * hundreds of MB). Belongs to one caller at a time; tied to the backend it
 * was made for. */
struct t3_workspace;
struct t3_workspace *t3_workspace_create(const struct backend *be); /* NULL: no memory */
void t3_workspace_free(struct t3_workspace *w);                      /* no-op on NULL */

struct t3_gen_params {
    struct sampler_params s;  /* upstream defaults: 0.8, 1000, 0.95, 0, 1.2 */
    int max_gen_len;          /* inference_turbo max_gen_len (1000) */
    uint64_t seed;            /* seeds the "t3.sample" stream */
    bool one_pass;            /* false: prefill the voice prefix, then the
                               * text (see t3_prefix below); true: the whole
                               * [cond; text; start] in one forward, as
                               * upstream does (a reference for tests) */
    struct t3_workspace *ws;  /* arenas to reuse, or NULL: made and freed
                               * by the call */
};
struct t3_gen_params t3_gen_default_params(void);

/* Called after each sampled token (progress, tests); nonzero return
 * cancels. logits: the raw speech-head row the token was sampled from
 * (V floats, borrowed for the call). */
typedef int (*t3_step_cb)(void *user, int step, int32_t token, const float *logits,
                          int64_t V);

/* T3.inference_turbo: prefill + KV-cache decode with the processors in
 * upstream order. *tokens (owned by the caller, free()) receives the
 * generated ids with a trailing stop token removed, as upstream returns
 * them. `be` runs the model; weights must be addressable by it. */
cbx_status t3_inference_turbo(const struct t3_model *m, const struct backend *be,
                              const struct t3_cond *c, const int32_t *text, int64_t n_text,
                              const struct t3_gen_params *p, t3_step_cb cb, void *user,
                              int32_t **tokens, int64_t *n_tokens, char *err);

/* ---- voice prefix --------------------------------------------------------
 * In inference_turbo's input (spec/t3.md §6.2) the conditioning
 * [spkr_enc(speaker_emb); speech_emb(prompt)] takes positions 0..P and the
 * text comes after it. GPT-2 is causal with learned absolute positions, so
 * the keys and values of those 1 + P positions depend on the voice alone:
 * a t3_prefix holds them (host memory, in the cache's type, as
 * gpt2_kv_save lays them out)
 * with a copy of the conditioning they were made from, and every utterance
 * in that voice starts its prefill after them (the prompt is 376 of the
 * ~410 positions of a sentence's prefill with Turbo's 375-token prompt).
 * t3_inference_turbo prefills in the same two passes (prefix, then text +
 * start-of-speech), so a run with a prebuilt prefix is bit-identical to one
 * without. Size: 2 * n_layer * (1 + P) * D values of the cache type
 * (Turbo, P = 375: 74 MB with an F32 cache, 19.6 MB with Q8_0).
 * A prefix is read-only once built: any number of concurrent calls may
 * share it. */
struct t3_prefix {
    const struct t3_model *m;  /* the model it was computed with */
    int n;                     /* positions: 1 + n_prompt */
    void *kv;                  /* gpt2_kv_bytes(&m->tfmr, n) bytes, read only */
    enum dtype kv_type;        /* their type: m->tfmr.kv_type when built */
    void *map;                 /* NULL: kv is malloc'ed; else kv lies in this
                                * read-only file mapping of map_bytes
                                * (prefix_store_load), unmapped by
                                * t3_prefix_free */
    size_t map_bytes;
    float *speaker_emb;        /* copies of the conditioning */
    int32_t *prompt_tokens;
    int64_t n_prompt;
    size_t bytes;              /* memory held */
};

/* The prefix of conditioning c. *out owned by the caller, t3_prefix_free. */
cbx_status t3_prefix_build(const struct t3_model *m, const struct backend *be,
                           const struct t3_cond *c, struct t3_prefix **out, char *err);
void t3_prefix_free(struct t3_prefix *p); /* no-op on NULL */
/* True when p was built with model m from conditioning equal to c. */
bool t3_prefix_matches(const struct t3_prefix *p, const struct t3_model *m,
                       const struct t3_cond *c);

/* t3_inference_turbo for the conditioning pfx was built from, its prefill
 * starting after the prefix (p->one_pass is ignored). */
cbx_status t3_inference_turbo_prefixed(const struct t3_model *m, const struct backend *be,
                                       const struct t3_prefix *pfx, const int32_t *text,
                                       int64_t n_text, const struct t3_gen_params *p,
                                       t3_step_cb cb, void *user, int32_t **tokens,
                                       int64_t *n_tokens, char *err);

/* tts_turbo.py: keep only ids < 6561 (drops stop/start and out-of-range). */
int64_t t3_filter_speech_tokens(int32_t *tokens, int64_t n);

#endif
