/* t3.h - T3: text tokens + conditioning -> speech tokens (chatterbox
 * models/t3/t3.py, modules/cond_enc.py). One model, two backbones
 * (backbone.h): GPT-2 for Turbo and Nano (inference_turbo: one row,
 * processors temperature -> top-k -> top-p -> repetition penalty) and Llama
 * for English and multilingual (inference: a CFG pair of rows decoded as
 * one batch, CFG combine -> repetition penalty -> temperature -> min-p ->
 * top-p). The architecture is decided by the weights' tensor names; the
 * sampling policy follows it (t3_policy). spec/t3.md.
 * Thread safety: a loaded t3_model is read-only and may serve any number of
 * concurrent calls, each with its own arenas. */
#ifndef CBX_T3_T3_H
#define CBX_T3_T3_H

#include <stdbool.h>
#include <stdint.h>

#include "core/ops.h"
#include "core/weights.h"
#include "io/weights.h"
#include "t3/backbone.h"
#include "t3/perceiver.h"
#include "t3/sampler.h"

struct t3_hparams {
    int64_t text_vocab, speech_vocab;   /* rows of text_emb / speech_emb */
    int32_t start_speech, stop_speech;  /* 6561, 6562 */
    int32_t start_text, stop_text;      /* Llama: 255, 0 (added around the
                                         * tokenizer's ids by the caller,
                                         * as generate() does); GPT-2: -1 */
    int64_t speaker_embed_size;         /* 256 */
};

/* How a T3 samples and stops (spec/t3.md §7-§9), decided by the backbone. */
enum t3_order {
    T3_ORDER_TURBO, /* temperature, top-k, top-p, repetition penalty (history:
                     * [start] at the first step, then the generated ids);
                     * the first sample is not checked for the stop token;
                     * a trailing stop token is removed */
    T3_ORDER_CFG,   /* CFG combine, [the alignment guard, when asked:
                     * t3/alignment.h], repetition penalty (history: start +
                     * generated), temperature, min-p, top-p; the stop token
                     * is checked at every step and kept */
};

struct t3_model {
    struct t3_hparams hp;
    enum t3_order order;
    const struct tensor *text_emb, *speech_emb;       /* [V, D] */
    const struct tensor *speech_head_w, *speech_head_b; /* bias: GPT-2 only */
    const struct tensor *spkr_enc_w, *spkr_enc_b;     /* cond_enc.spkr_enc */
    /* Llama T3 only (NULL otherwise): learned position tables,
     * cond_enc.emotion_adv_fc [D, 1] and the Perceiver */
    const struct tensor *text_pos_emb, *speech_pos_emb, *emotion_adv_fc_w;
    struct perceiver perceiver;
    struct t3_backbone tfmr;
    struct weight_set *ws; /* every weight, placed on the load's backend */
    bool bf16;        /* BF16 products (arena_set_bf16) for the linears of
                       * prefills (64 rows or more: the voice prefix, long
                       * texts); set at load for quantised weights, whose
                       * own error is larger (decode steps are one row and
                       * keep the quantised dot products); may be changed
                       * before the model is used */
};

/* T3Cond as inference uses it. */
struct t3_cond {
    const float *speaker_emb;               /* [speaker_embed_size] */
    const int32_t *prompt_tokens;           /* cond_prompt_speech_tokens */
    int64_t n_prompt;
    float emotion_adv;                      /* exaggeration (Llama T3 only) */
};

/* Load a T3 from a weight source: GPT-2 (t3_turbo_v1 / t3_nano_v1
 * layout, tfmr.h.*) or Llama (t3_cfg / t3_mtl23ls_*, tfmr.layers.*), sizes
 * from the tensors. The linear weights of the backbone and the speech head
 * are held as wtype (F32, F16, BF16 or a block type; quantisation policy:
 * tables, norms, biases and the conditioning encoder stay as stored). The
 * Weights stored quantised (a converted GGUF) are used as stored, and so
 * are all of a GGUF's GPT-2 Conv1D weights stored [out, in]. The
 * KV cache type follows (tfmr.kv_type, kv_cache_type): Q8_0 with quantised
 * weights, F32 otherwise; a caller may set it (F16 too) before the model
 * is used. Every weight is placed on backend be (core/weights.h: the
 * decode linears flagged WEIGHT_DECODE), which must outlive the model and
 * is the backend the model's ops run on. On failure the model is left
 * empty and err names the missing or odd tensor. */
