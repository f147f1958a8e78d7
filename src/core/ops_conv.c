/* ops_conv.c - convolution, padding, upsampling and LSTM ops (see ops.h).
 *
 * Semantics follow PyTorch exactly: torch.nn.functional.conv1d (with the
 * padding applied first as F.pad in the given mode), conv_transpose1d,
 * F.pad on the last dim, nn.Upsample(mode='nearest') with an integer
 * factor, and one layer of nn.LSTM(batch_first=True).
 *
 * This file only checks operands, computes output shapes and dispatches.
 * Kernels receive normalised parameters: in conv params a stride, dilation
 * or groups of 0 means 1 (so a zero-initialised struct is a plain conv),
 * and a NULL params pointer means all defaults. */
#include <string.h>

#include "backend.h"

static bool weight_type_ok(enum dtype t)
{
    return t == TYPE_F32 || t == TYPE_F16 || t == TYPE_BF16;
}

/* x must be F32 with ndim in [lo, hi]. */
static bool check_act(struct arena *a, const char *op, const struct tensor *x, int lo, int hi)
{
    if (x->type != TYPE_F32 || x->ndim < lo || x->ndim > hi) {
        char s[64];
        arena_fail(a, CBX_ERR_INTERNAL, "%s: input %s %s, want f32 with %d..%d dims", op,
                   dtype_name(x->type), tensor_shape_str(x, s, sizeof s), lo, hi);
        return false;
    }
    return true;
}

/* b must be NULL or F32 [n]. */
static bool check_bias(struct arena *a, const char *op, const char *what,
                       const struct tensor *b, int64_t n)
{
    if (!b) return true;
    if (b->type != TYPE_F32 || b->ndim != 1 || b->ne[0] != n) {
        char s[64];
        arena_fail(a, CBX_ERR_INTERNAL, "%s: %s %s %s, want f32 [%lld]", op, what,
                   dtype_name(b->type), tensor_shape_str(b, s, sizeof s), (long long)n);
        return false;
    }
    return true;
}

static bool pad_ok(struct arena *a, const char *op, int64_t T, int left, int right,
                   enum pad_mode mode)
{
    if (left < 0 || right < 0) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: negative padding (%d, %d)", op, left, right);
        return false;
    }
    switch (mode) {
    case PAD_ZERO:
        return true;
    case PAD_REFLECT:
        /* torch: "Padding size should be less than the corresponding input dimension" */
        if (left >= T || right >= T) {
            arena_fail(a, CBX_ERR_INTERNAL,
                       "%s: reflect padding (%d, %d) needs both < input length %lld", op,
                       left, right, (long long)T);
            return false;
        }
        return true;
    case PAD_REPLICATE:
        if (T < 1 && (left > 0 || right > 0)) {
            arena_fail(a, CBX_ERR_INTERNAL, "%s: replicate padding of an empty input", op);
            return false;
        }
        return true;
    }
    arena_fail(a, CBX_ERR_INTERNAL, "%s: unknown pad mode %d", op, (int)mode);
    return false;
}

/* The checks both 1-d convs start with: 0 stride/dilation/groups mean 1;
 * x is [C, T] or [B, C, T]; w is a float [., ., K] weight (layout names
 * its dims for the message). sx, sw (64 bytes) receive the shapes. */
static bool conv_operands(struct arena *a, const char *op, const struct tensor *x, const struct tensor *w,
                          const char *layout, int *stride, int *dilation, int *groups, char *sx, char *sw)
{
    if (*stride == 0) *stride = 1;
    if (*dilation == 0) *dilation = 1;
    if (*groups == 0) *groups = 1;
    if (!check_act(a, op, x, 2, 3)) return false;
    tensor_shape_str(x, sx, 64);
    tensor_shape_str(w, sw, 64);
    if (!weight_type_ok(w->type) || w->ndim != 3) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: weight %s %s, want f32/f16/bf16 %s", op, dtype_name(w->type), sw,
                   layout);
        return false;
    }
    return true;
}

/* The F32 output of a conv of x: [B,] cout, tout. */
static struct tensor *conv_out(struct arena *a, const struct tensor *x, int64_t cout, int64_t tout)
{
    int64_t ne[3];
    int nd = x->ndim;
    if (nd == 3) ne[0] = x->ne[0];
    ne[nd - 2] = cout;
    ne[nd - 1] = tout;
    return arena_tensor(a, TYPE_F32, nd, ne);
}

