/* gpt2.h - GPT-2 backbone of the Turbo/Nano T3 (transformers GPT2Model used
 * through inputs_embeds): learned positions wpe, pre-LN blocks, ln_f.
 * Sizes come from the weights (n_layer from the tensor names, d_model from
 * wpe, n_head from d_model / 64 as every GPT-2 config here uses head dim 64).
 * Thread safety: weights are read-only; a kv cache belongs to one caller. */
#ifndef CBX_T3_GPT2_H
#define CBX_T3_GPT2_H

#include "core/ops.h"

struct gpt2_layer {
    /* names under tfmr.h.{i}. ; Conv1D weights are stored [in, out]
     * upstream and held here as [out, in] (transposed at load) */
    const struct tensor *ln_1_w, *ln_1_b;
    const struct tensor *c_attn_w, *c_attn_b;  /* [3D, D] */
    const struct tensor *c_proj_w, *c_proj_b;  /* [D, D]  */
    const struct tensor *ln_2_w, *ln_2_b;
    const struct tensor *c_fc_w, *c_fc_b;      /* [4D, D] */
    const struct tensor *mlp_proj_w, *mlp_proj_b; /* [D, 4D] */
};

struct gpt2 {
    int n_layer, n_head, d_model, n_ctx; /* n_ctx = rows of wpe */
    float eps;                           /* layer_norm_epsilon, 1e-5 */
    enum dtype kv_type;                  /* KV cache: F32, F16 (halves the
                                          * cache bytes a decode step reads)
                                          * or Q8_0 (34 bytes per 32 values:
                                          * 47% fewer than F16; head dim a
                                          * multiple of 32); see gpt2_kv_type */
    const struct tensor *wpe;            /* [n_ctx, D] */
    const struct tensor *ln_f_w, *ln_f_b;
    struct gpt2_layer *h;                /* n_layer entries, owned */
};

/* Per-layer key/value cache, [1, H, capacity, Dh] each.
 * scratch: two arenas of the same backend, owned by the caller, or NULL
 * (gpt2_kv_init leaves them NULL). When set, gpt2_forward computes each
 * layer in one of them in turn, resetting it first (layer i reads the
 * residual stream of layer i - 1 from the other), so a prefill touches two
 * layers' worth of memory rather than every intermediate of every layer;
 * only the result is allocated in the caller's arena. Arenas that outlive
 * the call keep their blocks, so later calls fault no new pages. */
struct gpt2_kv {
    int capacity, n_past;
    struct tensor **k, **v; /* n_layer entries, arena-owned */
    struct arena *scratch[2];
};

/* The cache type for linear weights of type w: Q8_0 when they are
 * quantised (the cache would otherwise cost a decode step about a third of
 * the weights' bandwidth at 400-650 positions; measured with Q4_0 weights:
 * 5-6% less CPU time per step than an F16 cache at context 409-659, and
 * logits as close to an F32 cache's as the F16 cache's, under a tenth
 * of the Q4_0 weights' own error; bench_t3 t3_decode_long, parity_turbo_t3_kvq8),
 * F32 otherwise (so float models match upstream bit for bit). F16 stays
 * available through gpt2.kv_type. GPT-2 head dims here are 64, whole Q8_0
 * blocks. */
enum dtype gpt2_kv_type(enum dtype w);

/* Allocate a cache (g->kv_type) for up to capacity positions in arena
 * `cache`. */
cbx_status gpt2_kv_init(struct gpt2_kv *kv, const struct gpt2 *g, struct arena *cache,
                        int capacity);

/* Forward T new positions: x[1, T, D] input embeddings (without wpe);
 * appends to kv and advances kv->n_past. Returns the ln_f output
 * [1, T, D] (arena-owned) or NULL (see arena_status). */
struct tensor *gpt2_forward(struct arena *a, const struct gpt2 *g, struct gpt2_kv *kv,
                            const struct tensor *x);

/* gpt2_forward for the cache alone: appends the keys and values of x's T
 * positions and advances kv->n_past, but the last layer stops after its
 * c_attn (its attention, MLP and ln_f feed nothing a cache holds). The
 * cached values are those gpt2_forward writes. Returns arena_status(a). */
cbx_status gpt2_prefill_kv(struct arena *a, const struct gpt2 *g, struct gpt2_kv *kv,
                           const struct tensor *x);

/* Host copies of cache positions [0, n), byte for byte in the cache's own
 * type (g->kv_type): per layer the keys, then the values, each head's n
 * rows of Dh values in turn ([H, n, Dh]; with Dh a multiple of 32 a Q8_0
 * row is whole blocks, so the bytes are also quantize_row of the values
 * laid out so); gpt2_kv_bytes(g, n) bytes in all. Restoring them gives
 * back the cache exactly, so a restored cache decodes as the original
 * (parity_turbo_t3_kvq8). A failure is recorded in arena a. */
size_t gpt2_kv_bytes(const struct gpt2 *g, int n);
cbx_status gpt2_kv_save(struct arena *a, const struct gpt2 *g, const struct gpt2_kv *kv, int n,
                        void *dst);
/* The reverse: positions [0, n) from src (as gpt2_kv_save wrote them);
 * kv->n_past becomes n. Needs n <= kv->capacity. */
cbx_status gpt2_kv_restore(struct arena *a, const struct gpt2 *g, struct gpt2_kv *kv, int n,
                           const void *src);

#endif
