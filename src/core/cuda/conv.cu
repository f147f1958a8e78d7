/* conv.cu - CUDA kernels of the conv and conv2d groups (see ops.h,
 * ops_conv.c, ops_conv2d.c): conv1d, conv_transpose1d, pad1d,
 * upsample_nearest, lstm, conv2d.
 *
 * conv1d is im2col + GEMM: the padded input windows of each group are
 * unfolded into a [R = Cin/groups * K, t] column matrix (T in chunks that
 * keep it under COL_CHUNK_BYTES) and one strided-batched SGEMM over the
 * groups multiplies it with the F32 weight. conv_transpose1d is one GEMM
 * per batch row (W^T x, strided-batched over the groups) and a gather of
 * the overlapping taps; conv2d gathers each output element directly (F32
 * accumulation). The LSTM
 * projects every input step with one GEMM (x @ W_ih^T + b_ih), then runs
 * the recurrence in one block per batch row with h, c and the gates in
 * shared memory and W_hh transposed to F32 so the gate rows read
 * coalesced. Semantics are ref/conv.c's and ref/conv2d.c's. */
#include <math.h>

#include "cuda_common.h"

#define COL_CHUNK_BYTES ((size_t)64 << 20)

/* index into the unpadded signal of length T for padded position pos, or
 * -1 for a zero / constant (ref/conv.c pad_index) */
__device__ static inline int64_t pad_index(int64_t pos, int64_t T, int mode)
{
    if (pos >= 0 && pos < T) return pos;
    switch (mode) {
    case PAD_REFLECT: return pos < 0 ? -pos : 2 * (T - 1) - pos;
    case PAD_REPLICATE: return pos < 0 ? 0 : T - 1;
    default: return -1;
    }
}

/* ---- conv1d -------------------------------------------------------------- */

/* col[g][r][t'] for r = ci * K + k, t' < tc (output times t0 + t'): rows
 * (g, r) on the grid's y, times on x, so a thread divides once per row */
__global__ static void k_im2col(float *col, struct tv x, int64_t bi, int64_t G, int64_t cin_g,
                                int64_t K, int64_t t0, int64_t tc, int stride, int dilation,
                                int pad_left, int mode)
{
    const int64_t R = cin_g * K, T = x.ne[3];
    for (int64_t gr = blockIdx.y; gr < G * R; gr += gridDim.y) {
        const int64_t g = gr / R, r = gr - g * R, ci = r / K, k = r - ci * K;
        const char *xr = x.p + bi * x.nb[1] + (g * cin_g + ci) * x.nb[2];
        const int64_t p0 = t0 * stride - pad_left + k * dilation;
        float *cr = col + gr * tc;
        for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < tc;
             t += (int64_t)gridDim.x * blockDim.x) {
            const int64_t src = pad_index(p0 + t * stride, T, mode);
            cr[t] = src < 0 ? 0.0f : *(const float *)(xr + src * x.nb[3]);
        }
    }
}

/* out[b, c, t] += bias[c] over a contiguous [B, C, T] */
__global__ static void k_bias_ch(float *out, int64_t C, int64_t T, const char *b, int64_t nb,
                                 int64_t n)
{
    CU_FOR(e, n) {
        int64_t c, t;
        cu_divmod(cu_divmod(e, T, &t), C, &c);
        out[e] += *(const float *)(b + c * nb);
    }
}

static void bias_ch(struct arena *a, struct tensor *out, const struct tensor *b)
{
    if (!b) return;
    const int64_t n = tensor_nelements(out), T = out->ne[out->ndim - 1],
                  C = out->ne[out->ndim - 2];
    k_bias_ch<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cuda_of(a)->st>>>(
        (float *)out->data, C, T, (const char *)b->data, b->nb[0], n);
    cu_launched(a, "conv bias");
}

