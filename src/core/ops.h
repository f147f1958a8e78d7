/* ops.h - the operations model code is written in.
 *
 * Every op takes the stage arena first, checks its operands, allocates its
 * result in the arena (arena-owned, contiguous, on the arena's backend) and
 * runs the kernel of the arena's backend. Model code never touches
 * activation memory itself, so the same code runs on every backend (cpu,
 * ref, cuda).
 *
 * Errors: an op given a NULL operand returns NULL without doing anything;
 * an op whose operands do not fit records the problem in the arena
 * (arena_fail) and returns NULL. A chain of ops is therefore checked once,
 * at its end, with arena_status(a).
 *
 * Shapes are outermost first (PyTorch order). "x[..., K]" means any number
 * of leading dimensions. Operands may be strided views unless an op says
 * "contiguous"; weights are read in place in any listed type.
 * Thread safety: one thread at a time per arena. */
#ifndef CBX_OPS_H
#define CBX_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "arena.h"
#include "tensor.h"

/* ---- transfers and structure (ops_shape.c) ---------------------------- */

/* A new tensor on the arena's backend holding a copy of host data. */
struct tensor *op_from_host(struct arena *a, enum dtype type, int ndim,
                            const int64_t *ne, const void *host);
/* Copy t (any backend, any strides) into contiguous host memory dst of
 * tensor_nbytes(t) bytes. Explicit device->host transfer. */
cbx_status tensor_to_host(const struct tensor *t, void *dst);
/* F32 tensor filled with a constant. */
struct tensor *op_fill(struct arena *a, int ndim, const int64_t *ne, float v);
/* F32 tensor of the run-time generator's gaussians: element i (in memory
 * order) is the value rng_gaussian would give at draw s->counter + 2 i,
 * computed by the backend (the same values rng_gaussian_fill writes on
 * the host: core/rng.h, scalar_rng_gaussian); s->counter then moves past
 * them, as rng_gaussian_fill moves it. */
struct rng_stream;
struct tensor *op_randn(struct arena *a, int ndim, const int64_t *ne, struct rng_stream *s);

/* Views share data with x (no copy). */
struct tensor *op_slice(struct arena *a, const struct tensor *x, int dim,
                        int64_t start, int64_t len);
struct tensor *op_reshape(struct arena *a, const struct tensor *x, int ndim,
                          const int64_t *ne); /* x contiguous */
struct tensor *op_transpose(struct arena *a, const struct tensor *x, int d0, int d1);
/* Split dim into (n_outer, ne[dim] / n_outer); valid for any strides, e.g.
 * a [B, T, 3D] projection sliced to [B, T, D] and split into [B, T, H, Dh]. */
struct tensor *op_split_dim(struct arena *a, const struct tensor *x, int dim, int64_t n_outer);
/* out dim i = x dim perm[i] */
struct tensor *op_permute(struct arena *a, const struct tensor *x, const int *perm);
/* Contiguous copy of x (same type). */
struct tensor *op_cont(struct arena *a, const struct tensor *x);
/* Attention heads: [B, T, H * Dh] (any strides, e.g. a column slice of a
 * fused qkv projection) -> the view [B, H, T, Dh]; and back, a contiguous
 * [B, T, H, Dh] copy of o [B, H, T, Dh] reshaped to [B, T, H * Dh]. */
struct tensor *op_split_heads(struct arena *a, const struct tensor *x, int64_t H);
struct tensor *op_merge_heads(struct arena *a, const struct tensor *o);
/* Contiguous copy converted to type (F32/F16/BF16/I32 among each other;
 * block types from/to F32 for contiguous rows). */
