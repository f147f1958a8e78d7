/* ops_nn.c - normalisation, softmax, attention and rotary ops (see ops.h).
 *
 * Operand checks and result allocation only; the maths lives in the
 * backends' kernels (src/core/cpu/nn.c, src/core/ref/nn.c). Activations
 * (x, q, k, v, bias) are F32; per-channel parameters (g, b, scale, shift)
 * may be F32, F16 or BF16 vectors read in place.
 *
 * Conventions the kernels rely on:
 *  1. op_attention hands the kernel a 4-D bias [Bb, Hb, Tq, Tk] whose
 *     broadcast dimensions (size 1) have stride 0, so a kernel addresses
 *     bias(b, h, i, j) as b*nb[0] + h*nb[1] + i*nb[2] + j*nb[3] for every
 *     b < B, h < Hq without knowing about broadcasting.
 *  2. Softmax of a row with no finite maximum (all -inf, or a NaN/+inf)
 *     gives NaN, as torch.softmax does. Attention of a query that sees no
 *     key (causal with Tq > Tk, or a bias row of -inf) gives zeros, as
 *     torch SDPA (>= 2.5) and ESPnet's masked_fill(mask, 0) after softmax.
 *  3. attn_params.probs, when set, names an existing (b, h), query rows
 *     inside [0, Tq) and a host destination with stride >= Tk; a kernel
 *     fills it without changing how it computes the output (a device
 *     backend copies the rows back before it returns). */
#include <math.h>

#include "backend.h"

static bool is_f32(struct arena *a, const char *op, const char *what, const struct tensor *t)
{
    if (t->type == TYPE_F32) return true;
    arena_fail(a, CBX_ERR_INTERNAL, "%s: %s is %s, want f32", op, what, dtype_name(t->type));
    return false;
}

/* A per-channel parameter: NULL (when allowed) or a [n] F32/F16/BF16 vector. */
static bool param_ok(struct arena *a, const char *op, const char *what,
                     const struct tensor *v, int64_t n)
{
    if (!v) return true;
    if (v->ndim == 1 && v->ne[0] == n &&
        (v->type == TYPE_F32 || v->type == TYPE_F16 || v->type == TYPE_BF16))
        return true;
    char s[64];
    arena_fail(a, CBX_ERR_INTERNAL, "%s: %s is %s %s, want f32/f16/bf16 [%lld]", op, what,
               dtype_name(v->type), tensor_shape_str(v, s, sizeof s), (long long)n);
    return false;
}

struct tensor *op_layer_norm(struct arena *a, const struct tensor *x,
                             const struct tensor *g, const struct tensor *b, float eps)
{
    if (!x) return NULL;
    KERNEL(a, layer_norm);
    if (!is_f32(a, "op_layer_norm", "x", x)) return NULL;
    if (x->ndim < 1) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_layer_norm: x is a scalar");
        return NULL;
    }
    int64_t d = x->ne[x->ndim - 1];
    if (!param_ok(a, "op_layer_norm", "weight", g, d) ||
        !param_ok(a, "op_layer_norm", "bias", b, d))
        return NULL;
    struct tensor *out = arena_tensor(a, TYPE_F32, x->ndim, x->ne);
    if (out) be_->k.layer_norm(a, out, x, g, b, eps);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_add_layer_norm(struct arena *a, const struct tensor *x, const struct tensor *r,
                                 const struct tensor *g, const struct tensor *b, float eps,
                                 struct tensor **sum)
{
    if (sum) *sum = NULL;
    if (!x || !r) return NULL;
    KERNEL(a, add_layer_norm);
    if (!is_f32(a, "op_add_layer_norm", "x", x) || !is_f32(a, "op_add_layer_norm", "r", r))
        return NULL;
    if (x->ndim < 1 || !tensor_same_shape(x, r)) {
        char sx[64], sr[64];
        arena_fail(a, CBX_ERR_INTERNAL, "op_add_layer_norm: x %s and r %s, want one shape",
                   tensor_shape_str(x, sx, sizeof sx), tensor_shape_str(r, sr, sizeof sr));
        return NULL;
    }
    int64_t d = x->ne[x->ndim - 1];
    if (!param_ok(a, "op_add_layer_norm", "weight", g, d) ||
        !param_ok(a, "op_add_layer_norm", "bias", b, d))
        return NULL;
    struct tensor *s = arena_tensor(a, TYPE_F32, x->ndim, x->ne);
    struct tensor *out = s ? arena_tensor(a, TYPE_F32, x->ndim, x->ne) : NULL;
    if (out) be_->k.add_layer_norm(a, s, out, x, r, g, b, eps);
    if (arena_status(a) != CBX_OK) return NULL;
    if (sum) *sum = s;
    return out;
}