static void cuda_conv1d(struct arena *a, struct tensor *out, const struct tensor *x,
                        const struct tensor *w, const struct tensor *b,
                        const struct conv1d_params *p)
{
    const struct tv xv = tv_of(x); /* [1, B, Cin, T] */
    const int64_t B = xv.ne[1], cout = w->ne[0], cin_g = w->ne[1], K = w->ne[2];
    const int64_t G = p->groups, cout_g = cout / G, R = cin_g * K;
    const int64_t tout = out->ne[out->ndim - 1];
    if (tensor_nelements(out) == 0) return;
    const float *wf = cuda_f32_contig(a, w); /* [Cout, R] */
    if (!wf) return;
    int64_t tc = (int64_t)(COL_CHUNK_BYTES / ((size_t)(G * R) * 4));
    if (tc < 1) tc = 1;
    if (tc > tout) tc = tout;
    float *col = (float *)arena_alloc(a, (size_t)(G * R * tc) * 4);
    if (!col) return;
    if (tout > INT32_MAX || R > INT32_MAX || cout_g > INT32_MAX || G > INT32_MAX) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "conv1d: sizes exceed 32 bits");
        return;
    }
    struct cuda_backend *cb = cuda_of(a);
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t t0 = 0; t0 < tout; t0 += tc) {
            const int64_t c = tout - t0 < tc ? tout - t0 : tc;
            /* about 4096 blocks, each looping over rows: many rows of a few
             * hundred times are not each a block of their own */
            const unsigned gx = cu_blocks(c, CU_THREADS);
            const int64_t gy = G * R < 4096 / (int64_t)gx ? G * R : 4096 / (int64_t)gx;
            const dim3 grid(gx, (unsigned)(gy < 1 ? 1 : gy));
            k_im2col<<<grid, CU_THREADS, 0, cb->st>>>(
                col, xv, bi, G, cin_g, K, t0, c, p->stride, p->dilation, p->pad_left,
                (int)p->pad_mode);
            if (!cu_launched(a, "conv1d im2col")) return;
            float *o = (float *)out->data + bi * cout * tout + t0;
            if (!cublas_launched(a, cu_gemm(a, CUBLAS_OP_N, CUBLAS_OP_N, (int)c, (int)cout_g, (int)R, col, (int)c,
                                            R * c, wf, (int)R, cout_g * R, 0.0f, o, (int)tout, cout_g * tout,
                                            (int)G),
                                 "conv1d sgemm"))
                return;
        }
    bias_ch(a, out, b);
}

/* ---- conv_transpose1d ------------------------------------------------------- */

/* GEMM then gather: per batch row and group, Y[co * K + k][s] = sum over ci
 * in the group of w[ci, col, k] * x[ci, s] (one strided-batched SGEMM over
 * the groups), then out[co, t] = bias[co] + sum of Y[co * K + k][s] over the
 * (k, s) with s * stride - padding + k * dilation = t, in increasing k as
 * the reference. */
__global__ static void k_conv_t1d_gather(float *out, const float *Y, int64_t cout, int64_t K,
                                         int64_t T, int64_t tout, int stride, int padding,
                                         int dilation, const char *bias, int64_t bias_nb)
{
    CU_FOR(e, cout * tout) {
        const int64_t t = e % tout, co = e / tout;
        const float *yr = Y + co * K * T;
        float acc = bias ? *(const float *)(bias + co * bias_nb) : 0.0f;
        for (int64_t k = 0; k < K; k++) {
            const int64_t num = t + padding - k * dilation;
            if (num < 0 || num % stride) continue;
            const int64_t s = num / stride;
            if (s >= T) continue;
            acc += yr[k * T + s];
        }
        out[e] = acc;
    }
}

static void cuda_conv_transpose1d(struct arena *a, struct tensor *out, const struct tensor *x,
                                  const struct tensor *w, const struct tensor *b,
                                  const struct conv_transpose1d_params *p)
{
    if (tensor_nelements(out) == 0) return;
    const int64_t cin = w->ne[0], cout_g = w->ne[1], K = w->ne[2], G = p->groups;
    const int64_t cin_g = cin / G, cout = cout_g * G, R2 = cout_g * K;
    const int64_t B = x->ndim == 3 ? x->ne[0] : 1, T = x->ne[x->ndim - 1];
    const int64_t tout = out->ne[out->ndim - 1];
    if (T > INT32_MAX || R2 > INT32_MAX || cin_g > INT32_MAX || G > INT32_MAX) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "conv_transpose1d: sizes exceed 32 bits");
        return;
    }
    const float *xc = cuda_f32_contig(a, x); /* [B, Cin, T] */
    const float *wf = cuda_f32_contig(a, w); /* [Cin, cout_g * K] */
    float *Y = (float *)arena_alloc(a, (size_t)(cout * K) * (size_t)T * 4);
    if (!xc || !wf || !Y) return;
    struct cuda_backend *cb = cuda_of(a);
    for (int64_t bi = 0; bi < B; bi++) {
        if (!cublas_launched(a, cu_gemm(a, CUBLAS_OP_N, CUBLAS_OP_T, (int)T, (int)R2, (int)cin_g, xc + bi * cin * T,
                                        (int)T, cin_g * T, wf, (int)R2, cin_g * R2, 0.0f, Y, (int)T, R2 * T, (int)G),
                             "conv_transpose1d sgemm"))
            return;
        k_conv_t1d_gather<<<cu_blocks(cout * tout, CU_THREADS), CU_THREADS, 0, cb->st>>>(
            (float *)out->data + bi * cout * tout, Y, cout, K, T, tout, p->stride, p->padding,
            p->dilation, b ? (const char *)b->data : NULL, b ? b->nb[0] : 0);
        if (!cu_launched(a, "conv_transpose1d gather")) return;
    }
}