struct tensor *op_cast(struct arena *a, const struct tensor *x, enum dtype type);
/* Copy src into dst (same shape, any strides), e.g. into a KV-cache view. */
cbx_status op_copy_into(struct arena *a, struct tensor *dst, const struct tensor *src);
/* op_copy_into at a position held in a tensor: src into dst's slice
 * [at, at + src->ne[dim]) along dim, at the one I32 value of `at`, a
 * tensor on the arena's backend (so that a recorded step, backend.h's
 * graphs, moves with it and not with the host). Callers validate the
 * value where it enters (0 <= at <= dst->ne[dim] - src->ne[dim]): a host
 * backend fails the arena on one outside, a device kernel skips the copy. */
cbx_status op_copy_into_at(struct arena *a, struct tensor *dst, const struct tensor *src, int dim,
                           const struct tensor *at);
/* Concatenate along dim; all other dims equal. */
struct tensor *op_concat(struct arena *a, const struct tensor *x,
                         const struct tensor *y, int dim);

/* ---- elementwise (ops_elementwise.c) ---------------------------------- */

enum binop { BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV };
/* x op y with y broadcast to x (numpy rules, dims aligned on the right,
 * y's dims 1 or equal). F32. Add and mul also take x broadcast to y. */
struct tensor *op_binary(struct arena *a, const struct tensor *x,
                         const struct tensor *y, enum binop op);
struct tensor *op_add(struct arena *a, const struct tensor *x, const struct tensor *y);
struct tensor *op_mul(struct arena *a, const struct tensor *x, const struct tensor *y);

enum unop {
    UN_GELU,      /* erf form (torch default) */
    UN_GELU_TANH, /* tanh approximation (GPT-2 "gelu_new") */
    UN_SILU, UN_MISH, UN_ELU /* p0 = alpha */, UN_LEAKY_RELU /* p0 = slope */,
    UN_RELU, UN_TANH, UN_SIGMOID, UN_SOFTPLUS /* torch: beta 1, threshold 20 */,
    UN_EXP, UN_LOG, UN_SIN, UN_COS, UN_ABS, UN_SQRT, UN_SQR, UN_NEG,
    UN_SCALE      /* p0 * x + p1 */,
    UN_CLAMP      /* min(max(x, p0), p1) */,
};
struct tensor *op_unary(struct arena *a, const struct tensor *x, enum unop op,
                        float p0, float p1);
struct tensor *op_scale(struct arena *a, const struct tensor *x, float s);
/* Snake (BigVGAN/HiFT): x + 1/(alpha + 1e-9) * sin(alpha * x)^2,
 * x[B, C, T] or [C, T], alpha[C] per channel (linear scale). */
struct tensor *op_snake(struct arena *a, const struct tensor *x, const struct tensor *alpha);
/* Reductions over the innermost dim, keeping it as size 1. */
enum redop { RED_SUM, RED_MEAN, RED_MAX };
struct tensor *op_reduce(struct arena *a, const struct tensor *x, enum redop op);
/* Inclusive cumulative sum over the innermost dim, accumulated in double
 * and stored as float32, as torch.cumsum on CPU does. */
struct tensor *op_cumsum(struct arena *a, const struct tensor *x);
/* Rows of table[N, D] (any weight type) at ids[n] (I32 or I64) -> [n, D]
 * F32 (ids may be [B, n] -> [B, n, D]). Ids must lie in [0, N): the op
 * does not read them (they may be device memory, and a host round trip
 * per call would serialise a device), so callers validate ids where they
 * enter: text ids (t3_inference: the tokenizer's output or the caller's),
 * prompt speech ids (T3 entry points, voice files and conds in
 * engine.c / vc.c), speech ids for S3Gen (s3gen flow/encoder, stream.c);
 * sampled ids are in range by construction (argmax / sampling over the
 * head's rows). The host kernels (cpu, ref) still fail the arena on an
 * out-of-range id, writing zeros for it; a device kernel clamps it (and
 * may assert in debug builds). */
struct tensor *op_get_rows(struct arena *a, const struct tensor *table,
                           const struct tensor *ids);

/* ---- linear algebra (ops_linear.c) ------------------------------------ */