struct tensor *op_conv1d(struct arena *a, const struct tensor *x, const struct tensor *w,
                         const struct tensor *b, const struct conv1d_params *p)
{
    static const char op[] = "op_conv1d";
    if (!x || !w) return NULL;
    struct conv1d_params q = {0};
    if (p) q = *p;
    char sx[64], sw[64];
    if (!conv_operands(a, op, x, w, "[Cout, Cin/groups, K]", &q.stride, &q.dilation, &q.groups, sx, sw))
        return NULL;
    if (q.stride < 0 || q.dilation < 0 || q.groups < 0) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: stride %d, dilation %d, groups %d must be >= 1", op,
                   q.stride, q.dilation, q.groups);
        return NULL;
    }
    int64_t cin = x->ne[x->ndim - 2], T = x->ne[x->ndim - 1];
    int64_t cout = w->ne[0], K = w->ne[2];
    if (cin % q.groups || cout % q.groups || w->ne[1] != cin / q.groups || K < 1 || T < 1) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: input %s does not fit weight %s with groups %d", op,
                   sx, sw, q.groups);
        return NULL;
    }
    if (!check_bias(a, op, "bias", b, cout)) return NULL;
    if (!pad_ok(a, op, T, q.pad_left, q.pad_right, q.pad_mode)) return NULL;
    int64_t span = (int64_t)q.dilation * (K - 1) + 1;
    int64_t tp = T + q.pad_left + q.pad_right;
    if (tp < span) {
        arena_fail(a, CBX_ERR_INTERNAL,
                   "%s: kernel span %lld (K %lld, dilation %d) longer than padded input %lld (%s)",
                   op, (long long)span, (long long)K, q.dilation, (long long)tp, sx);
        return NULL;
    }
    int64_t tout = (tp - span) / q.stride + 1;
    KERNEL(a, conv1d);
    struct tensor *out = conv_out(a, x, cout, tout);
    if (!out) return NULL;
    be_->k.conv1d(a, out, x, w, b, &q);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_conv_transpose1d(struct arena *a, const struct tensor *x,
                                   const struct tensor *w, const struct tensor *b,
                                   const struct conv_transpose1d_params *p)
{
    static const char op[] = "op_conv_transpose1d";
    if (!x || !w) return NULL;
    struct conv_transpose1d_params q = {0};
    if (p) q = *p;
    char sx[64], sw[64];
    if (!conv_operands(a, op, x, w, "[Cin, Cout/groups, K]", &q.stride, &q.dilation, &q.groups, sx, sw))
        return NULL;
    if (q.stride < 0 || q.dilation < 0 || q.groups < 0 || q.padding < 0 || q.output_padding < 0) {
        arena_fail(a, CBX_ERR_INTERNAL,
                   "%s: stride %d, dilation %d, groups %d, padding %d, output_padding %d out of range",
                   op, q.stride, q.dilation, q.groups, q.padding, q.output_padding);
        return NULL;
    }
    /* torch: "output padding must be smaller than either stride or dilation" */
    if (q.output_padding >= q.stride && q.output_padding >= q.dilation) {
        arena_fail(a, CBX_ERR_INTERNAL,
                   "%s: output_padding %d must be smaller than stride %d or dilation %d", op,
                   q.output_padding, q.stride, q.dilation);
        return NULL;
    }
    int64_t cin = x->ne[x->ndim - 2], T = x->ne[x->ndim - 1];
    int64_t K = w->ne[2], cout = w->ne[1] * q.groups;
    if (w->ne[0] != cin || cin % q.groups || K < 1 || T < 1) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: input %s does not fit weight %s with groups %d", op,
                   sx, sw, q.groups);
        return NULL;
    }
    if (!check_bias(a, op, "bias", b, cout)) return NULL;
    int64_t tout = (T - 1) * q.stride - 2 * (int64_t)q.padding + (int64_t)q.dilation * (K - 1) +
                   q.output_padding + 1;
    if (tout < 1) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: output length %lld < 1 (input %s, weight %s)", op,
                   (long long)tout, sx, sw);
        return NULL;
    }
    KERNEL(a, conv_transpose1d);
    struct tensor *out = conv_out(a, x, cout, tout);
    if (!out) return NULL;
    be_->k.conv_transpose1d(a, out, x, w, b, &q);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_pad1d(struct arena *a, const struct tensor *x, int left, int right,
                        enum pad_mode mode, float value)
{
    static const char op[] = "op_pad1d";
    if (!x) return NULL;
    if (!check_act(a, op, x, 1, TENSOR_MAX_DIMS)) return NULL;
    if (!pad_ok(a, op, x->ne[x->ndim - 1], left, right, mode)) return NULL;
    KERNEL(a, pad1d);
    int64_t ne[TENSOR_MAX_DIMS];
    memcpy(ne, x->ne, sizeof ne);
    ne[x->ndim - 1] += (int64_t)left + right;
    struct tensor *out = arena_tensor(a, TYPE_F32, x->ndim, ne);
    if (!out) return NULL;
    be_->k.pad1d(a, out, x, left, right, mode, value);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_upsample_nearest(struct arena *a, const struct tensor *x, int factor)
{
    static const char op[] = "op_upsample_nearest";
    if (!x) return NULL;
    if (!check_act(a, op, x, 1, TENSOR_MAX_DIMS)) return NULL;
    if (factor < 1) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: factor %d must be >= 1", op, factor);
        return NULL;
    }
    KERNEL(a, upsample_nearest);
    int64_t ne[TENSOR_MAX_DIMS];
    memcpy(ne, x->ne, sizeof ne);
    ne[x->ndim - 1] *= factor;
    struct tensor *out = arena_tensor(a, TYPE_F32, x->ndim, ne);
    if (!out) return NULL;
    be_->k.upsample_nearest(a, out, x, factor);
    return arena_status(a) == CBX_OK ? out : NULL;
}