cbx_status t3_load(struct t3_model *m, const struct weights *w, const struct backend *be, enum dtype wtype,
                   char *err);
void t3_free(struct t3_model *m); /* no-op on a zeroed model */

/* Positions the conditioning takes: GPT-2 1 + n_prompt; Llama 1 + 32 + 1. */
int t3_cond_len(const struct t3_model *m, int64_t n_prompt);
/* Whether the model reads t3_cond.emotion_adv (exaggeration). */
bool t3_has_emotion(const struct t3_model *m);
/* Every tensor the conditioning's keys and values depend on (what a voice
 * prefix is a function of, besides the voice): up to max into ts; returns
 * the count. */
#define T3_MAX_COND_TENSORS 4096
int t3_cond_tensors(const struct t3_model *m, const struct tensor **ts, int max);

/* T3.prepare_conditioning: [spkr_enc(speaker_emb); prompt; emotion]
 * -> [1, C, D] (C = t3_cond_len): GPT-2 prompt = speech_emb(tokens);
 * Llama prompt = Perceiver(speech_emb(tokens) + speech_pos_emb) and the
 * emotion token emotion_adv_fc(exaggeration). */
struct tensor *t3_prepare_conditioning(struct arena *a, const struct t3_model *m,
                                       const struct t3_cond *c);
/* T3.prepare_input_embeds for n_rows rows (1; or 2 = [cond, uncond] for
 * CFG: the unconditional row has its text embeddings zeroed, positions
 * kept): [cond; text; speech_emb(start)] (+ learned position embeddings
 * on Llama) -> [n_rows, C + L + 1, D]. text: the ids as T3 takes them
 * (Llama: with the start/stop text tokens). */
struct tensor *t3_prepare_input_embeds(struct arena *a, const struct t3_model *m,
                                       const struct t3_cond *c, const int32_t *text,
                                       int64_t n_text, int n_rows);

/* Memory kept from one call to the next: the arenas of the KV cache, the
 * per-layer scratch and the per-step values keep their blocks, so calls
 * after the first fault in no new pages (a ~410-position prefill touches
 * hundreds of MB). Belongs to one caller at a time; tied to the backend it
 * was made for. With a pool (core/arena.h, invariant 5), a sequence's end
 * (t3_seq_free) hands the blocks to the pool instead, for the next stage
 * of the caller (S3Gen) and the next sequence to take. */
struct arena_pool;
struct t3_workspace;
struct t3_workspace *t3_workspace_create(const struct backend *be); /* NULL: no memory */
void t3_workspace_free(struct t3_workspace *w);                      /* no-op on NULL */
void t3_workspace_set_pool(struct t3_workspace *w, struct arena_pool *p);

struct t3_gen_params {
    struct sampler_params s;  /* GPT-2: 0.8, top_k 1000, top_p 0.95, 0, 1.2;
                               * Llama: 0.8, top_k 0, top_p 1.0, min_p 0.05,
                               * 1.2 (top_k unused). top_k 1 is greedy on
                               * both (argmax after the repetition
                               * penalty) */
    int max_gen_len;          /* GPT-2: inference_turbo max_gen_len (1000:
                               * up to 1001 samples); Llama: max_new_tokens
                               * (1000 samples) */
    double cfg_weight;        /* Llama: 0.5; 0 decodes the conditional row
                               * alone (l = cond exactly, as upstream's
                               * formula gives); ignored by GPT-2 */
    uint64_t seed;            /* seeds the "t3.sample" stream */
    bool one_pass;            /* false: prefill the voice prefix, then the
                               * text (see t3_prefix below); true: the whole
                               * [cond; text; start] in one forward, as
                               * upstream does (a reference for tests) */
    struct t3_workspace *ws;  /* arenas to reuse, or NULL: made and freed
                               * by the call */
    bool alignment_guard;     /* Llama only: the alignment guard
                               * (t3/alignment.h) between the CFG combine
                               * and the repetition penalty; false (the
                               * default) reads no attention at all. A
                               * GPT-2 T3, or a Llama without layer 13 /
                               * head 15, refuses it (t3_seq_start) */
    bool host_logits;         /* every step's logits to the host (the
                               * callback sees them); false (the default):
                               * on a backend that samples on the device
                               * (op_sample) a recorded step draws there,
                               * only the id comes back, and the callback
                               * gets logits NULL for those steps */
};
/* Upstream's defaults for m's backbone (spec/overview.md §4). */
struct t3_gen_params t3_gen_default_params(const struct t3_model *m);

