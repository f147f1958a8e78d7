/* kv_cache.h - the key/value cache of a T3 backbone (GPT-2 or Llama) for a
 * batch of B rows that advance together (one sequence: B = 1; a CFG pair:
 * the conditional and the unconditional row, B = 2), and the attention
 * step both backbones share.
 *
 * Invariants:
 *  1. k[il], v[il] are [B, H, capacity, Dh] of `type`; positions
 *     [0, n_past) of every row hold the keys/values written so far.
 *  2. Every row has the same length: a forward appends T positions to all
 *     B rows at once (rows differ in content only, e.g. the CFG row's
 *     zeroed text embeddings). A row view (kv_cache_row) may run ahead of
 *     the others until the owner sets n_past again.
 *  3. A saved prefix is one row (row 0); restoring it writes it into every
 *     row (the conditioning of a CFG pair is the same in both rows).
 *
 *  4. A group (kv_cache.group, t3_batch_step) is a cache that holds no
 *     values itself: its B rows are its members' rows in turn (member i's
 *     n_rows rows after those of members 0..i-1), each member with its own
 *     length; a forward over a group appends one position to every member
 *     (T = 1) and attends each member's rows over that member's own
 *     positions, exactly as the member alone would: one
 *     op_attention_group a layer (member by member where a member exports
 *     probabilities, kv_cache.exp).
 *
 *  5. With at and len set, a one-position forward over a cache of its own
 *     writes its keys and values at position *at and attends keys
 *     [0, *len) of the whole capacity: every step has the same shapes and
 *     operands, so a backend may record it once and replay it (backend.h's
 *     graphs). The results are the same as with the lengths on the host.
 *     A layer is one op_attention_append (copy and attention apart where
 *     the layer exports probabilities).
 *
 * scratch: two arenas of the same backend, owned by the caller, or NULL
 * (kv_cache_init leaves them NULL). When set, a backbone forward computes
 * each layer in one of them in turn, resetting it first, so a prefill
 * touches two layers' worth of memory; only the result is allocated in the
 * caller's arena.
 * Thread safety: a cache belongs to one caller at a time. */
#ifndef CBX_T3_KV_CACHE_H
#define CBX_T3_KV_CACHE_H

#include <stdbool.h>

#include "core/ops.h"

/* Attention probabilities the forwards over a cache export (kv_cache.exp;
 * NULL, the default, exports nothing and costs nothing): for each of n
 * (layer, head) pairs, at most one head per layer, batch row `row` and
 * the last n_q query rows of a forward, over all n_past + T keys, into
 * dst[e] (host memory; query row r at dst[e] + r * ld, ld >= capacity).
 * T3's alignment guard reads three heads this way (t3/alignment.h). */
#define KV_EXPORT_MAX 4
struct kv_export {
    int n, row, n_q;
    int layer[KV_EXPORT_MAX], head[KV_EXPORT_MAX];
    float *dst[KV_EXPORT_MAX];
    int64_t ld;
};

struct kv_cache {
    int n_layer, n_rows, n_head, head_dim, capacity, n_past;
    enum dtype type;
    struct tensor **k, **v; /* n_layer entries, arena-owned */
    struct arena *scratch[2];
    const struct kv_export *exp; /* borrowed; NULL after kv_cache_init */
    /* a group (invariant 4): n_group member caches, borrowed; NULL for a
     * cache of its own. Only n_rows, group, n_group and scratch are
     * meaningful in a group (kv_cache_group). */
    struct kv_cache *const *group;
    int n_group;
    /* A step of fixed shapes (invariant 5), or NULL: the I32 [1] tensors
     * on the cache's backend holding the position the next forward writes
     * (n_past) and the keys it attends (n_past + 1). Borrowed; set by the
     * caller, which writes both before each one-position forward. */
    const struct tensor *at, *len;
};

/* Whether kv's next forward is invariant 5's fixed-shape step. */
static inline bool kv_cache_fixed(const struct kv_cache *kv) { return kv->at && kv->len; }

/* A group of n member caches (invariant 4) with scratch arenas s0, s1 (or
 * NULL). */
void kv_cache_group(struct kv_cache *kv, struct kv_cache *const *members, int n, struct arena *s0,
                    struct arena *s1);

