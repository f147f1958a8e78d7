/* ops_conv2d.c - 2-D convolution op (see ops.h, op_conv2d).
 *
 * Semantics of torch.nn.functional.conv2d with zero padding given per
 * side as the symmetric (pad_h, pad_w) of nn.Conv2d(padding=(ph, pw)):
 * out[b, co, i, j] = bias[co] + sum over ci in co's group, kh, kw of
 *   w[co, ci, kh, kw] * x[b, g*Cin_g + ci, i*sh - ph + kh*dh, j*sw - pw + kw*dw]
 * (x read as 0 outside the image). Output size per spatial dim:
 * (L + 2*pad - dilation*(K-1) - 1) / stride + 1.
 *
 * This file only checks operands, computes the output shape and
 * dispatches; kernels get parameters with 0 stride/dilation/groups
 * normalised to 1 (a zero-initialised struct is a plain conv). */
#include "backend.h"

struct tensor *op_conv2d(struct arena *a, const struct tensor *x, const struct tensor *w,
                         const struct tensor *b, const struct conv2d_params *p)
{
    static const char op[] = "op_conv2d";
    if (!x || !w) return NULL;
    struct conv2d_params q = {0};
    if (p) q = *p;
    if (q.stride_h == 0) q.stride_h = 1;
    if (q.stride_w == 0) q.stride_w = 1;
    if (q.dilation_h == 0) q.dilation_h = 1;
    if (q.dilation_w == 0) q.dilation_w = 1;
    if (q.groups == 0) q.groups = 1;
    char sx[64], sw[64];
    tensor_shape_str(x, sx, sizeof sx);
    tensor_shape_str(w, sw, sizeof sw);
    if (x->type != TYPE_F32 || x->ndim < 3 || x->ndim > 4) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: input %s %s, want f32 [B, Cin, H, W] or [Cin, H, W]",
                   op, dtype_name(x->type), sx);
        return NULL;
    }
    if ((w->type != TYPE_F32 && w->type != TYPE_F16 && w->type != TYPE_BF16) || w->ndim != 4) {
        arena_fail(a, CBX_ERR_INTERNAL,
                   "%s: weight %s %s, want f32/f16/bf16 [Cout, Cin/groups, KH, KW]", op,
                   dtype_name(w->type), sw);
        return NULL;
    }
    if (q.stride_h < 0 || q.stride_w < 0 || q.dilation_h < 0 || q.dilation_w < 0 ||
        q.groups < 0 || q.pad_h < 0 || q.pad_w < 0) {
        arena_fail(a, CBX_ERR_INTERNAL,
                   "%s: stride (%d, %d), dilation (%d, %d), groups %d must be >= 1 and "
                   "padding (%d, %d) >= 0",
                   op, q.stride_h, q.stride_w, q.dilation_h, q.dilation_w, q.groups, q.pad_h,
                   q.pad_w);
        return NULL;
    }
    int nd = x->ndim;
    int64_t cin = x->ne[nd - 3], H = x->ne[nd - 2], W = x->ne[nd - 1];
    int64_t cout = w->ne[0], KH = w->ne[2], KW = w->ne[3];
    if (cin % q.groups || cout % q.groups || w->ne[1] != cin / q.groups || KH < 1 || KW < 1 ||
        H < 1 || W < 1) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: input %s does not fit weight %s with groups %d", op,
                   sx, sw, q.groups);
        return NULL;
    }
    if (b && (b->type != TYPE_F32 || b->ndim != 1 || b->ne[0] != cout)) {
        char sb[64];
        arena_fail(a, CBX_ERR_INTERNAL, "%s: bias %s %s, want f32 [%lld]", op,
                   dtype_name(b->type), tensor_shape_str(b, sb, sizeof sb), (long long)cout);
        return NULL;
    }
    int64_t span_h = (int64_t)q.dilation_h * (KH - 1) + 1, span_w = (int64_t)q.dilation_w * (KW - 1) + 1;
    int64_t hp = H + 2 * (int64_t)q.pad_h, wp = W + 2 * (int64_t)q.pad_w;
    if (hp < span_h || wp < span_w) {
        arena_fail(a, CBX_ERR_INTERNAL,
                   "%s: kernel span (%lld, %lld) larger than padded input (%lld, %lld) (%s)", op,
                   (long long)span_h, (long long)span_w, (long long)hp, (long long)wp, sx);
        return NULL;
    }
    const struct backend *be = arena_backend(a);
    if (!be->k.conv2d) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "conv2d: backend %s has no kernel", be->name);
        return NULL;
    }
    int64_t ne[4];
    if (nd == 4) ne[0] = x->ne[0];
    ne[nd - 3] = cout;
    ne[nd - 2] = (hp - span_h) / q.stride_h + 1;
    ne[nd - 1] = (wp - span_w) / q.stride_w + 1;
    struct tensor *out = arena_tensor(a, TYPE_F32, nd, ne);
    if (!out) return NULL;
    be->k.conv2d(a, out, x, w, b, &q);
    return arena_status(a) == CBX_OK ? out : NULL;
}