/* Called after each sampled token (progress, tests); nonzero return
 * cancels. logits: the raw speech-head rows the token was sampled from
 * (n_rows x V floats: [cond, uncond] for CFG; borrowed for the call), or
 * NULL when it was drawn on the device (t3_gen_params.host_logits). */
typedef int (*t3_step_cb)(void *user, int step, int32_t token, const float *logits, int n_rows,
                          int64_t V);

/* T3.inference_turbo (GPT-2) or T3.inference (Llama, CFG): prefill +
 * KV-cache decode with the processors in upstream order (t3_order).
 * *tokens (owned by the caller, free()) receives the generated ids as
 * upstream returns them (GPT-2: a trailing stop token removed; Llama: the
 * stop token kept). `be` runs the model; weights must be addressable by
 * it. */
cbx_status t3_inference(const struct t3_model *m, const struct backend *be, const struct t3_cond *c,
                        const int32_t *text, int64_t n_text, const struct t3_gen_params *p,
                        t3_step_cb cb, void *user, int32_t **tokens, int64_t *n_tokens, char *err);

/* ---- sequences -------------------------------------------------------------
 * t3_inference as a prefill and then one call per token, for callers that
 * interleave generation with other work (a scheduler, a streaming
 * pipeline): t3_seq_start checks the input, allocates the KV cache (1 row,
 * or the [cond, uncond] pair of a CFG model, batched in every forward) and
 * runs the prefill (from pfx when given, else from c); each t3_seq_step
 * draws one token from the current logits (processors in the model's
 * order, the "t3.sample" stream of p->seed) and, unless the sequence ends
 * there (stop token, token cap, context full, every logit -inf), runs the
 * next forward step: no host round trip but the sampled id. The token
 * sequence is exactly t3_inference's (it is this loop).
 * Thread safety: a sequence belongs to one thread at a time. */
struct t3_seq;
struct t3_prefix;
cbx_status t3_seq_start(const struct t3_model *m, const struct backend *be, const struct t3_cond *c,
                        const struct t3_prefix *pfx, const int32_t *text, int64_t n_text,
                        const struct t3_gen_params *p, t3_step_cb cb, void *user, struct t3_seq **out,
                        char *err);
/* One token into *token (-1 when the sequence had ended or ends without
 * one). Errors: CBX_ERR_CANCELLED from cb, a failed forward step. */
cbx_status t3_seq_step(struct t3_seq *s, int32_t *token, char *err);
bool t3_seq_done(const struct t3_seq *s);
/* Steps that replayed a recorded decode step (a backend with graphs,
 * backend.h: every step after the second, unless recording failed or the
 * alignment guard is on). The logits are those of the ordinary step, bit
 * for bit. */
int t3_seq_replays(const struct t3_seq *s);
/* Rows the sequence takes in a forward (1, or 2 for a CFG pair). */
int t3_seq_rows(const struct t3_seq *s);
/* The backend it was started on (its cache's). */
const struct backend *t3_seq_backend(const struct t3_seq *s);
/* The tokens so far as t3_inference returns them; *tokens owned by the
 * caller (free()). */
cbx_status t3_seq_tokens(const struct t3_seq *s, int32_t **tokens, int64_t *n_tokens, char *err);
void t3_seq_free(struct t3_seq *s); /* no-op on NULL */

/* ---- batched decode ---------------------------------------------------------
 * Independent sequences (each started with t3_seq_start, its own prefill,
 * KV cache and sampling state) decoded together: t3_batch_step is
 * t3_seq_step on each sequence given, except that the forwards of the
 * sequences that go on run as ONE forward over all their rows (1 per
 * sequence, 2 per CFG pair): the linear products take every row at once
 * (the weights read once per step, not once per sequence), the attention
 * of each sequence runs over its own cache and length (kv_cache.h,
 * invariant 4). Sequences join (after their own prefill) and leave (done,
 * cancelled, or simply not passed) at any step: the set given may change
 * from one call to the next. The batch's products are row-exact
 * (arena_set_row_exact), so every sequence's tokens are bit-identical to
 * those it gives decoded alone (tests/t3/test_batch.c).
 * Thread safety: a batch and the sequences of a call belong to one thread
 * at a time; the sequences' step callbacks may run on the batch's pool
 * threads (each sequence's on one thread at a time, in step order). */