/* The cache type for linear weights of type w: Q8_0 when they are
 * quantised (the cache would otherwise cost a decode step about a third of
 * the weights' bandwidth at 400-650 positions; measured with Q4_0 weights:
 * 5-6% less CPU time per step than an F16 cache at context 409-659, and
 * logits as close to an F32 cache's as the F16 cache's, under a tenth of
 * the Q4_0 weights' own error; bench_t3 t3_decode_long,
 * parity_turbo_t3_kvq8), F32 otherwise (so float models match upstream bit
 * for bit). F16 stays available through t3_backbone.kv_type. Head dims
 * here are 64: whole Q8_0 blocks. */
enum dtype kv_cache_type(enum dtype w);

/* A cache of `type` for n_rows rows of up to capacity positions in arena
 * `cache`. */
cbx_status kv_cache_init(struct kv_cache *kv, int n_layer, int n_head, int head_dim,
                         enum dtype type, int n_rows, struct arena *cache, int capacity);

/* Layer il's attention over the cache: writes k, v ([B, H, T, Dh] views,
 * T new positions) at n_past, then causal attention of q [B, H, T, Dh]
 * over positions [0, n_past + T) with scale 1/sqrt(Dh). Returns the heads
 * merged to [B, T, H * Dh]; with kv_only the keys and values are written
 * and a non-NULL placeholder (the value cache) is returned. Does not
 * advance n_past (the backbone does, after its last layer). When kv->exp
 * names layer il, the attention also exports that head's probabilities
 * (attn_params.probs); the output is the same bit for bit. */
struct tensor *kv_cache_attend(struct arena *a, struct kv_cache *kv, int il,
                               const struct tensor *q, const struct tensor *k,
                               const struct tensor *v, bool kv_only);

/* Layer il's attention for Llama: as kv_cache_attend, with q and k not
 * yet rotated, side by side in qk [B, H + Hk, T, Dh] (q's H heads, then
 * k's Hk); both are rotated by RoPE p at the forward's positions (pos:
 * I32 [T], on a group each row's own [B]) before the cache and the
 * attention see them. Invariant 5's step rotates inside its one
 * op_attention_append (at position *at, pos unused). */
struct tensor *kv_cache_attend_rope(struct arena *a, struct kv_cache *kv, int il, const struct tensor *qk,
                                    const struct tensor *v, const struct tensor *pos, const struct rope_params *p,
                                    bool kv_only);

/* Host copies of row 0's positions [0, n), byte for byte in the cache's own
 * type: per layer the keys, then the values, each head's n rows of Dh
 * values in turn ([H, n, Dh]; with Dh a multiple of 32 a Q8_0 row is whole
 * blocks); kv_cache_bytes(...) bytes in all. Restoring them gives back the
 * cache exactly (parity_turbo_t3_kvq8). A failure is recorded in arena a. */
size_t kv_cache_bytes(int n_layer, int n_head, int head_dim, enum dtype type, int n);
cbx_status kv_cache_save(struct arena *a, const struct kv_cache *kv, int n, void *dst);
/* The reverse, into every row (invariant 3); n_past becomes n. Needs
 * n <= capacity. src is host memory, or with on_backend the cache
 * backend's own memory (e.g. a t3_prefix's dev_kv). Host memory into a
 * host cache and backend memory into its cache are strided copies on the
 * backend (copy_2d: the cpu spreads them over its pool; a device queues
 * them, no transfer, no synchronisation); host memory into a device cache
 * is one transfer per head. */
cbx_status kv_cache_restore(struct arena *a, struct kv_cache *kv, int n, const void *src, bool on_backend);
/* The same for positions [p0, p0 + n): kv_cache_save_at saves them as
 * kv_cache_save lays out n positions; kv_cache_restore_at writes such a
 * copy there in every row, and n_past becomes p0 + n. */
cbx_status kv_cache_save_at(struct arena *a, const struct kv_cache *kv, int p0, int n, void *dst);
cbx_status kv_cache_restore_at(struct arena *a, struct kv_cache *kv, int p0, int n, const void *src,
                               bool on_backend);

/* *out: row `row` of kv as a cache of one row of its own (views of kv's
 * tensors, descriptors in arena a; no export, no fixed step), with kv's
 * n_past. A forward over it writes that row alone, so the row may run
 * ahead of the others (invariant 2 holds again once the owner sets
 * kv->n_past for a forward over every row). Not for a group. */
cbx_status kv_cache_row(struct arena *a, const struct kv_cache *kv, int row, struct kv_cache *out);

#endif