/* ---- pad1d, upsample_nearest ----------------------------------------------------- */

__global__ static void k_pad1d(float *out, struct tv x, int64_t tout, int left, int mode,
                               float value, int64_t n)
{
    CU_FOR(e, n) {
        const int64_t t = e % tout, r = e / tout;
        const int64_t src = pad_index(t - left, x.ne[3], mode);
        out[e] = src < 0 ? value : *(const float *)(x.p + tv_row_off(x, r) + src * x.nb[3]);
    }
}

static void cuda_pad1d(struct arena *a, struct tensor *out, const struct tensor *x, int left,
                       int right, enum pad_mode mode, float value)
{
    (void)right;
    const int64_t n = tensor_nelements(out);
    if (n == 0) return;
    k_pad1d<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cuda_of(a)->st>>>(
        (float *)out->data, tv_of(x), out->ne[out->ndim - 1], left, (int)mode, value, n);
    cu_launched(a, "pad1d");
}

__global__ static void k_upsample(float *out, struct tv x, int64_t tout, int factor, float scale,
                                  int64_t n)
{
    CU_FOR(e, n) {
        const int64_t t = e % tout, r = e / tout, T = x.ne[3];
        int64_t s;
        if (factor == 1) s = t;
        else if (factor == 2) s = t >> 1;
        else {
            s = (int64_t)floorf((float)t * scale);
            if (s > T - 1) s = T - 1;
        }
        out[e] = *(const float *)(x.p + tv_row_off(x, r) + s * x.nb[3]);
    }
}

static void cuda_upsample_nearest(struct arena *a, struct tensor *out, const struct tensor *x,
                                  int factor)
{
    const int64_t n = tensor_nelements(out);
    if (n == 0) return;
    k_upsample<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cuda_of(a)->st>>>(
        (float *)out->data, tv_of(x), out->ne[out->ndim - 1], factor, (float)(1.0 / factor), n);
    cu_launched(a, "upsample_nearest");
}

/* ---- lstm ------------------------------------------------------------------------------ */

/* w [R, C] (any type/strides) -> wt[C, R] F32 */
__global__ static void k_transpose_f32(float *wt, struct tv w, int64_t R, int64_t C)
{
    CU_FOR(e, R * C) {
        const int64_t c = e / R, r = e % R;
        wt[e] = d_ldf(w.type, w.p + r * w.nb[2] + c * w.nb[3]);
    }
}

__device__ static inline double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }

/* one block per batch row; xg [B, T, 4H] holds W_ih x_t + b_ih */
__global__ static void k_lstm(float *out, float *hn, float *cn, const float *xg,
                              const float *whh_t, const char *b_hh, int64_t b_hh_nb,
                              struct tv h0, struct tv c0, bool has_h0, bool has_c0, int64_t T,
                              int64_t H)
{
    extern __shared__ float sm[];
    float *h = sm, *c = h + H, *gate = c + H;
    const int64_t bi = blockIdx.x, G4 = 4 * H;
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
        h[j] = has_h0 ? *(const float *)(h0.p + bi * h0.nb[2] + j * h0.nb[3]) : 0.0f;
        c[j] = has_c0 ? *(const float *)(c0.p + bi * c0.nb[2] + j * c0.nb[3]) : 0.0f;
    }
    __syncthreads();
    for (int64_t t = 0; t < T; t++) {
        const float *xr = xg + (bi * T + t) * G4;
        for (int64_t r = threadIdx.x; r < G4; r += blockDim.x) {
            float s = xr[r];
            if (b_hh) s += *(const float *)(b_hh + r * b_hh_nb);
            float dot = 0;
            for (int64_t k = 0; k < H; k++) dot += whh_t[k * G4 + r] * h[k];
            gate[r] = s + dot;
        }
        __syncthreads();
        float *o = out + (bi * T + t) * H;
        for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
            const double ig = sigm(gate[j]), fg = sigm(gate[H + j]);
            const double gg = tanh((double)gate[2 * H + j]), og = sigm(gate[3 * H + j]);
            const double cj = fg * c[j] + ig * gg;
            c[j] = (float)cj;
            o[j] = (float)(og * tanh(cj));
        }
        __syncthreads();
        for (int64_t j = threadIdx.x; j < H; j += blockDim.x) h[j] = o[j];
        __syncthreads();
    }
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
        if (hn) hn[bi * H + j] = h[j];
        if (cn) cn[bi * H + j] = c[j];
    }
}