struct tensor *op_rms_norm(struct arena *a, const struct tensor *x,
                           const struct tensor *g, float eps)
{
    if (!x) return NULL;
    KERNEL(a, rms_norm);
    if (!is_f32(a, "op_rms_norm", "x", x)) return NULL;
    if (x->ndim < 1) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_rms_norm: x is a scalar");
        return NULL;
    }
    if (!param_ok(a, "op_rms_norm", "weight", g, x->ne[x->ndim - 1])) return NULL;
    struct tensor *out = arena_tensor(a, TYPE_F32, x->ndim, x->ne);
    if (out) be_->k.rms_norm(a, out, x, g, eps);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_group_norm(struct arena *a, const struct tensor *x, int n_groups,
                             const struct tensor *g, const struct tensor *b, float eps)
{
    if (!x) return NULL;
    KERNEL(a, group_norm);
    if (!is_f32(a, "op_group_norm", "x", x)) return NULL;
    char s[64];
    if (x->ndim != 2 && x->ndim != 3) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_group_norm: x is %s, want [B, C, T] or [C, T]",
                   tensor_shape_str(x, s, sizeof s));
        return NULL;
    }
    int64_t c = x->ne[x->ndim - 2];
    if (n_groups < 1 || c % n_groups != 0) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_group_norm: %lld channels in %d groups",
                   (long long)c, n_groups);
        return NULL;
    }
    if (!param_ok(a, "op_group_norm", "weight", g, c) ||
        !param_ok(a, "op_group_norm", "bias", b, c))
        return NULL;
    struct tensor *out = arena_tensor(a, TYPE_F32, x->ndim, x->ne);
    if (out) be_->k.group_norm(a, out, x, n_groups, g, b, eps);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_channel_affine(struct arena *a, const struct tensor *x, int dim,
                                 const struct tensor *scale, const struct tensor *shift)
{
    if (!x || !scale || !shift) return NULL;
    KERNEL(a, channel_affine);
    if (!is_f32(a, "op_channel_affine", "x", x)) return NULL;
    if (dim < 0) dim += x->ndim;
    if (dim < 0 || dim >= x->ndim) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_channel_affine: dim out of range for %d dims",
                   x->ndim);
        return NULL;
    }
    if (!param_ok(a, "op_channel_affine", "scale", scale, x->ne[dim]) ||
        !param_ok(a, "op_channel_affine", "shift", shift, x->ne[dim]))
        return NULL;
    struct tensor *out = arena_tensor(a, TYPE_F32, x->ndim, x->ne);
    if (out) be_->k.channel_affine(a, out, x, dim, scale, shift);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_softmax(struct arena *a, const struct tensor *x, float scale)
{
    if (!x) return NULL;
    KERNEL(a, softmax);
    if (!is_f32(a, "op_softmax", "x", x)) return NULL;
    if (x->ndim < 1) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_softmax: x is a scalar");
        return NULL;
    }
    struct tensor *out = arena_tensor(a, TYPE_F32, x->ndim, x->ne);
    if (out) be_->k.softmax(a, out, x, scale);
    return arena_status(a) == CBX_OK ? out : NULL;
}

/* fail the arena with fmt naming the shapes of x, y and z (three %s) */
static void shapes_fail(struct arena *a, const char *fmt, const struct tensor *x, const struct tensor *y,
                        const struct tensor *z)
{
    char sx[64], sy[64], sz[64];
    arena_fail(a, CBX_ERR_INTERNAL, fmt, tensor_shape_str(x, sx, sizeof sx), tensor_shape_str(y, sy, sizeof sy),
               tensor_shape_str(z, sz, sizeof sz));
}