/* y[..., N] = x[..., K] @ w[N, K]^T + b[N]. w in F32/F16/BF16/Q8_0/Q4_0/
 * Q4_1/Q5_0/Q5_1 (upstream [out, in] layout), b F32 or NULL, x F32.
 * One row: matrix-vector kernel; several rows: batched GEMM. */
struct tensor *op_linear(struct arena *a, const struct tensor *x,
                         const struct tensor *w, const struct tensor *b);
/* op_linear and what commonly follows it, as one op: r + act(x @ w^T + b),
 * act an enum unop (parameters 0) or -1 for none, r NULL or F32 of the
 * result's shape. The same floats as op_linear, op_unary and op_add in
 * turn, which it runs where the backend has no linear_ex kernel; a kernel
 * applies them in the product's store (the CUDA decode GEMV: no extra
 * launches). */
struct tensor *op_linear_ex(struct arena *a, const struct tensor *x, const struct tensor *w,
                            const struct tensor *b, int act, const struct tensor *r);
/* op_linear_ex of the elementwise product of two inputs: r + act((x *
 * gate) @ w^T + b), x and gate F32 of one shape (any strides; Llama's
 * SwiGLU: silu(gate) * up into the down product). The same floats as
 * op_mul, then op_linear_ex, which it runs where the backend has no
 * linear_gated kernel or declines these operands; a kernel forms the
 * product as it reads its input (the CUDA decode GEMV: no extra launch). */
struct tensor *op_linear_gated(struct arena *a, const struct tensor *x, const struct tensor *gate,
                               const struct tensor *w, const struct tensor *b, int act, const struct tensor *r);
/* A normalisation of a product's input over its innermost dim: layer
 * norm (g, b: op_layer_norm) or RMS norm (g: op_rms_norm); g, b
 * F32/F16/BF16 [K] (as those ops take them) or NULL. */
enum linear_norm_kind { LINEAR_NORM_LAYER, LINEAR_NORM_RMS };
struct linear_norm {
    enum linear_norm_kind kind;
    const struct tensor *g, *b;
    float eps;
};
/* Several products of one (optionally normalised) input, side by side:
 * out[..., N0 + N1 + ...] = [act0(h @ w0^T + b0) | act1(h @ w1^T + b1) |
 * ...], h = norm(x) (norm NULL: h = x), n (1..OP_LINEAR_CAT_MAX) weights
 * of one type and input width, b NULL or b[i] F32 [Ni] or NULL, act[i] an
 * enum unop or -1 (act NULL: none). The same floats as the norm op, then
 * op_linear_ex per weight and op_concat, which it runs where the backend
 * has no linear_cat kernel; a kernel computes every part in one launch
 * (the CUDA decode GEMV: the norm in its prologue, then q, k and v, or
 * gate and up, as one kernel). */
#define OP_LINEAR_CAT_MAX 4
struct tensor *op_linear_cat(struct arena *a, const struct tensor *x, const struct linear_norm *norm, int n,
                             const struct tensor *const *w, const struct tensor *const *b, const int *act);
/* out[..., M, N] = x[..., M, K] @ y[..., K, N], F32, batch dims broadcast. */
struct tensor *op_matmul(struct arena *a, const struct tensor *x, const struct tensor *y);

/* ---- convolution and resampling (ops_conv.c) -------------------------- */

enum pad_mode { PAD_ZERO, PAD_REFLECT, PAD_REPLICATE };

struct conv1d_params {
    int stride, dilation, groups;
    int pad_left, pad_right; /* causal conv: pad_left = dilation*(k-1), right 0 */
    enum pad_mode pad_mode;
};
/* x[B, Cin, T] or [Cin, T]; w[Cout, Cin/groups, K]; b[Cout] or NULL. */
struct tensor *op_conv1d(struct arena *a, const struct tensor *x,
                         const struct tensor *w, const struct tensor *b,
                         const struct conv1d_params *p);
struct conv_transpose1d_params {
    int stride, padding, output_padding, dilation, groups; /* PyTorch's */
};
/* x[B, Cin, T] or [Cin, T]; w[Cin, Cout/groups, K]; b[Cout] or NULL.
 * T_out = (T-1)*stride - 2*padding + dilation*(K-1) + output_padding + 1. */
