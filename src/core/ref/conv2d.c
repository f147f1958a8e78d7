/* conv2d.c - ref kernel of the conv2d group (see ops.h, op_conv2d).
 *
 * The F.conv2d definition as a naive loop, one output element at a time,
 * accumulating in double, reading every operand through its strides; the
 * reference the cpu kernel is tested against. */
#include "ref.h"

/* Element [b, c, h, w] of a [B, C, H, W] or [C, H, W] tensor. */
static char *at(const struct tensor *t, int64_t b, int64_t c, int64_t h, int64_t w)
{
    int n = t->ndim;
    char *p = (char *)t->data + c * t->nb[n - 3] + h * t->nb[n - 2] + w * t->nb[n - 1];
    if (n == 4) p += b * t->nb[0];
    return p;
}

static void conv2d(struct arena *a, struct tensor *out, const struct tensor *x,
                   const struct tensor *w, const struct tensor *b,
                   const struct conv2d_params *p)
{
    (void)a;
    int n = x->ndim;
    int64_t B = n == 4 ? x->ne[0] : 1, H = x->ne[n - 2], W = x->ne[n - 1];
    int64_t cout = w->ne[0], cin_g = w->ne[1], KH = w->ne[2], KW = w->ne[3];
    int64_t cout_g = cout / p->groups, hout = out->ne[n - 2], wout = out->ne[n - 1];
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t co = 0; co < cout; co++) {
            int64_t g = co / cout_g;
            for (int64_t i = 0; i < hout; i++)
                for (int64_t j = 0; j < wout; j++) {
                    double acc = b ? ref_ld(b, (int64_t[]){co}) : 0.0;
                    for (int64_t ci = 0; ci < cin_g; ci++)
                        for (int64_t kh = 0; kh < KH; kh++) {
                            int64_t h = i * p->stride_h - p->pad_h + kh * p->dilation_h;
                            if (h < 0 || h >= H) continue;
                            for (int64_t kw = 0; kw < KW; kw++) {
                                int64_t ww = j * p->stride_w - p->pad_w + kw * p->dilation_w;
                                if (ww < 0 || ww >= W) continue;
                                float xv = *(const float *)at(x, bi, g * cin_g + ci, h, ww);
                                acc += (double)ref_ld(w, (int64_t[]){co, ci, kh, kw}) * xv;
                            }
                        }
                    *(float *)at(out, bi, co, i, j) = (float)acc;
                }
        }
}

void ref_register_conv2d(struct kernels *k) { k->conv2d = conv2d; }