struct tensor *op_attention_group(struct arena *a, const struct tensor *q, const struct tensor *k,
                                  const struct tensor *v, const struct attn_group *g)
{
    if (!q || !k || !v || !g) return NULL;
    const struct backend *be = arena_backend(a);
    bool ok = q->ndim == 4 && k->ndim == 4 && v->ndim == 4 && q->ne[2] == 1 && g->n > 0 && q->type == TYPE_F32 &&
              k->type == TYPE_F32 && v->type == TYPE_F32;
    for (int d = 0; ok && d < 4; d++) ok = k->ne[d] == v->ne[d] && (d == 1 || k->ne[d] == q->ne[d]);
    const int64_t Hk = ok ? k->ne[1] : 0, D = ok ? q->ne[3] : 0;
    ok = ok && Hk > 0 && q->ne[1] % Hk == 0;
    int64_t rows = 0;
    for (int i = 0; ok && i < g->n; i++) {
        const struct tensor *kc = g->kc[i], *vc = g->vc[i];
        ok = g->rows[i] > 0 && kc && vc && kc->ndim == 4 && vc->ndim == 4 && kc->type == vc->type &&
             (kc->type == TYPE_F32 || kc->type == TYPE_F16 || kc->type == TYPE_Q8_0);
        for (int d = 0; ok && d < 4; d++) ok = kc->ne[d] == vc->ne[d];
        ok = ok && kc->ne[0] == g->rows[i] && kc->ne[1] == Hk && kc->ne[3] == D && g->n_past[i] >= 0 &&
             g->n_past[i] < kc->ne[2];
        rows += ok ? g->rows[i] : 0;
    }
    if (!ok || rows != q->ne[0]) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_attention_group: operands do not form a group of one-position steps");
        return NULL;
    }
    const int64_t one[4] = {q->ne[0], q->ne[1], 1, D};
    if (be->k.attention_group) {
        struct tensor *out = arena_tensor(a, TYPE_F32, 4, one);
        if (!out) return NULL;
        if (be->k.attention_group(a, out, q, k, v, g)) return arena_status(a) == CBX_OK ? out : NULL;
        if (arena_status(a) != CBX_OK) return NULL;
    }
    /* per member: its rows' keys and values into its cache, then its
     * attention over the positions it holds */
    const struct attn_params ap = {.scale = g->scale, .causal = true};
    struct tensor *o = NULL;
    int64_t r0 = 0;
    for (int i = 0; i < g->n; i++) {
        const int64_t nr = g->rows[i], np = g->n_past[i];
        op_copy_into(a, op_slice(a, g->kc[i], 2, np, 1), op_slice(a, k, 0, r0, nr));
        op_copy_into(a, op_slice(a, g->vc[i], 2, np, 1), op_slice(a, v, 0, r0, nr));
        struct tensor *oi = op_attention(a, op_slice(a, q, 0, r0, nr), op_slice(a, g->kc[i], 2, 0, np + 1),
                                         op_slice(a, g->vc[i], 2, 0, np + 1), NULL, &ap);
        o = o ? op_concat(a, o, oi, 0) : oi;
        if (!o) return NULL;
        r0 += nr;
    }
    return o;
}

/* rotary parameters for heads of D dims, else false (recorded in a) */
static bool rope_params_ok(struct arena *a, const struct rope_params *p, int64_t D)
{
    if (p->n_dims < 2 || p->n_dims % 2 || p->n_dims > D || !(p->theta > 0)) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_rope: n_dims %d, theta %g for head dim %lld", p->n_dims,
                   (double)p->theta, (long long)D);
        return false;
    }
    if (p->factor != 0 && (!(p->factor > 0) || p->original_max_pos <= 0 ||
                           !(p->high_freq_factor > p->low_freq_factor) || !(p->low_freq_factor > 0))) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_rope: llama3 scaling factor %g, low %g, high %g, original_max_pos %d",
                   (double)p->factor, (double)p->low_freq_factor, (double)p->high_freq_factor,
                   p->original_max_pos);
        return false;
    }
    return true;
}

struct tensor *op_attention_append(struct arena *a, const struct tensor *q, const struct tensor *kn,
                                   const struct tensor *vn, struct tensor *kc, struct tensor *vc,
                                   const struct tensor *at, const struct tensor *len, float scale,
                                   const struct rope_params *rope)
{
    if (!q || !kn || !vn || !kc || !vc || !at || !len) return NULL;
    const struct backend *be = arena_backend(a);
    bool ok = q->ndim == 4 && kn->ndim == 4 && vn->ndim == 4 && kc->ndim == 4 && vc->ndim == 4 && q->ne[2] == 1 &&
              q->type == TYPE_F32 && kn->type == TYPE_F32 && vn->type == TYPE_F32 && kc->type == vc->type &&
              (kc->type == TYPE_F32 || kc->type == TYPE_F16 || kc->type == TYPE_Q8_0);
    for (int d = 0; ok && d < 4; d++)
        ok = kn->ne[d] == vn->ne[d] && kc->ne[d] == vc->ne[d] && (d == 2 || kn->ne[d] == kc->ne[d]) &&
             (d == 1 || d == 2 || q->ne[d] == kc->ne[d]);
    ok = ok && kn->ne[2] == 1 && kc->ne[1] > 0 && q->ne[1] % kc->ne[1] == 0;
    if (!ok) {
        shapes_fail(a, "op_attention_append: q %s, new keys %s, cache %s; want q [B, Hq, 1, D], kn and vn "
                       "[B, Hk, 1, D], caches [B, Hk, cap, D]",
                    q, kn, kc);
        return NULL;
    }
    if (rope && !rope_params_ok(a, rope, q->ne[3])) return NULL;
    if (be->k.attention_append) {
        struct tensor *out = arena_tensor(a, TYPE_F32, 4, q->ne);
        if (!out) return NULL;
        int32_t pos = 0;
        if (!op_index_operand(a, "op_attention_append", at, &pos)) return NULL;
        if (be->k.attention_append(a, out, q, kn, vn, kc, vc, at, scale, rope))
            return arena_status(a) == CBX_OK ? out : NULL;
        if (arena_status(a) != CBX_OK) return NULL;
    }
    if (rope) {
        q = op_rope(a, q, at, rope);
        kn = op_rope(a, kn, at, rope);
        if (!q || !kn) return NULL;
    }
    op_copy_into_at(a, kc, kn, 2, at);
    op_copy_into_at(a, vc, vn, 2, at);
    const struct attn_params ap = {.scale = scale, .causal = true, .kv_len = len};
    return arena_status(a) == CBX_OK ? op_attention(a, q, kc, vc, NULL, &ap) : NULL;
}