struct tensor *op_conv_transpose1d(struct arena *a, const struct tensor *x,
                                   const struct tensor *w, const struct tensor *b,
                                   const struct conv_transpose1d_params *p);
/* Pad the innermost dim. Reflect needs pad < T (as torch). */
struct tensor *op_pad1d(struct arena *a, const struct tensor *x, int left,
                        int right, enum pad_mode mode, float value);
/* Nearest-neighbour upsampling of the innermost dim by an integer factor. */
struct tensor *op_upsample_nearest(struct arena *a, const struct tensor *x, int factor);
/* One unidirectional LSTM layer (torch.nn.LSTM gate order i, f, g, o).
 * x[B, T, In]; w_ih[4H, In]; w_hh[4H, H]; b_ih, b_hh [4H] (or NULL);
 * h0, c0 [B, H] or NULL (zeros). Output [B, T, H]; final states written to
 * *h_n / *c_n when not NULL ([B, H], arena-owned). */
struct tensor *op_lstm(struct arena *a, const struct tensor *x,
                       const struct tensor *w_ih, const struct tensor *w_hh,
                       const struct tensor *b_ih, const struct tensor *b_hh,
                       const struct tensor *h0, const struct tensor *c0,
                       struct tensor **h_n, struct tensor **c_n);

/* ---- normalisation, softmax, attention, rotary (ops_nn.c) ------------- */

/* Over the innermost dim; g, b [D] or NULL. */
struct tensor *op_layer_norm(struct arena *a, const struct tensor *x,
                             const struct tensor *g, const struct tensor *b, float eps);
/* Residual add and layer norm in one pass: *sum = x + r (a new contiguous
 * tensor, the same floats as op_add) and the return value
 * op_layer_norm(*sum, g, b, eps). x, r: F32 of one shape, any strides. */
struct tensor *op_add_layer_norm(struct arena *a, const struct tensor *x, const struct tensor *r,
                                 const struct tensor *g, const struct tensor *b, float eps,
                                 struct tensor **sum);
struct tensor *op_rms_norm(struct arena *a, const struct tensor *x,
                           const struct tensor *g, float eps);
/* x[B, C, T] (or [C, T]); groups of C/G channels; g, b [C] or NULL. */
struct tensor *op_group_norm(struct arena *a, const struct tensor *x, int n_groups,
                             const struct tensor *g, const struct tensor *b, float eps);
/* Per-channel affine x * scale[c] + shift[c] over dim `dim` (batch norm in
 * eval mode, folded at load: scale = g/sqrt(var+eps), shift = b - mean*scale). */
struct tensor *op_channel_affine(struct arena *a, const struct tensor *x, int dim,
                                 const struct tensor *scale, const struct tensor *shift);
/* Softmax over the innermost dim: softmax(x * scale). */
struct tensor *op_softmax(struct arena *a, const struct tensor *x, float scale);

/* An optional output of op_attention: the attention probabilities
 * softmax(q k^T * scale + bias) of one batch row b and query head h, for
 * query rows [i0, i0 + n): row r goes to dst + r * ld, keys 0 .. Tk-1
 * (keys a query does not see, causal ones, hold 0; a query that sees no
 * key gets a row of zeros). dst is host memory on every backend (the cuda
 * backend copies the rows back, synchronising); ld >= Tk. The attention output is the same,
 * bit for bit, with and without it. Used by T3's alignment guard
 * (t3/alignment.h) to read three heads; the default decode asks for none
 * and pays nothing. */
