/* backbone.h - the transformer inside T3, used through inputs_embeds
 * (spec/t3.md §2.4, §3): GPT-2 (Turbo, Nano; transformers GPT2Model) or
 * Llama (English, multilingual; transformers LlamaModel). One interface:
 * a forward over T new positions of B rows that appends to a kv_cache;
 * the layers are built from the shared cached attention of kv_cache.h and
 * each architecture's own norm/MLP (gpt2.c, llama.c).
 * Thread safety: a loaded backbone is read-only; a cache belongs to one
 * caller. */
#ifndef CBX_T3_BACKBONE_H
#define CBX_T3_BACKBONE_H

#include "core/ops.h"
#include "t3/gpt2.h"
#include "t3/kv_cache.h"
#include "t3/llama.h"

enum t3_arch { T3_ARCH_GPT2, T3_ARCH_LLAMA };

struct t3_backbone {
    enum t3_arch arch;
    int n_layer, n_head, n_kv_head, head_dim, d_model; /* n_kv_head: the
                          * cache's heads (GPT-2 and Llama_520M: n_head) */
    int n_ctx;           /* positions one sequence may hold (GPT-2: rows of
                          * wpe; Llama: no table, set by T3's position
                          * tables) */
    float eps;           /* norm epsilon, 1e-5 */
    enum dtype kv_type;  /* the cache type (kv_cache_type of the linear
                          * weights' type); may be changed before use */
    /* GPT-2: learned positions, pre-LN blocks, final ln_f (weight, bias) */
    const struct tensor *wpe;
    struct gpt2_layer *gpt2;   /* n_layer entries, owned */
    /* Llama: RoPE, RMSNorm blocks, final norm (weight only) */
    struct rope_params rope;
    struct llama_layer *llama; /* n_layer entries, owned */
    const struct tensor *norm_w, *norm_b;
};

/* A cache for this backbone (its layers, heads and kv_type). */
cbx_status t3_backbone_kv_init(const struct t3_backbone *bb, struct kv_cache *kv, int n_rows,
                               struct arena *cache, int capacity);
/* Bytes of one row's n cached positions (kv_cache_save). */
size_t t3_backbone_kv_bytes(const struct t3_backbone *bb, int n);

/* Forward T new positions of the cache's B rows: x[B, T, D] input
 * embeddings (GPT-2: without wpe, added here); appends to kv and advances
 * kv->n_past. On a group of caches (kv_cache_group, T = 1): every
 * member's rows at that member's own position, each member advanced. Returns the final-norm output [B, T, D] (arena-owned) or
 * NULL (see arena_status). */
struct tensor *t3_backbone_forward(struct arena *a, const struct t3_backbone *bb, struct kv_cache *kv,
                                   const struct tensor *x);
/* The same for the cache alone: the last layer stops after writing its
 * keys and values (nothing after feeds a cache). Returns arena_status(a). */
cbx_status t3_backbone_prefill_kv(struct arena *a, const struct t3_backbone *bb, struct kv_cache *kv,
                                  const struct tensor *x);

/* The linear weights of a decode step in call order, as slots a loader may
 * repoint (packing, conversion): *slots gets up to max entries; returns
 * the count (4 per GPT-2 block, 7 per Llama block). */
int t3_backbone_linears(struct t3_backbone *bb, const struct tensor ***slots, int max);

void t3_backbone_free(struct t3_backbone *bb); /* the layer arrays; no-op on zeroed */

#endif