struct tensor *op_attention(struct arena *a, const struct tensor *q,
                            const struct tensor *k, const struct tensor *v,
                            const struct tensor *bias, const struct attn_params *p)
{
    if (!q || !k || !v || !p) return NULL;
    KERNEL(a, attention);
    /* k and v: both F32, both F16 (a half-precision KV cache), or both
     * Q8_0 (an 8-bit KV cache; head dim a whole number of blocks) */
    const bool kv_cache = k->type == v->type && (k->type == TYPE_F16 || k->type == TYPE_Q8_0);
    if (!is_f32(a, "op_attention", "q", q) ||
        (!kv_cache && (!is_f32(a, "op_attention", "k", k) || !is_f32(a, "op_attention", "v", v))) ||
        (bias && !is_f32(a, "op_attention", "bias", bias)))
        return NULL;
    char sq[64];
    bool ok = q->ndim == 4 && k->ndim == 4 && v->ndim == 4;
    for (int d = 0; ok && d < 4; d++)
        if (k->ne[d] != v->ne[d]) ok = false;
    ok = ok && q->ne[0] == k->ne[0] && q->ne[3] == k->ne[3] && k->ne[1] > 0 &&
         q->ne[1] % k->ne[1] == 0;
    if (ok && k->type == TYPE_Q8_0 && k->ne[3] % QK != 0) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_attention: q8_0 k and v with head dim %lld, want a multiple of %d",
                   (long long)k->ne[3], QK);
        return NULL;
    }
    if (!ok) {
        shapes_fail(a, "op_attention: q %s, k %s, v %s; want q[B, Hq, Tq, D], k and v [B, Hk, Tk, D] "
                       "with Hq %% Hk == 0",
                    q, k, v);
        return NULL;
    }
    struct attn_params pk = *p;
    if (p->kv_len) {
        int32_t len = 0;
        if (bias) {
            arena_fail(a, CBX_ERR_INTERNAL, "op_attention: a key length with a bias");
            return NULL;
        }
        if (!op_index_operand(a, "op_attention", p->kv_len, &len)) return NULL;
        if (be_->host) { /* the value is at hand: attend over the slice */
            if (len < 1 || len > k->ne[2]) {
                arena_fail(a, CBX_ERR_INTERNAL, "op_attention: %d of %lld keys", len, (long long)k->ne[2]);
                return NULL;
            }
            k = op_slice(a, k, 2, 0, len);
            v = op_slice(a, v, 2, 0, len);
            if (!k || !v) return NULL;
            pk.kv_len = NULL;
        }
    }
    p = &pk;
    int64_t B = q->ne[0], Hq = q->ne[1], Tq = q->ne[2], Tk = k->ne[2];
    struct tensor *bv = NULL;
    if (bias) {
        /* right-aligned broadcast to [B, Hq, Tq, Tk]; see convention 1 */
        const int64_t want[4] = {B, Hq, Tq, Tk};
        struct tensor t = *bias;
        ok = bias->ndim >= 2 && bias->ndim <= 4;
        for (int d = 0; ok && d < 4; d++) {
            int sd = d - (4 - bias->ndim);
            int64_t n = sd >= 0 ? bias->ne[sd] : 1;
            int64_t nb = sd >= 0 ? bias->nb[sd] : 0;
            if (n != want[d] && !(n == 1 && d < 2)) ok = false;
            t.ne[d] = n;
            t.nb[d] = n == 1 ? 0 : nb;
        }
        if (!ok) {
            arena_fail(a, CBX_ERR_INTERNAL,
                       "op_attention: bias %s does not broadcast to [B or 1, Hq or 1, Tq, Tk] "
                       "= [%lld, %lld, %lld, %lld]",
                       tensor_shape_str(bias, sq, sizeof sq), (long long)B, (long long)Hq,
                       (long long)Tq, (long long)Tk);
            return NULL;
        }
        t.ndim = 4;
        bv = arena_desc(a, &t);
        if (!bv) return NULL;
    }
    const struct attn_probs *pr = p->probs;
    if (pr && (!pr->dst || pr->b < 0 || pr->b >= B || pr->h < 0 || pr->h >= Hq || pr->i0 < 0 ||
               pr->n < 0 || pr->i0 + pr->n > Tq || pr->ld < Tk)) {
        arena_fail(a, CBX_ERR_INTERNAL,
                   "op_attention: probabilities of row %lld, head %lld, queries [%lld, %lld) with stride %lld "
                   "asked of [%lld, %lld, %lld, %lld] attention on backend %s (host memory, stride >= Tk)",
                   (long long)pr->b, (long long)pr->h, (long long)pr->i0, (long long)(pr->i0 + pr->n),
                   (long long)pr->ld, (long long)B, (long long)Hq, (long long)Tq, (long long)Tk, be_->name);
        return NULL;
    }
    const int64_t ne[4] = {B, Hq, Tq, q->ne[3]};
    struct tensor *out = arena_tensor(a, TYPE_F32, 4, ne);
    if (out) be_->k.attention(a, out, q, k, v, bv, p);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_rope(struct arena *a, const struct tensor *x,
                       const struct tensor *pos, const struct rope_params *p)
{
    if (!x || !pos || !p) return NULL;
    KERNEL(a, rope);
    if (!is_f32(a, "op_rope", "x", x)) return NULL;
    char sx[64], sp[64];
    if (x->ndim != 4 || pos->type != TYPE_I32 || pos->ndim != 1 || pos->ne[0] != x->ne[2]) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_rope: x %s, pos %s %s; want x[B, H, T, D], pos i32 [T]",
                   tensor_shape_str(x, sx, sizeof sx), dtype_name(pos->type),
                   tensor_shape_str(pos, sp, sizeof sp));
        return NULL;
    }
    if (!rope_params_ok(a, p, x->ne[3])) return NULL;
    struct tensor *out = arena_tensor(a, TYPE_F32, 4, x->ne);
    if (out) be_->k.rope(a, out, x, pos, p);
    return arena_status(a) == CBX_OK ? out : NULL;
}