struct t3_batch;
/* Memory for batched steps on be: the backend of every sequence stepped
 * or, for host backends, any host backend (their caches are host memory;
 * the forwards run on be's pool). NULL: out of memory. */
struct t3_batch *t3_batch_create(const struct backend *be);
void t3_batch_free(struct t3_batch *b); /* no-op on NULL */
/* Row-exact products (the default: true). false lets the batched linears
 * take the multi-row kernels (CPU: the quantised GEMM from 5 rows of
 * Q4_0/Q8_0 weights, sgemm above 16 rows of F32/F16 ones), whose float
 * summation order differs from the one-row dot products: faster at many
 * rows, but tokens are then no longer bit-identical to solo decoding
 * (bench_batch measures both). */
void t3_batch_set_row_exact(struct t3_batch *b, bool on);
/* One step of the n sequences s[] (one model, the batch's backend):
 * token[i] and rc[i] are what t3_seq_step(s[i]) would give (rc[i]:
 * CBX_ERR_CANCELLED from its callback, the sequence then done). Returns a
 * failure of the batched forward (every sequence in it is then done). */
cbx_status t3_batch_step(struct t3_batch *b, struct t3_seq *const *s, int n, int32_t *token, cbx_status *rc,
                         char *err);
/* Where the batch's steps went (seconds, summed since t3_batch_create):
 * the draws (on the host, from BATCH_DRAW_MIN sequences on in parallel
 * over a pool: be's, or on a device the process-wide pool of every core,
 * tp_shared), issuing the forward (on the host; on a device the kernels
 * queue meanwhile), waiting for its logits; steps and rows carried. */
#define BATCH_DRAW_MIN 4
struct t3_batch_stats {
    double draw, issue, wait;
    int64_t steps, rows;
};
void t3_batch_get_stats(const struct t3_batch *b, struct t3_batch_stats *st);

/* ---- voice prefix --------------------------------------------------------
 * In T3's input (spec/t3.md §6) the conditioning takes the first C
 * positions (GPT-2: speaker + P prompt embeddings; Llama: speaker, 32
 * Perceiver outputs, emotion) and the text comes after it. Both backbones
 * are causal with absolute positions, so the keys and values of those C
 * positions depend on the voice (and exaggeration) alone:
 * a t3_prefix holds them (host memory, in the cache's type, as
 * kv_cache_save lays them out)
 * with a copy of the conditioning they were made from, and every utterance
 * in that voice starts its prefill after them (the prompt is 376 of the
 * ~410 positions of a sentence's prefill with Turbo's 375-token prompt).
 * t3_inference prefills in the same two passes (prefix, then text +
 * start-of-speech), so a run with a prebuilt prefix is bit-identical to one
 * without; a CFG pair restores the prefix into both rows. Size: 2 * n_layer * (1 + P) * D values of the cache type
 * (Turbo, P = 375: 74 MB with an F32 cache, 19.6 MB with Q8_0).
 * A prefix is read-only once built, its unconditional tail (unc) apart,
 * which only grows, under its own lock: any number of concurrent calls may
 * share it. */
struct t3_prefix {
    const struct t3_model *m;  /* the model it was computed with */
    int n;                     /* positions: t3_cond_len */
    void *kv;                  /* t3_backbone_kv_bytes(&m->tfmr, n) bytes of
                                * one row, read only */
    enum dtype kv_type;        /* their type: m->tfmr.kv_type when built */
    void *map;                 /* NULL: kv is malloc'ed; else kv lies in this
                                * read-only file mapping of map_bytes
                                * (prefix_store_load), unmapped by
                                * t3_prefix_free */
    size_t map_bytes;
    void *dev_kv;              /* NULL, or kv in the memory of dev_be, the
                                * model's weight backend (t3_prefix_place):
                                * restored there without a transfer */
    const struct backend *dev_be;
    float *speaker_emb;        /* copies of the conditioning */
    int32_t *prompt_tokens;
    int64_t n_prompt;
    float emotion_adv;
    size_t bytes;              /* memory held (without unc's blocks) */
    struct t3_unc *unc;        /* CFG models: the unconditional row's keys
                                * and values over the text positions, as
                                * far as computed (t3.c, "The
                                * unconditional tail"): append-only, with
                                * its own lock, so sharing p stays safe;
                                * NULL for other models */
};