struct attn_probs {
    int64_t b, h, i0, n;
    float *dst;
    int64_t ld;
};
struct attn_params {
    float scale;  /* usually 1/sqrt(D) */
    bool causal;  /* query i (absolute position Tk-Tq+i) sees keys <= it */
    const struct attn_probs *probs; /* NULL (default): nothing exported */
    /* NULL (default), or a one-element I32 tensor on the arena's backend:
     * only keys [0, kv_len) of k and v exist (1 <= kv_len <= Tk; no bias).
     * A decode step over a fixed-capacity KV cache keeps one shape this
     * way while its length grows (a recorded step, backend.h). */
    const struct tensor *kv_len;
};
/* Fused scaled-dot-product attention.
 * q[B, Hq, Tq, D]; k, v [B, Hk, Tk, D] with Hq % Hk == 0 (grouped-query:
 * head h reads kv head h / (Hq/Hk)); views with any strides (e.g. a
 * permuted [B, T, H, D] projection or a KV-cache prefix). bias (or NULL) is
 * added to the scaled scores and broadcasts as [B or 1, Hq or 1, Tq, Tk]
 * (relative-position scores, -inf masks). Output [B, Hq, Tq, D]. */
struct tensor *op_attention(struct arena *a, const struct tensor *q,
                            const struct tensor *k, const struct tensor *v,
                            const struct tensor *bias, const struct attn_params *p);

/* One layer's decode step over a group of KV caches (T3's batched
 * decode, t3/kv_cache.h invariant 4): member i owns the next rows[i] rows
 * of q [R, Hq, 1, D] and of the new keys and values k, v [R, Hk, 1, D]
 * (F32, any strides), and caches kc[i], vc[i] ([rows[i], Hk, cap_i, D],
 * both F32, F16 or Q8_0) that hold n_past[i] < cap_i positions. Each
 * row's key and value go to position n_past[i] of its cache, then its
 * query attends positions [0, n_past[i] + 1) with `scale`. Output
 * [R, Hq, 1, D]: each row bit for bit what op_copy_into and op_attention
 * over its own cache give; a backend may do it all in a few launches
 * (kernels.attention_group), the others do exactly that per member. */
struct attn_group {
    int n;
    const int *rows, *n_past;
    struct tensor *const *kc, *const *vc;
    float scale;
};
struct tensor *op_attention_group(struct arena *a, const struct tensor *q, const struct tensor *k,
                                  const struct tensor *v, const struct attn_group *g);

struct rope_params {
    float theta;            /* base, e.g. 10000 or 500000 */
    int n_dims;             /* rotated dims (<= D), NeoX half split */
    /* Llama-3 frequency scaling; factor 0 disables it. */
    float factor, low_freq_factor, high_freq_factor;
    int original_max_pos;
};

/* One decode step's cache write and attention (a recorded step over a
 * fixed-capacity cache, t3/kv_cache.h invariant 5): the new keys and
 * values kn, vn [B, Hk, 1, D] (F32, any strides) go to position *at of
 * the caches kc, vc ([B, Hk, cap, D], both F32, F16 or Q8_0) as
 * op_copy_into_at puts them, then q [B, Hq, 1, D] attends positions
 * [0, *len) with `scale`; at and len are one-element I32 tensors on the
 * arena's backend, len holding at + 1. With rope (else NULL), q and kn
 * are first rotated as op_rope at position *at rotates them (Llama's
 * step). Output [B, Hq, 1, D]: bit for bit what op_rope on q and kn,
 * op_copy_into_at twice and op_attention with kv_len give; a backend may
 * do it in one launch (kernels.attention_append), the others do exactly
 * that. */
struct tensor *op_attention_append(struct arena *a, const struct tensor *q, const struct tensor *kn,
                                   const struct tensor *vn, struct tensor *kc, struct tensor *vc,
                                   const struct tensor *at, const struct tensor *len, float scale,
                                   const struct rope_params *rope);

/* Rotary embedding, NeoX/HF layout (rotate_half on the two halves).
 * x[B, H, T, D]; pos I32 [T] absolute positions. */
struct tensor *op_rope(struct arena *a, const struct tensor *x,
                       const struct tensor *pos, const struct rope_params *p);

/* ---- sampling (ops_nn.c; device backends) ----------------------------- */