static bool is_i32_vec(const struct tensor *t, int64_t n)
{
    return t->type == TYPE_I32 && tensor_nelements(t) == n && tensor_is_contiguous(t);
}

cbx_status op_sample(struct arena *a, struct tensor *out, const struct tensor *logits, struct tensor *seen,
                     struct tensor *rng, const struct sample_params *p)
{
    if (!out || !logits || !seen || !rng || !p) return arena_status(a) != CBX_OK ? arena_status(a) : CBX_ERR_INTERNAL;
    const struct backend *be = arena_backend(a);
    if (!be->k.sample) return arena_fail(a, CBX_ERR_UNSUPPORTED, "sample: backend %s has no kernel", be->name);
    const int64_t V = logits->ndim ? logits->ne[logits->ndim - 1] : 0, R = V ? tensor_nelements(logits) / V : 0;
    char sl[64];
    if (logits->type != TYPE_F32 || !tensor_is_contiguous(logits) || V < 1 || V > OP_SAMPLE_MAX_V || R < 1 ||
        R > 2 || !is_i32_vec(seen, V) || !is_i32_vec(rng, 4) || !is_i32_vec(out, 1))
        return arena_fail(a, CBX_ERR_INTERNAL,
                          "op_sample: logits %s %s; want F32 [1 or 2, V <= %d], i32 seen [V], rng [4], out [1]",
                          dtype_name(logits->type), tensor_shape_str(logits, sl, sizeof sl), OP_SAMPLE_MAX_V);
    if (p->top_k < 0 || p->temperature < 0 || p->min_p < 0)
        return arena_fail(a, CBX_ERR_INTERNAL, "op_sample: top_k %d, temperature %g, min_p %g", p->top_k,
                          (double)p->temperature, (double)p->min_p);
    be->k.sample(a, out, logits, seen, rng, p);
    return arena_status(a);
}
