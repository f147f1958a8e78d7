/* ops_spectral.c - op_stft / op_istft: operand checks and output shapes
 * (see ops.h). Semantics are torch.stft / torch.istft of torch 2.x with
 * return_complex=True, onesided=True; torch's defaults apply to unset
 * sizes (win_length <= 0 -> n_fft, hop <= 0 -> n_fft / 4).
 *
 * stft:  x[B, L] or [L] -> [B, n_fft/2+1, frames, 2] or [n_fft/2+1, frames, 2],
 *        L_padded = L + 2*(n_fft/2) when center, else L;
 *        frames = 1 + (L_padded - n_fft) / hop.
 * istft: spec[B, n_fft/2+1, frames, 2] or [n_fft/2+1, frames, 2] -> [B, length]
 *        or [length]; natural length = n_fft + hop*(frames-1) - 2*(n_fft/2)
 *        when center (hop*(frames-1) for even n_fft), else
 *        n_fft + hop*(frames-1). A requested length beyond the overlap-added
 *        signal is zero-filled at the end, as torch does. The kernel fails
 *        when the window-square envelope drops below 1e-11 inside the kept
 *        range (torch's NOLA check). */
#include "backend.h"

/* Resolve torch's defaults and check the sizes shared by both ops. */
static bool resolve(struct arena *a, const char *op, const struct stft_params *p,
                    const struct tensor *window, struct stft_params *q)
{
    if (!p) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: NULL params", op);
        return false;
    }
    *q = *p;
    if (q->win_length <= 0) q->win_length = q->n_fft;
    if (q->hop <= 0) q->hop = q->n_fft / 4;
    if (q->n_fft < 2 || q->hop < 1 || q->win_length > q->n_fft) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: n_fft %d, hop %d, win_length %d "
                   "(need n_fft >= 2, hop >= 1, win_length <= n_fft)", op,
                   p->n_fft, p->hop, p->win_length);
        return false;
    }
    if (q->pad_mode != PAD_ZERO && q->pad_mode != PAD_REFLECT &&
        q->pad_mode != PAD_REPLICATE) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: unknown pad mode %d", op, (int)q->pad_mode);
        return false;
    }
    if (window && (window->type != TYPE_F32 || window->ndim != 1 ||
                   window->ne[0] != q->win_length)) {
        char s[64];
        arena_fail(a, CBX_ERR_INTERNAL, "%s: window %s %s, want f32 [%d] (win_length)", op,
                   dtype_name(window->type), tensor_shape_str(window, s, sizeof s),
                   q->win_length);
        return false;
    }
    return true;
}

struct tensor *op_stft(struct arena *a, const struct tensor *x,
                       const struct tensor *window, const struct stft_params *p)
{
    if (!x) return NULL;
    struct stft_params q;
    if (!resolve(a, "op_stft", p, window, &q)) return NULL;
    char s[64];
    if (x->type != TYPE_F32 || x->ndim < 1 || x->ndim > 2) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_stft: x %s %s, want f32 [B, L] or [L]",
                   dtype_name(x->type), tensor_shape_str(x, s, sizeof s));
        return NULL;
    }
    int64_t L = x->ne[x->ndim - 1];
    int64_t pad = q.center ? q.n_fft / 2 : 0;
    if (q.center && q.pad_mode == PAD_REFLECT && pad >= L) {
        arena_fail(a, CBX_ERR_INVALID_ARG, "op_stft: reflect padding %lld needs more than "
                   "%lld samples", (long long)pad, (long long)L);
        return NULL;
    }
    if (q.center && q.pad_mode == PAD_REPLICATE && L < 1) {
        arena_fail(a, CBX_ERR_INVALID_ARG, "op_stft: replicate padding of an empty signal");
        return NULL;
    }
    int64_t Lp = L + 2 * pad;
    if (Lp < q.n_fft) {
        arena_fail(a, CBX_ERR_INVALID_ARG, "op_stft: %lld samples (%lld padded) shorter than "
                   "n_fft %d", (long long)L, (long long)Lp, q.n_fft);
        return NULL;
    }
    KERNEL(a, stft);
    int64_t frames = 1 + (Lp - q.n_fft) / q.hop;
    int64_t ne[4] = {x->ne[0], q.n_fft / 2 + 1, frames, 2};
    struct tensor *out = x->ndim == 2 ? arena_tensor(a, TYPE_F32, 4, ne)
                                      : arena_tensor(a, TYPE_F32, 3, ne + 1);
    if (!out) return NULL;
    be_->k.stft(a, out, x, window, &q);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_istft(struct arena *a, const struct tensor *spec,
                        const struct tensor *window, const struct stft_params *p,
                        int64_t length)
{
    if (!spec) return NULL;
    struct stft_params q;
    if (!resolve(a, "op_istft", p, window, &q)) return NULL;
    char s[64];
    int nd = spec->ndim;
    if (spec->type != TYPE_F32 || nd < 3 || nd > 4 || spec->ne[nd - 1] != 2 ||
        spec->ne[nd - 3] != q.n_fft / 2 + 1 || spec->ne[nd - 2] < 1) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_istft: spec %s %s, want f32 [B, %d, frames, 2] "
                   "or [%d, frames, 2] (n_fft %d)", dtype_name(spec->type),
                   tensor_shape_str(spec, s, sizeof s), q.n_fft / 2 + 1, q.n_fft / 2 + 1,
                   q.n_fft);
        return NULL;
    }
    KERNEL(a, istft);
    int64_t frames = spec->ne[nd - 2];
    int64_t full = q.n_fft + q.hop * (frames - 1);
    if (length <= 0) length = q.center ? full - 2 * (q.n_fft / 2) : full;
    if (length <= 0) {
        arena_fail(a, CBX_ERR_INVALID_ARG, "op_istft: %lld frames give no samples",
                   (long long)frames);
        return NULL;
    }
    int64_t ne[2] = {spec->ne[0], length};
    struct tensor *out = nd == 4 ? arena_tensor(a, TYPE_F32, 2, ne)
                                 : arena_tensor(a, TYPE_F32, 1, ne + 1);
    if (!out) return NULL;
    be_->k.istft(a, out, spec, window, &q);
    return arena_status(a) == CBX_OK ? out : NULL;
}