/* The draw of one token from a decode step's logits on the device, so a
 * recorded step (backend.h graphs) ends in its sampled id: transformers'
 * (5.2.0) logits processors in one of T3's two orders, then the
 * categorical draw of spec/rng.md §4, as t3/sampler.h and rng.h compute
 * them on the host (float32 rows, sums in double; the device's sums run
 * in another order, so a draw can differ only where the host's margin is
 * a few ulps). Values as the host sampler uses them: */
enum sample_order {
    SAMPLE_TURBO, /* temperature, top-k, top-p, repetition penalty */
    SAMPLE_LLAMA  /* repetition penalty, then (unless greedy) temperature,
                   * min-p, top-p */
};
struct sample_params {
    enum sample_order order;
    float cfg_weight;         /* two rows [cond, uncond]: c + w (c - u) */
    float temperature;        /* 0: none */
    int top_k;                /* 0: none; 1: greedy (the first argmax) */
    bool top_p;               /* top_p_cut applies */
    float top_p_cut;          /* (float)(1 - top_p): ascending cumulative
                               * probabilities <= it are dropped */
    float min_p;              /* 0: none */
    float repetition_penalty; /* 1: none */
};
#define OP_SAMPLE_MAX_V 16384
/* logits F32 [R, V] contiguous rows (R 1, or 2 for a CFG pair), V <=
 * OP_SAMPLE_MAX_V; seen I32 [V]: nonzero marks the repetition history,
 * the drawn id is marked; rng I32 [4]: the stream's key and next draw
 * index as {key lo, key hi, index lo, index hi}, the index advanced by a
 * categorical draw (greedy draws none); out I32 [1]: the id, or -1 when
 * every logit is -inf. On the device all four stay there. Backends
 * without the kernel (the host ones: t3 samples with t3/sampler.h) fail
 * with CBX_ERR_UNSUPPORTED. */
cbx_status op_sample(struct arena *a, struct tensor *out, const struct tensor *logits, struct tensor *seen,
                     struct tensor *rng, const struct sample_params *p);

/* ---- spectral (ops_spectral.c) ---------------------------------------- */

struct stft_params {
    int n_fft, hop, win_length; /* window of win_length centred in n_fft */
    bool center;                /* pad n_fft/2 each side with pad_mode */
    enum pad_mode pad_mode;     /* torch.stft default: reflect */
    bool normalized;            /* multiply by 1/sqrt(n_fft) */
};
/* torch.stft(x, return_complex=True, onesided=True) as real/imag pairs:
 * x[B, L] or [L]; window [win_length] (NULL = rectangular);
 * out [B, n_fft/2+1, frames, 2]. */
struct tensor *op_stft(struct arena *a, const struct tensor *x,
                       const struct tensor *window, const struct stft_params *p);
/* torch.istft: spec[B, n_fft/2+1, frames, 2] -> [B, length] (length <= 0:
 * the natural length), with window-square normalisation (as torch). */
struct tensor *op_istft(struct arena *a, const struct tensor *spec,
                        const struct tensor *window, const struct stft_params *p,
                        int64_t length);

/* ---- 2-D convolution (ops_conv2d.c) ----------------------------------- */

struct conv2d_params {
    int stride_h, stride_w, dilation_h, dilation_w, groups; /* 0 means 1 */
    int pad_h, pad_w; /* zero padding on both sides, as nn.Conv2d(padding=) */
};
/* F.conv2d: x[B, Cin, H, W] or [Cin, H, W] (any strides); w[Cout,
 * Cin/groups, KH, KW] (F32/F16/BF16); b[Cout] or NULL.
 * Out [B, Cout, (H + 2ph - dh(KH-1) - 1)/sh + 1, (W + 2pw - dw(KW-1) - 1)/sw + 1]. */
struct tensor *op_conv2d(struct arena *a, const struct tensor *x,
                         const struct tensor *w, const struct tensor *b,
                         const struct conv2d_params *p);

#endif