static void cuda_lstm(struct arena *a, struct tensor *out, struct tensor *h_n,
                      struct tensor *c_n, const struct tensor *x, const struct tensor *w_ih,
                      const struct tensor *w_hh, const struct tensor *b_ih,
                      const struct tensor *b_hh, const struct tensor *h0, const struct tensor *c0)
{
    const int64_t B = x->ne[0], T = x->ne[1], In = x->ne[2], H = w_hh->ne[1], G4 = 4 * H;
    if (B == 0) return;
    cudaStream_t st = cuda_of(a)->st;
    float *xg = (float *)arena_alloc(a, (size_t)(B * T * G4) * 4);
    float *wt = (float *)arena_alloc(a, (size_t)(G4 * H) * 4);
    if (!xg || !wt) return;
    if (T > 0) {
        const float *xc = cuda_f32_contig(a, x);
        if (!xc) return;
        cuda_linear_rows(a, xg, G4, xc, B * T, In, w_ih, b_ih);
        if (arena_status(a) != CBX_OK) return;
    }
    k_transpose_f32<<<cu_blocks(G4 * H, CU_THREADS), CU_THREADS, 0, st>>>(wt, tv_of(w_hh), G4, H);
    if (!cu_launched(a, "lstm weights")) return;
    const size_t smem = (size_t)(6 * H) * 4;
    if (smem > 48 * 1024 &&
        !cu_ok(a, cudaFuncSetAttribute(k_lstm, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
               "lstm shared memory"))
        return;
    if (B > INT32_MAX) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "lstm: batch %lld", (long long)B);
        return;
    }
    struct tv hv = h0 ? tv_of(h0) : tv_of(x), cv = c0 ? tv_of(c0) : tv_of(x);
    k_lstm<<<(unsigned)B, 512, smem, st>>>(
        (float *)out->data, h_n ? (float *)h_n->data : NULL, c_n ? (float *)c_n->data : NULL, xg,
        wt, b_hh ? (const char *)b_hh->data : NULL, b_hh ? b_hh->nb[0] : 0, hv, cv, h0 != NULL,
        c0 != NULL, T, H);
    cu_launched(a, "lstm");
}

/* ---- conv2d --------------------------------------------------------------------------- */

__global__ static void k_conv2d(float *out, struct tv x, struct tv w, int64_t cout,
                                int64_t hout, int64_t wout, struct conv2d_params p, int64_t n)
{
    const int64_t H = x.ne[2], W = x.ne[3], cin_g = w.ne[1], KH = w.ne[2], KW = w.ne[3];
    const int64_t cout_g = cout / p.groups;
    CU_FOR(e, n) {
        const int64_t j = e % wout, i = (e / wout) % hout, co = (e / (wout * hout)) % cout;
        const int64_t bi = e / (wout * hout * cout), g = co / cout_g;
        float acc = 0;
        for (int64_t ci = 0; ci < cin_g; ci++)
            for (int64_t kh = 0; kh < KH; kh++) {
                const int64_t h = i * p.stride_h - p.pad_h + kh * p.dilation_h;
                if (h < 0 || h >= H) continue;
                for (int64_t kw = 0; kw < KW; kw++) {
                    const int64_t ww = j * p.stride_w - p.pad_w + kw * p.dilation_w;
                    if (ww < 0 || ww >= W) continue;
                    const float xv = *(const float *)(x.p + bi * x.nb[0] +
                                                      (g * cin_g + ci) * x.nb[1] + h * x.nb[2] +
                                                      ww * x.nb[3]);
                    acc += d_ldf(w.type, w.p + co * w.nb[0] + ci * w.nb[1] + kh * w.nb[2] +
                                             kw * w.nb[3]) * xv;
                }
            }
        out[e] = acc;
    }
}

static void cuda_conv2d(struct arena *a, struct tensor *out, const struct tensor *x,
                        const struct tensor *w, const struct tensor *b,
                        const struct conv2d_params *p)
{
    const int64_t n = tensor_nelements(out);
    if (n == 0) return;
    const int nd = out->ndim;
    k_conv2d<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cuda_of(a)->st>>>(
        (float *)out->data, tv_of(x), tv_of(w), w->ne[0], out->ne[nd - 2], out->ne[nd - 1], *p, n);
    if (!cu_launched(a, "conv2d") || !b) return;
    /* bias per channel over [B, Cout, H*W] */
    const int64_t hw = out->ne[nd - 2] * out->ne[nd - 1];
    k_bias_ch<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cuda_of(a)->st>>>(
        (float *)out->data, w->ne[0], hw, (const char *)b->data, b->nb[0], n);
    cu_launched(a, "conv2d bias");
}

void cuda_register_conv(struct kernels *k)
{
    k->conv1d = cuda_conv1d;
    k->conv_transpose1d = cuda_conv_transpose1d;
    k->pad1d = cuda_pad1d;
    k->upsample_nearest = cuda_upsample_nearest;
    k->lstm = cuda_lstm;
    k->conv2d = cuda_conv2d;
}