/* A prefix for model m with nothing in it but m and, for CFG models, an
 * empty unconditional tail (constructors of t3_prefix use it); NULL: out
 * of memory. */
struct t3_prefix *t3_prefix_new(const struct t3_model *m);
/* Text positions of the unconditional tail p keeps so far (0: none, or
 * not a CFG model). */
int t3_prefix_unc_len(const struct t3_prefix *p);
/* A copy of the first n_pos positions of p's tail (blocks in order, each
 * laid out as kv_cache_save does): its size (0 when n_pos is not a whole
 * number of blocks a prefix keeps), taking it out (n_pos at most what p
 * keeps), and putting it into a prefix that keeps none yet (a loader's;
 * p must not be shared yet). */
size_t t3_prefix_unc_bytes(const struct t3_prefix *p, int n_pos);
/* Compute and keep p's unconditional tail over the first n_text text
 * positions now (at most what a prefix keeps), so that a call on p with a
 * text that long finds it (the same bits as a call computing it itself);
 * on backend be, which must be a host backend (else a no-op, as a
 * device's prefill does not use the tail); a no-op for GPT-2 models or
 * when p keeps that much. p may be shared meanwhile. */
cbx_status t3_prefix_extend(const struct t3_prefix *p, const struct backend *be, int64_t n_text, char *err);
cbx_status t3_prefix_unc_get(const struct t3_prefix *p, int n_pos, void *dst, char *err);
cbx_status t3_prefix_unc_put(struct t3_prefix *p, int n_pos, const void *src, char *err);

/* A copy of p's keys and values in the memory of the device its model's
 * weights are on (which outlives p), so every sequence on that device
 * restores them without a host transfer; a no-op for host backends or
 * when p has one. Call before p is shared: it writes p. t3_prefix_build
 * does it. */
cbx_status t3_prefix_place(struct t3_prefix *p, char *err);
/* The prefix of conditioning c. *out owned by the caller, t3_prefix_free. */
cbx_status t3_prefix_build(const struct t3_model *m, const struct backend *be,
                           const struct t3_cond *c, struct t3_prefix **out, char *err);
void t3_prefix_free(struct t3_prefix *p); /* no-op on NULL */
/* True when p was built with model m from conditioning equal to c. */
bool t3_prefix_matches(const struct t3_prefix *p, const struct t3_model *m,
                       const struct t3_cond *c);

/* t3_inference for the conditioning pfx was built from, its prefill
 * starting after the prefix (p->one_pass is ignored). */
cbx_status t3_inference_prefixed(const struct t3_model *m, const struct backend *be,
                                 const struct t3_prefix *pfx, const int32_t *text, int64_t n_text,
                                 const struct t3_gen_params *p, t3_step_cb cb, void *user,
                                 int32_t **tokens, int64_t *n_tokens, char *err);

/* The distribution a step draws its token from: raw logits rows [n_rows][V]
 * (V = hp.speech_vocab; CFG models: [cond, uncond], or one row), the CFG
 * combine with p->cfg_weight, the processors of m's order with p->s and
 * the repetition history hist[n_hist], then the softmax into probs[V]
 * (top_k 1: of the logits after the repetition penalty). For tests that
 * recompute a step from its logits. */
cbx_status t3_step_probs(const struct t3_model *m, const struct t3_gen_params *p, const float *raw, int n_rows,
                         const int32_t *hist, int64_t n_hist, float *probs, char *err);
/* op_sample's parameters for a draw of m with p (what a sequence on a
 * device backend records). */
struct sample_params t3_sample_params(const struct t3_model *m, const struct t3_gen_params *p);
/* The same step's draw on the host, as t3_seq_step makes it (without the
 * alignment guard): the token into *token (-1: every logit -inf), rs
 * advanced by a categorical draw. Only m->order and m->hp.speech_vocab
 * are read. For tests of the device's draw (op_sample). */
cbx_status t3_step_draw(const struct t3_model *m, const struct t3_gen_params *p, const float *raw, int n_rows,
                        const int32_t *hist, int64_t n_hist, struct rng_stream *rs, int32_t *token, char *err);

#endif