/* h0/c0: NULL, [B, H] or torch's [1, B, H]; returns a [B, H] descriptor. */
static bool check_state(struct arena *a, const char *what, const struct tensor *s,
                        int64_t B, int64_t H, struct tensor *view)
{
    if (!s) return true;
    bool ok = s->type == TYPE_F32 &&
              ((s->ndim == 2 && s->ne[0] == B && s->ne[1] == H) ||
               (s->ndim == 3 && s->ne[0] == 1 && s->ne[1] == B && s->ne[2] == H));
    if (!ok) {
        char ss[64];
        arena_fail(a, CBX_ERR_INTERNAL, "op_lstm: %s %s %s, want f32 [%lld, %lld]", what,
                   dtype_name(s->type), tensor_shape_str(s, ss, sizeof ss), (long long)B,
                   (long long)H);
        return false;
    }
    *view = *s;
    if (s->ndim == 3) {
        view->ndim = 2;
        view->ne[0] = s->ne[1];
        view->ne[1] = s->ne[2];
        view->nb[0] = s->nb[1];
        view->nb[1] = s->nb[2];
        view->ne[2] = view->nb[2] = 0;
    }
    return true;
}

struct tensor *op_lstm(struct arena *a, const struct tensor *x, const struct tensor *w_ih,
                       const struct tensor *w_hh, const struct tensor *b_ih,
                       const struct tensor *b_hh, const struct tensor *h0,
                       const struct tensor *c0, struct tensor **h_n, struct tensor **c_n)
{
    static const char op[] = "op_lstm";
    if (h_n) *h_n = NULL;
    if (c_n) *c_n = NULL;
    if (!x || !w_ih || !w_hh) return NULL;
    if (!check_act(a, op, x, 3, 3)) return NULL;
    int64_t B = x->ne[0], T = x->ne[1], In = x->ne[2];
    int64_t H = w_hh->ndim == 2 ? w_hh->ne[1] : -1;
    char sx[64], s1[64], s2[64];
    tensor_shape_str(x, sx, sizeof sx);
    tensor_shape_str(w_ih, s1, sizeof s1);
    tensor_shape_str(w_hh, s2, sizeof s2);
    if (!weight_type_ok(w_ih->type) || !weight_type_ok(w_hh->type) || w_ih->ndim != 2 ||
        w_hh->ndim != 2 || H < 1 || w_hh->ne[0] != 4 * H || w_ih->ne[0] != 4 * H ||
        w_ih->ne[1] != In) {
        arena_fail(a, CBX_ERR_INTERNAL,
                   "%s: x %s, w_ih %s %s, w_hh %s %s do not fit (want w_ih [4H, In], w_hh [4H, H], f32/f16/bf16)",
                   op, sx, dtype_name(w_ih->type), s1, dtype_name(w_hh->type), s2);
        return NULL;
    }
    if (!check_bias(a, op, "b_ih", b_ih, 4 * H) || !check_bias(a, op, "b_hh", b_hh, 4 * H))
        return NULL;
    struct tensor h0v, c0v;
    if (!check_state(a, "h0", h0, B, H, &h0v) || !check_state(a, "c0", c0, B, H, &c0v))
        return NULL;
    KERNEL(a, lstm);
    int64_t ne[3] = {B, T, H};
    struct tensor *out = arena_tensor(a, TYPE_F32, 3, ne);
    struct tensor *hn = NULL, *cn = NULL;
    if (h_n) hn = arena_tensor(a, TYPE_F32, 2, (int64_t[]){B, H});
    if (c_n) cn = arena_tensor(a, TYPE_F32, 2, (int64_t[]){B, H});
    if (!out || (h_n && !hn) || (c_n && !cn)) return NULL;
    be_->k.lstm(a, out, hn, cn, x, w_ih, w_hh, b_ih, b_hh, h0 ? &h0v : NULL, c0 ? &c0v : NULL);
    if (arena_status(a) != CBX_OK) return NULL;
    if (h_n) *h_n = hn;
    if (c_n) *c_n = cn;
    return out;
}
