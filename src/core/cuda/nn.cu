/* nn.cu - CUDA kernels of the nn group (see ops.h, ops_nn.c): layer /
 * residual+layer / RMS / group norms, per-channel affine, softmax, fused
 * attention (prefill and decode, causal, bias, grouped-query, F32/F16/Q8_0
 * KV, probability export) and rotary embedding.
 *
 * As ref/nn.c: norm statistics and softmax sums in double, one block per
 * row (or group); rotary angles in float32 with the inverse frequencies
 * computed on the host by the same float code as the ref kernel.
 * Attention: many queries run flash style (k_attn_flash: 64 x 64 tiles,
 * online softmax in float registers; with the arena's BF16 hint and head
 * dim 64, k_attn_mma on BF16 tensor cores); otherwise one block per query row
 * (k_attention: scores in shared memory or global scratch for long keys,
 * F32 dot products, double softmax sum, the weighted sum of v split over
 * the block); a decode row over many keys is split over a cluster of 8
 * blocks taking chunks of 64 keys, block 0 combining them through
 * distributed shared memory (k_attn_decode, one launch; float softmax
 * parts, double combine). A query that sees no key gives zeros
 * (ops_nn.c, convention 2). */
#include <math.h>

#include <cooperative_groups.h>

#include "cuda_common.h"

namespace cg = cooperative_groups;

#define NN_THREADS 256

/* parameter vector element (F32/F16/BF16, stride nb) or the default */
struct pv {
    const char *p;
    int type;
    int64_t nb;
};
static inline struct pv pv_of(const struct tensor *t)
{
    struct pv v = {NULL, TYPE_F32, 0};
    if (t) {
        v.p = (const char *)t->data;
        v.type = (int)t->type;
        v.nb = t->nb[0];
    }
    return v;
}
__device__ static inline float pget(const struct pv &v, int64_t i)
{
    return d_ldf(v.type, v.p + i * v.nb);
}

/* block-wide sum and max (all threads get it; blockDim a multiple of 32,
 * sh at least blockDim / 32 entries): each warp reduces by shuffles, then
 * every thread adds the warps' results in warp order (the same order on
 * every thread and every run) */
__device__ static double block_sum(double v, double *sh)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    double r = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) r += sh[w];
    __syncthreads();
    return r;
}

__device__ static float block_max(float v, float *sh)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = sh[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) r = fmaxf(r, sh[w]);
    __syncthreads();
    return r;
}

static bool rows_fit(struct arena *a, int64_t rows, const char *what)
{
    if (rows <= INT32_MAX) return true;
    arena_fail(a, CBX_ERR_UNSUPPORTED, "%s: %lld rows", what, (long long)rows);
    return false;
}

/* ---- layer norm (and residual add + layer norm) ----------------------------- */

/* Rows up to NN_CACHE * blockDim long stay in registers (one load of
 * each element, all issued together); longer ones are read again. */
#define NN_CACHE 8

/* a norm's block: the fewest threads (64 to NN_THREADS) that hold its row
 * in registers, so short rows (S3Gen's 80 to 512) make small blocks, many
 * to an SM */
static unsigned nn_threads(int64_t n)
{
    unsigned t = 64;
    while (t < NN_THREADS && n > NN_CACHE * (int64_t)t) t *= 2;
    return t;
}
__global__ static void k_layer_norm(float *out, struct tv x, float *sum, struct tv r,
                                    struct pv g, struct pv b, float eps)
{
    __shared__ double sh[NN_THREADS / 32];
    const int64_t row = blockIdx.x, n = x.ne[3];
    const char *xr = x.p + tv_row_off(x, row);
    const char *rr = sum ? r.p + tv_row_off(r, row) : NULL;
    float *y = out + row * n;
    float *srow = sum ? sum + row * n : NULL; /* the (stored) sum row, for add_layer_norm */
    const bool cached = n <= NN_CACHE * (int64_t)blockDim.x;
    float c[NN_CACHE], gc[NN_CACHE], bc[NN_CACHE];
#define XV(i) (srow ? srow[i] : *(const float *)(xr + (i) * x.nb[3]))
    double acc = 0;
    if (cached) {
        /* the row, and the weight and bias it ends with, all loaded at once */
#pragma unroll
        for (int u = 0; u < NN_CACHE; u++) {
            const int64_t i = threadIdx.x + (int64_t)u * blockDim.x;
            c[u] = i < n ? *(const float *)(xr + i * x.nb[3]) : 0.0f;
            if (rr && i < n) c[u] += *(const float *)(rr + i * r.nb[3]);
            gc[u] = g.p && i < n ? pget(g, i) : 1.0f;
            bc[u] = b.p && i < n ? pget(b, i) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < NN_CACHE; u++) {
            const int64_t i = threadIdx.x + (int64_t)u * blockDim.x;
            if (i < n) {
                if (srow) srow[i] = c[u];
                acc += c[u];
            }
        }
    } else {
        if (srow) {
            for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
                srow[i] = *(const float *)(xr + i * x.nb[3]) + *(const float *)(rr + i * r.nb[3]);
            __syncthreads();
        }
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += XV(i);
    }
    const double mean = block_sum(acc, sh) / (double)n;
    acc = 0;
    if (cached) {
#pragma unroll
        for (int u = 0; u < NN_CACHE; u++) {
            const int64_t i = threadIdx.x + (int64_t)u * blockDim.x;
            const double d = c[u] - mean;
            if (i < n) acc += d * d;
        }
    } else {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            const double d = XV(i) - mean;
            acc += d * d;
        }
    }
    const double var = block_sum(acc, sh) / (double)n;
    const double rstd = 1.0 / sqrt(var + eps);
    if (cached) {
#pragma unroll
        for (int u = 0; u < NN_CACHE; u++) {
            const int64_t i = threadIdx.x + (int64_t)u * blockDim.x;
            if (i < n) {
                double v = (c[u] - mean) * rstd;
                if (g.p) v *= gc[u];
                if (b.p) v += bc[u];
                y[i] = (float)v;
            }
        }
    } else {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            double v = (XV(i) - mean) * rstd;
            if (g.p) v *= pget(g, i);
            if (b.p) v += pget(b, i);
            y[i] = (float)v;
        }
    }
#undef XV
}

static void cuda_layer_norm(struct arena *a, struct tensor *out, const struct tensor *x,
                            const struct tensor *g, const struct tensor *b, float eps)
{
    const int64_t rows = tensor_nrows(x);
    if (rows == 0 || !rows_fit(a, rows, "layer_norm")) return;
    struct tv xv = tv_of(x);
    k_layer_norm<<<(unsigned)rows, nn_threads(x->ne[x->ndim - 1]), 0, cuda_of(a)->st>>>(
        (float *)out->data, xv, NULL, xv, pv_of(g), pv_of(b), eps);
    cu_launched(a, "layer_norm");
}

static void cuda_add_layer_norm(struct arena *a, struct tensor *sum, struct tensor *out,
                                const struct tensor *x, const struct tensor *r,
                                const struct tensor *g, const struct tensor *b, float eps)
{
    const int64_t rows = tensor_nrows(x);
    if (rows == 0 || !rows_fit(a, rows, "add_layer_norm")) return;
    k_layer_norm<<<(unsigned)rows, nn_threads(x->ne[x->ndim - 1]), 0, cuda_of(a)->st>>>(
        (float *)out->data, tv_of(x), (float *)sum->data, tv_of(r), pv_of(g), pv_of(b), eps);
    cu_launched(a, "add_layer_norm");
}

/* ---- rms norm ----------------------------------------------------------------- */

__global__ static void k_rms_norm(float *out, struct tv x, struct pv g, float eps)
{
    __shared__ double sh[NN_THREADS / 32];
    const int64_t row = blockIdx.x, n = x.ne[3];
    const char *xr = x.p + tv_row_off(x, row);
    const bool cached = n <= NN_CACHE * (int64_t)blockDim.x;
    float c[NN_CACHE];
    double acc = 0;
    if (cached) {
#pragma unroll
        for (int u = 0; u < NN_CACHE; u++) {
            const int64_t i = threadIdx.x + (int64_t)u * blockDim.x;
            c[u] = i < n ? *(const float *)(xr + i * x.nb[3]) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < NN_CACHE; u++) {
            const double v = c[u];
            acc += v * v;
        }
    } else {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            double v = *(const float *)(xr + i * x.nb[3]);
            acc += v * v;
        }
    }
    const double rstd = 1.0 / sqrt(block_sum(acc, sh) / (double)n + eps);
    float *y = out + row * n;
    if (cached) {
#pragma unroll
        for (int u = 0; u < NN_CACHE; u++) {
            const int64_t i = threadIdx.x + (int64_t)u * blockDim.x;
            if (i < n) {
                double v = c[u] * rstd;
                if (g.p) v *= pget(g, i);
                y[i] = (float)v;
            }
        }
        return;
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        double v = *(const float *)(xr + i * x.nb[3]) * rstd;
        if (g.p) v *= pget(g, i);
        y[i] = (float)v;
    }
}

static void cuda_rms_norm(struct arena *a, struct tensor *out, const struct tensor *x,
                          const struct tensor *g, float eps)
{
    const int64_t rows = tensor_nrows(x);
    if (rows == 0 || !rows_fit(a, rows, "rms_norm")) return;
    k_rms_norm<<<(unsigned)rows, nn_threads(x->ne[x->ndim - 1]), 0, cuda_of(a)->st>>>((float *)out->data,
                                                                                       tv_of(x), pv_of(g), eps);
    cu_launched(a, "rms_norm");
}

/* ---- group norm: one block per (batch, group) ------------------------------------ */

__global__ static void k_group_norm(float *out, struct tv x, int64_t G, struct pv g,
                                    struct pv b, float eps)
{
    __shared__ double sh[NN_THREADS];
    /* x as [1, B, C, T] */
    const int64_t bi = blockIdx.x / G, gi = blockIdx.x % G;
    const int64_t C = x.ne[2], T = x.ne[3], cg = C / G, n = cg * T;
    const char *base = x.p + bi * x.nb[1] + gi * cg * x.nb[2];
#define GX(e) (*(const float *)(base + ((e) / T) * x.nb[2] + ((e) % T) * x.nb[3]))
    double acc = 0;
    for (int64_t e = threadIdx.x; e < n; e += blockDim.x) acc += GX(e);
    const double mean = block_sum(acc, sh) / (double)n;
    acc = 0;
    for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
        double d = GX(e) - mean;
        acc += d * d;
    }
    const double rstd = 1.0 / sqrt(block_sum(acc, sh) / (double)n + eps);
    for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
        const int64_t ch = gi * cg + e / T;
        double v = (GX(e) - mean) * rstd;
        if (g.p) v *= pget(g, ch);
        if (b.p) v += pget(b, ch);
        out[(bi * C + ch) * T + e % T] = (float)v;
    }
#undef GX
}

static void cuda_group_norm(struct arena *a, struct tensor *out, const struct tensor *x,
                            int n_groups, const struct tensor *g, const struct tensor *b,
                            float eps)
{
    struct tv xv = tv_of(x);
    const int64_t blocks = xv.ne[1] * n_groups;
    if (tensor_nelements(x) == 0 || !rows_fit(a, blocks, "group_norm")) return;
    k_group_norm<<<(unsigned)blocks, NN_THREADS, 0, cuda_of(a)->st>>>(
        (float *)out->data, xv, n_groups, pv_of(g), pv_of(b), eps);
    cu_launched(a, "group_norm");
}

/* ---- channel affine ------------------------------------------------------------------ */

__global__ static void k_channel_affine(float *out, struct tv x, int dim, struct pv scale,
                                        struct pv shift, int64_t n)
{
    CU_FOR(e, n) {
        int64_t rem = e, off = 0, c = 0;
        for (int d = 3; d >= 0; d--) {
            const int64_t i = rem % x.ne[d];
            rem /= x.ne[d];
            off += i * x.nb[d];
            if (d == dim) c = i;
        }
        const float v = *(const float *)(x.p + off);
        out[e] = (float)((double)v * pget(scale, c) + pget(shift, c));
    }
}

static void cuda_channel_affine(struct arena *a, struct tensor *out, const struct tensor *x,
                                int dim, const struct tensor *scale,
                                const struct tensor *shift)
{
    const int64_t n = tensor_nelements(x);
    if (n == 0) return;
    k_channel_affine<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cuda_of(a)->st>>>(
        (float *)out->data, tv_of(x), dim + (4 - x->ndim), pv_of(scale), pv_of(shift), n);
    cu_launched(a, "channel_affine");
}

/* ---- softmax ---------------------------------------------------------------------------- */

__global__ static void k_softmax(float *out, struct tv x, float scale)
{
    __shared__ double sh[NN_THREADS];
    const int64_t row = blockIdx.x, n = x.ne[3];
    const char *xr = x.p + tv_row_off(x, row);
#define SX(i) ((double)(*(const float *)(xr + (i) * x.nb[3]) * scale))
    /* the max in double of the float products; a NaN makes the sum NaN */
    double m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        double v = SX(i);
        if (v > m) m = v;
    }
    sh[threadIdx.x] = m;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w && sh[threadIdx.x + w] > sh[threadIdx.x])
            sh[threadIdx.x] = sh[threadIdx.x + w];
        __syncthreads();
    }
    m = sh[0];
    __syncthreads();
    double acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += exp(SX(i) - m);
    const double sum = block_sum(acc, sh);
    float *y = out + row * n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = (float)(exp(SX(i) - m) / sum);
#undef SX
}

static void cuda_softmax(struct arena *a, struct tensor *out, const struct tensor *x, float scale)
{
    const int64_t rows = tensor_nrows(x);
    if (rows == 0 || x->ne[x->ndim - 1] == 0 || !rows_fit(a, rows, "softmax")) return;
    k_softmax<<<(unsigned)rows, NN_THREADS, 0, cuda_of(a)->st>>>((float *)out->data, tv_of(x),
                                                                  scale);
    cu_launched(a, "softmax");
}

/* ---- attention ------------------------------------------------------------------------------ */

#define ATT_THREADS 128
#define ATT_SMEM_SCORES 8192 /* keys whose scores fit in shared memory */

/* element (b, h, j, d) of k or v: F32, F16 or Q8_0 rows */
__device__ static inline float kv_ld(const struct tv &t, int64_t b, int64_t h, int64_t j, int64_t d)
{
    const char *r = t.p + b * t.nb[0] + h * t.nb[1] + j * t.nb[2];
    if (t.type == TYPE_Q8_0) return d_block_elem(TYPE_Q8_0, r + (d / QK) * 34, (int)(d % QK));
    const char *p = r + d * t.nb[3];
    return t.type == TYPE_F16 ? scalar_fp16_to_f32(*(const uint16_t *)p) : *(const float *)p;
}

struct attn_export {
    int64_t b, h, i0, n; /* n 0: none */
    float *dst;          /* device [n, Tk] */
};

__global__ static void k_attention(float *out, struct tv q, struct tv k, struct tv v,
                                   struct tv bias, bool has_bias, float scale, bool causal,
                                   float *gscores, struct attn_export ex)
{
    extern __shared__ float smem[];
    const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int64_t Hq = q.ne[1], Tq = q.ne[2], D = q.ne[3], Tk = k.ne[2];
    const int64_t hk = h / (Hq / k.ne[1]);
    float *qs = smem;                  /* D */
    float *red = qs + D;               /* blockDim */
    const int64_t dofs = D + blockDim.x + ((D + blockDim.x) & 1); /* 8-byte aligned */
    double *dred = (double *)(smem + dofs);                        /* blockDim */
    float *s = gscores ? gscores + (((b * Hq + h) * Tq) + i) * Tk
                       : (float *)(dred + blockDim.x); /* Tk */
    const char *qr = q.p + b * q.nb[0] + h * q.nb[1] + i * q.nb[2];
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) qs[d] = *(const float *)(qr + d * q.nb[3]);
    __syncthreads();
    const int64_t last = causal ? Tk - Tq + i : Tk - 1;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x) {
        float sj = -INFINITY;
        if (j <= last) {
            float dot = 0;
            for (int64_t d = 0; d < D; d++) dot += qs[d] * kv_ld(k, b, hk, j, d);
            sj = dot * scale;
            if (has_bias)
                sj += *(const float *)(bias.p + b * bias.nb[0] + h * bias.nb[1] +
                                       i * bias.nb[2] + j * bias.nb[3]);
        }
        s[j] = sj;
        m = fmaxf(m, sj);
    }
    m = block_max(m, red);
    float *yr = out + ((b * Hq + h) * Tq + i) * D;
    const bool exp_row = ex.n > 0 && b == ex.b && h == ex.h && i >= ex.i0 && i < ex.i0 + ex.n;
    float *pe = exp_row ? ex.dst + (i - ex.i0) * Tk : NULL;
    if (m == -INFINITY) { /* sees no key */
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) yr[d] = 0;
        if (pe)
            for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x) pe[j] = 0;
        return;
    }
    double acc = 0;
    for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x) {
        const float e = (float)exp((double)s[j] - m);
        s[j] = e;
        acc += e;
    }
    const double sum = block_sum(acc, dred); /* also orders the s[] writes */
    if (pe)
        for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x) pe[j] = (float)(s[j] / sum);
    if (D <= (int64_t)blockDim.x) {
        const int P = blockDim.x / (int)D, t = threadIdx.x, d = t % (int)D, p = t / (int)D;
        float o = 0;
        if (p < P)
            for (int64_t j = p; j < Tk; j += P)
                if (s[j] != 0) o += s[j] * kv_ld(v, b, hk, j, d);
        red[t] = o;
        __syncthreads();
        if (p == 0) {
            double tot = 0;
            for (int pp = 0; pp < P; pp++) tot += red[pp * D + d];
            yr[d] = (float)(tot / sum);
        }
    } else {
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
            double o = 0;
            for (int64_t j = 0; j < Tk; j++)
                if (s[j] != 0) o += s[j] * kv_ld(v, b, hk, j, d);
            yr[d] = (float)(o / sum);
        }
    }
}

/* Prefill (many queries), flash style: a block takes FA_QB query rows of
 * one head and walks the keys in tiles of FA_KB. Scores, the running row
 * max and exp-sum (online softmax) and the output accumulator stay in
 * registers; each of the 256 threads owns a 4 x 4 patch of the score tile
 * (rows 4 tr .. 4 tr + 3, keys 4 tc .. 4 tc + 3, tr = t / 16, tc = t % 16)
 * and the same rows times 4 NG output columns. q and k are held transposed
 * ([d][row]) so a patch reads two float4s per d; p goes back through shared
 * memory (transposed) for P.V. Float throughout, the products fused
 * (fmaf); the softmax is rescaled per key tile, so results differ from
 * ref's double sums by float rounding. A row
 * that sees no key gives zeros (ops_nn.c, convention 2).
 * DT: the head dim when fixed at compile time (64, 128; 0: q's), so the
 * loops over it unroll. vec (F32 keys and values, 16-byte aligned rows):
 * a tile is read as float4s into registers while the tile before it is
 * multiplied (fa_fetch), then stored to shared memory (fa_store): keys a
 * warp's 32 rows at a time so their transposed stores take distinct banks,
 * values a row's float4s side by side. The sums are the same either way. */
#define FA_QB 64
#define FA_KB 64
#define FA_THREADS 256
#define FA_PAD 4
#define FA_LD (FA_QB + FA_PAD) /* row length of qT, kT and pT */

static size_t flash_smem(int64_t D)
{
    /* qT[D][FA_LD], kT[D][FA_LD], vS[FA_KB][D + FA_PAD], pT[FA_KB][FA_LD] */
    return (size_t)(2 * D * FA_LD + FA_KB * (D + FA_PAD) + FA_KB * FA_LD) * sizeof(float);
}

/* float4s of one key (or value) tile a thread moves, head dim up to 64 NG */
#define FA_NV(NG) (FA_KB * 16 * (NG) / FA_THREADS)

/* The thread's float4 n of a tile (idx = t + n FA_THREADS): of the keys,
 * row kj = idx % FA_KB, float4 kq = idx / FA_KB of it; of the values, row
 * vj = idx / D4, float4 vq = idx % D4 (the row's float4s side by side). */
struct fa_slot {
    int kj, kq, vj, vq;
};
__device__ static inline struct fa_slot fa_slot_of(int n, int D4)
{
    const int idx = (int)threadIdx.x + n * FA_THREADS, vj = idx / D4;
    return fa_slot{idx % FA_KB, idx / FA_KB, vj, idx - vj * D4};
}

/* tile j0 of the keys and values (rows kb, vb; nb2 apart) into kr, vr;
 * zeros past Tk */
template <int NG>
__device__ static inline void fa_fetch(float4 *kr, float4 *vr, const char *kb, const char *vb, int64_t knb2,
                                       int64_t vnb2, int64_t j0, int64_t Tk, int D4)
{
    const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int n = 0; n < FA_NV(NG); n++) {
        const struct fa_slot e = fa_slot_of(n, D4);
        kr[n] = e.kq < D4 && j0 + e.kj < Tk ? *(const float4 *)(kb + (j0 + e.kj) * knb2 + 16 * e.kq) : z;
        vr[n] = e.vj < FA_KB && j0 + e.vj < Tk ? *(const float4 *)(vb + (j0 + e.vj) * vnb2 + 16 * e.vq) : z;
    }
}

template <int NG>
__device__ static inline void fa_store(const float4 *kr, const float4 *vr, float *kT, float *vS, int D4)
{
    const int DV = 4 * D4 + FA_PAD;
#pragma unroll
    for (int n = 0; n < FA_NV(NG); n++) {
        const struct fa_slot e = fa_slot_of(n, D4);
        const int kj = e.kj, kq = e.kq, vj = e.vj, vq = e.vq;
        if (kq < D4) {
            float *c = kT + 4 * kq * FA_LD + kj;
            c[0] = kr[n].x;
            c[FA_LD] = kr[n].y;
            c[2 * FA_LD] = kr[n].z;
            c[3 * FA_LD] = kr[n].w;
        }
        if (vj < FA_KB) *(float4 *)(vS + vj * DV + 4 * vq) = vr[n];
    }
}

template <int NG, int DT>
__global__ static void __launch_bounds__(FA_THREADS)
k_attn_flash(float *out, struct tv q, struct tv k, struct tv v, struct tv bias, bool has_bias, float scale,
             bool causal, bool vec)
{
    extern __shared__ float4 smem4[];
    float *smem = (float *)smem4;
    const int64_t i0 = (int64_t)blockIdx.x * FA_QB, h = blockIdx.y, b = blockIdx.z;
    const int64_t Hq = q.ne[1], Tq = q.ne[2], Tk = k.ne[2];
    const int D = DT ? DT : (int)q.ne[3];
    const int64_t hk = h / (Hq / k.ne[1]);
    const int t = threadIdx.x, tr = t >> 4, tc = t & 15, DV = D + FA_PAD;
    float *qT = smem, *kT = qT + D * FA_LD, *vS = kT + D * FA_LD, *pT = vS + FA_KB * DV;
    for (int idx = t; idx < FA_QB * D; idx += FA_THREADS) {
        const int r = idx / D, d = idx - r * D;
        qT[d * FA_LD + r] = i0 + r < Tq ? *(const float *)(q.p + b * q.nb[0] + h * q.nb[1] +
                                                           (i0 + r) * q.nb[2] + d * q.nb[3])
                                        : 0.0f;
    }
    float m[4], l[4], o[4][4 * NG];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0;
#pragma unroll
        for (int c = 0; c < 4 * NG; c++) o[i][c] = 0;
    }
    /* keys past this bound are masked for every row of the block */
    const int64_t jend = causal ? min(Tk, Tk - Tq + min(i0 + FA_QB, Tq)) : Tk;
    const char *kb = k.p + b * k.nb[0] + hk * k.nb[1], *vb = v.p + b * v.nb[0] + hk * v.nb[1];
    float4 kr[FA_NV(NG)], vr[FA_NV(NG)];
    if (vec && jend > 0) fa_fetch<NG>(kr, vr, kb, vb, k.nb[2], v.nb[2], 0, Tk, D / 4);
    for (int64_t j0 = 0; j0 < jend; j0 += FA_KB) {
        __syncthreads(); /* the previous tile's P.V is done with kT, vS, pT */
        if (vec) {
            fa_store<NG>(kr, vr, kT, vS, D / 4);
        } else {
            for (int idx = t; idx < FA_KB * D; idx += FA_THREADS) {
                const int jj = idx / D, d = idx - jj * D;
                const bool in = j0 + jj < Tk;
                kT[d * FA_LD + jj] = in ? kv_ld(k, b, hk, j0 + jj, d) : 0.0f;
                vS[jj * DV + d] = in ? kv_ld(v, b, hk, j0 + jj, d) : 0.0f;
            }
        }
        __syncthreads();
        if (vec && j0 + FA_KB < jend) fa_fetch<NG>(kr, vr, kb, vb, k.nb[2], v.nb[2], j0 + FA_KB, Tk, D / 4);
        float s[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) s[i][j] = 0;
#pragma unroll 16
        for (int d = 0; d < D; d++) {
            const float4 qa = *(const float4 *)(qT + d * FA_LD + 4 * tr);
            const float4 kb4 = *(const float4 *)(kT + d * FA_LD + 4 * tc);
            const float qv[4] = {qa.x, qa.y, qa.z, qa.w}, kv[4] = {kb4.x, kb4.y, kb4.z, kb4.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int64_t row = i0 + 4 * tr + i, last = causal ? Tk - Tq + row : Tk - 1;
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int64_t col = j0 + 4 * tc + j;
                float sj = -INFINITY;
                if (col <= last && col < Tk && row < Tq) {
                    sj = s[i][j] * scale;
                    if (has_bias)
                        sj += *(const float *)(bias.p + b * bias.nb[0] + h * bias.nb[1] + row * bias.nb[2] +
                                               col * bias.nb[3]);
                }
                s[i][j] = sj;
                mx = fmaxf(mx, sj);
            }
            for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float mn = fmaxf(m[i], mx);
            float sum = 0;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                s[i][j] = mn == -INFINITY ? 0.0f : expf(s[i][j] - mn);
                sum += s[i][j];
            }
            for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
            const float alpha = mn == -INFINITY ? 1.0f : expf(m[i] - mn);
            m[i] = mn;
            l[i] = l[i] * alpha + sum;
#pragma unroll
            for (int c = 0; c < 4 * NG; c++) o[i][c] *= alpha;
        }
#pragma unroll
        for (int j = 0; j < 4; j++)
            *(float4 *)(pT + (4 * tc + j) * FA_LD + 4 * tr) = make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
        __syncthreads();
        /* keys past Tk have p 0 and zero values: the whole tile adds the same */
#pragma unroll 8
        for (int jj = 0; jj < FA_KB; jj++) {
            const float4 pa = *(const float4 *)(pT + jj * FA_LD + 4 * tr);
            const float pv[4] = {pa.x, pa.y, pa.z, pa.w};
#pragma unroll
            for (int g = 0; g < NG; g++) {
                const int c0 = 64 * g + 4 * tc;
                if (c0 >= D) break;
                const float4 vb4 = *(const float4 *)(vS + jj * DV + c0);
                const float vv[4] = {vb4.x, vb4.y, vb4.z, vb4.w};
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int c = 0; c < 4; c++) o[i][4 * g + c] = fmaf(pv[i], vv[c], o[i][4 * g + c]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t row = i0 + 4 * tr + i;
        if (row >= Tq) break;
        float *yr = out + ((b * Hq + h) * Tq + row) * D;
#pragma unroll
        for (int g = 0; g < NG; g++) {
            const int c0 = 64 * g + 4 * tc;
            if (c0 >= D) break;
            const float inv = l[i] > 0 ? 1.0f / l[i] : 0.0f;
            *(float4 *)(yr + c0) = make_float4(o[i][4 * g] * inv, o[i][4 * g + 1] * inv, o[i][4 * g + 2] * inv,
                                               o[i][4 * g + 3] * inv);
        }
    }
}

/* Prefill on BF16 tensor cores (the arena's BF16 hint, arena_set_bf16:
 * S3Gen's estimator and encoder, T3's prefills of quantised weights; head
 * dim 64; q, k and v F32 rows of 16-byte aligned float4s). The CPU's BF16
 * attention rounds the same operands (cpu/attn_bf16.c): q * scale, k, v
 * and the probabilities p to
 * BF16 (nearest even), products and sums in F32, l the sum of the
 * unrounded p. A block is 4 warps of 16 query rows (FM_QB rows) and walks
 * the keys in tiles of FM_KB: k and v converted to BF16 in shared memory
 * ([key][dim] rows of FM_LD, so a warp's fragment loads take 32 banks),
 * the next tile's F32 rows fetched into registers while this one is
 * multiplied. Per warp: S = Q K^T with mma.sync m16n8k16 (Q's fragments
 * in registers for the whole walk), the online softmax on S's fragments
 * (a row's 64 scores over the 4 threads of a quad), then O += P V with P
 * taken from S's accumulator layout as the A operand (no trip through
 * memory) and V's fragments by ldmatrix .trans. A row that sees no key
 * gives zeros (ops_nn.c, convention 2). Compute capability 8.0 or newer
 * (cuda_backend.mma). */
#define FM_QB 64
#define FM_KB 64
#define FM_D 64
#define FM_LD 72 /* 64 + 8 BF16: a row is 36 words, so 8 rows x 4 words hit 32 banks */
#define FM_THREADS 128
#define FM_NF (FM_KB * FM_D / 4 / FM_THREADS) /* float4s of a k (or v) tile a thread moves */

/* f32 -> bf16 bits as f32_to_bf16: nearest even, a NaN kept quiet */
__device__ static inline uint32_t fm_bf16(float f)
{
    const uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u;
    return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}

__device__ static inline uint32_t fm_pair(float lo, float hi) { return fm_bf16(lo) | (fm_bf16(hi) << 16); }

/* c (16 x 8 F32) += a (16 x 16 BF16, row) b (16 x 8 BF16, col) */
__device__ static inline void fm_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* the B fragment (16 keys x 8 dims) of rows p (lanes 0..15: key lane) of
 * a [key][dim] tile, transposed on the way (ldmatrix .trans) */
__device__ static inline void fm_ldsm_t(uint32_t &b0, uint32_t &b1, const uint16_t *p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned sa = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(b0), "=r"(b1)
                 : "r"(sa));
#else
    b0 = b1 = 0;
#endif
}

/* tile j0's k and v rows (F32, float4 f of row kj: idx = t + n FM_THREADS,
 * kj = idx / 16, f = idx % 16) into registers; zeros past Tk */
__device__ static inline void fm_fetch(float4 *kr, float4 *vr, const char *kb, const char *vb, int64_t knb2,
                                       int64_t vnb2, int64_t j0, int64_t Tk)
{
    const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int n = 0; n < FM_NF; n++) {
        const int idx = (int)threadIdx.x + n * FM_THREADS, kj = idx >> 4, f = idx & 15;
        const bool in = j0 + kj < Tk;
        kr[n] = in ? *(const float4 *)(kb + (j0 + kj) * knb2 + 16 * f) : z;
        vr[n] = in ? *(const float4 *)(vb + (j0 + kj) * vnb2 + 16 * f) : z;
    }
}

__global__ static void __launch_bounds__(FM_THREADS)
    k_attn_mma(float *out, struct tv q, struct tv k, struct tv v, struct tv bias, bool has_bias, float scale,
               bool causal)
{
    __shared__ __align__(16) uint16_t sQ[FM_QB * FM_LD];
    __shared__ __align__(16) uint16_t sK[FM_KB * FM_LD];
    __shared__ __align__(16) uint16_t sV[FM_KB * FM_LD];
    const int64_t i0 = (int64_t)blockIdx.x * FM_QB, h = blockIdx.y, b = blockIdx.z;
    const int64_t Hq = q.ne[1], Tq = q.ne[2], Tk = k.ne[2];
    const int64_t hk = h / (Hq / k.ne[1]);
    const int t = threadIdx.x, w = t >> 5, lane = t & 31, g = lane >> 2, c = lane & 3;
    for (int n = 0; n < FM_QB * FM_D / 4 / FM_THREADS; n++) { /* q * scale as BF16, rows past Tq zero */
        const int idx = t + n * FM_THREADS, r = idx >> 4, f = idx & 15;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i0 + r < Tq) x = *(const float4 *)(q.p + b * q.nb[0] + h * q.nb[1] + (i0 + r) * q.nb[2] + 16 * f);
        *(uint2 *)(sQ + r * FM_LD + 4 * f) = make_uint2(fm_pair(x.x * scale, x.y * scale),
                                                        fm_pair(x.z * scale, x.w * scale));
    }
    __syncthreads();
    uint32_t qa[FM_D / 16][4]; /* the warp's 16 rows as A fragments, 16 dims each */
    const uint16_t *qw = sQ + 16 * w * FM_LD;
#pragma unroll
    for (int kd = 0; kd < FM_D / 16; kd++) {
        qa[kd][0] = *(const uint32_t *)(qw + g * FM_LD + 16 * kd + 2 * c);
        qa[kd][1] = *(const uint32_t *)(qw + (g + 8) * FM_LD + 16 * kd + 2 * c);
        qa[kd][2] = *(const uint32_t *)(qw + g * FM_LD + 16 * kd + 8 + 2 * c);
        qa[kd][3] = *(const uint32_t *)(qw + (g + 8) * FM_LD + 16 * kd + 8 + 2 * c);
    }
    /* this thread's rows: g and g + 8 of the warp's 16 (fragment halves 0, 1) */
    const int64_t rows[2] = {i0 + 16 * w + g, i0 + 16 * w + g + 8};
    float o[FM_D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nd = 0; nd < FM_D / 8; nd++) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
    /* keys past this bound are masked for every row of the block */
    const int64_t jend = causal ? min(Tk, Tk - Tq + min(i0 + FM_QB, Tq)) : Tk;
    const char *kb = k.p + b * k.nb[0] + hk * k.nb[1], *vb = v.p + b * v.nb[0] + hk * v.nb[1];
    float4 kr[FM_NF], vr[FM_NF];
    if (jend > 0) fm_fetch(kr, vr, kb, vb, k.nb[2], v.nb[2], 0, Tk);
    for (int64_t j0 = 0; j0 < jend; j0 += FM_KB) {
        __syncthreads(); /* the previous tile's products are done with sK, sV */
#pragma unroll
        for (int n = 0; n < FM_NF; n++) {
            const int idx = t + n * FM_THREADS, kj = idx >> 4, f = idx & 15;
            *(uint2 *)(sK + kj * FM_LD + 4 * f) = make_uint2(fm_pair(kr[n].x, kr[n].y), fm_pair(kr[n].z, kr[n].w));
            *(uint2 *)(sV + kj * FM_LD + 4 * f) = make_uint2(fm_pair(vr[n].x, vr[n].y), fm_pair(vr[n].z, vr[n].w));
        }
        __syncthreads();
        if (j0 + FM_KB < jend) fm_fetch(kr, vr, kb, vb, k.nb[2], v.nb[2], j0 + FM_KB, Tk);
        float s[FM_KB / 8][4];
#pragma unroll
        for (int nt = 0; nt < FM_KB / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int kd = 0; kd < FM_D / 16; kd++)
#pragma unroll
            for (int nt = 0; nt < FM_KB / 8; nt++) {
                const uint16_t *kp = sK + (8 * nt + g) * FM_LD + 16 * kd + 2 * c;
                fm_mma(s[nt], qa[kd], *(const uint32_t *)kp, *(const uint32_t *)(kp + 8));
            }
        /* element e of n-tile nt: row rows[e / 2], key j0 + 8 nt + 2 c + e % 2 */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < FM_KB / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t row = rows[e >> 1], col = j0 + 8 * nt + 2 * c + (e & 1);
                const int64_t last = causal ? Tk - Tq + row : Tk - 1;
                float sj = -INFINITY;
                if (col <= last && col < Tk && row < Tq) {
                    sj = s[nt][e];
                    if (has_bias)
                        sj += *(const float *)(bias.p + b * bias.nb[0] + h * bias.nb[1] + row * bias.nb[2] +
                                               col * bias.nb[3]);
                }
                s[nt][e] = sj;
                mx[e >> 1] = fmaxf(mx[e >> 1], sj);
            }
        float alpha[2], mn[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 2; i++) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            mn[i] = fmaxf(m[i], mx[i]);
            alpha[i] = mn[i] == -INFINITY ? 1.0f : expf(m[i] - mn[i]);
            m[i] = mn[i];
        }
#pragma unroll
        for (int nt = 0; nt < FM_KB / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float mr = mn[e >> 1];
                s[nt][e] = mr == -INFINITY ? 0.0f : expf(s[nt][e] - mr);
                sum[e >> 1] += s[nt][e];
            }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
            sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
            l[i] = l[i] * alpha[i] + sum[i];
        }
#pragma unroll
        for (int nd = 0; nd < FM_D / 8; nd++) {
            o[nd][0] *= alpha[0];
            o[nd][1] *= alpha[0];
            o[nd][2] *= alpha[1];
            o[nd][3] *= alpha[1];
        }
        /* keys past Tk have p 0 and zero values: the whole tile adds the same */
#pragma unroll
        for (int kk = 0; kk < FM_KB / 16; kk++) {
            const uint32_t pa[4] = {fm_pair(s[2 * kk][0], s[2 * kk][1]), fm_pair(s[2 * kk][2], s[2 * kk][3]),
                                    fm_pair(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    fm_pair(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int nd = 0; nd < FM_D / 8; nd++) {
                uint32_t b0, b1;
                fm_ldsm_t(b0, b1, sV + (16 * kk + (lane & 15)) * FM_LD + 8 * nd);
                fm_mma(o[nd], pa, b0, b1);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (rows[i] >= Tq) continue;
        const float inv = l[i] > 0 ? 1.0f / l[i] : 0.0f;
        float *yr = out + ((b * Hq + h) * Tq + rows[i]) * FM_D;
#pragma unroll
        for (int nd = 0; nd < FM_D / 8; nd++)
            *(float2 *)(yr + 8 * nd + 2 * c) = make_float2(o[nd][2 * i] * inv, o[nd][2 * i + 1] * inv);
    }
}

/* Whether the rows of x (F32 [B, H, T, D] view) are float4s on 16-byte
 * boundaries (the fast loads of the flash, tensor-core and decode kernels) */
static bool rows_f4(const struct tv &x)
{
    bool ok = x.type == TYPE_F32 && x.nb[3] == 4 && (uintptr_t)x.p % 16 == 0;
    for (int d = 0; d < 3; d++) ok = ok && x.nb[d] % 16 == 0;
    return ok;
}

/* Decode (Tq 1, no probability export), one launch: a row's keys in
 * chunks of AD_KEYS over a cluster of AD_CLUSTER blocks (a fixed grid, so
 * a recorded step replays at every length), block sp taking chunks sp,
 * sp + AD_CLUSTER, ... A block's ATT_THREADS threads are AD_GROUPS groups
 * of AD_G; a group takes AD_KEYS / AD_GROUPS keys of a chunk (a warp's
 * groups adjacent rows, so the warp reads consecutive rows) and a thread
 * D / AD_G of their dims: scores by shuffles in the group, an online
 * softmax over the block's chunks, then the block's max M, exp-sum l and
 * unnormalised sum o[D], written into block 0's shared memory through
 * distributed shared memory (once every block runs: a cluster barrier
 * arrived at on entry, waited for there). After one cluster barrier the
 * other blocks are done, and block 0 rescales each part by exp(M - max)
 * in block order and writes the row. (One H100, Turbo Q4_0: block 0
 * reading the parts from the others' memory, with a second barrier to
 * keep them, spent a third of the kernel's stall samples in the two
 * barriers.) */
#define AD_KEYS 64
#define AD_CLUSTER 8
#define AD_G 8
#define AD_GROUPS (ATT_THREADS / AD_G)
#define AD_PER (AD_KEYS / AD_GROUPS)
/* blocks of k_attn_decode a multiprocessor holds: its launch bounds'
 * minimum where a thread's 8 dims are read as F32 or Q8_0 words (at most
 * 168 registers, no spills). A first version of this kernel at about 220
 * registers fitted two a multiprocessor, and the 32 clusters of a CFG
 * pair's 16 heads no longer ran at once: Multilingual v2 Q4_0 T3 787 ->
 * 725 tokens/s (one H100, while Turbo's 16 clusters gained) */
#define AD_BLOCKS_SM 3
#define AD_MIN_BLOCKS(DPT, MODE) ((DPT) == 8 && (MODE) != KV_ANY ? AD_BLOCKS_SM : 1)

/* How a decode block reads a cached row's dims (kv_dims) */
enum kv_read {
    KV_ANY,  /* element by element (kv_ld) */
    KV_F32,  /* F32 rows 16-byte aligned, n == DPT: float4 loads */
    KV_Q8_0, /* Q8_0 rows 2-byte aligned, n == DPT, d0 % DPT == 0 and DPT
              * dividing QK: the block's scale, then the quants as 16-bit
              * words, widened as quant.c does (d * q) */
};

/* dims [d0, d0 + n) (n <= DPT) of row j of head (b, hk) -> f, for
 * KV_F32 and KV_ANY (KV_Q8_0 rows: kv_q8_words, then kv_q8_elem) */
template <int DPT>
__device__ static inline void kv_dims(float *f, const struct tv &t, int64_t b, int64_t hk, int64_t j, int d0, int n,
                                      int mode)
{
    const char *r = t.p + b * t.nb[0] + hk * t.nb[1] + j * t.nb[2];
    if (mode == KV_F32) {
        const float4 *r4 = (const float4 *)r + d0 / 4;
#pragma unroll
        for (int u = 0; u < DPT / 4; u++) {
            const float4 v = r4[u];
            f[4 * u] = v.x;
            f[4 * u + 1] = v.y;
            f[4 * u + 2] = v.z;
            f[4 * u + 3] = v.w;
        }
        return;
    }
#pragma unroll
    for (int u = 0; u < DPT; u++) f[u] = u < n ? kv_ld(t, b, hk, j, d0 + u) : 0.0f;
}

/* KV_Q8_0 rows as kv_dims reads them, in two steps: the raw 16-bit words
 * of dims [d0, d0 + DPT) of row j of head (b, hk) (the block's scale,
 * then the quants), then each element widened (d * q) as quant.c does
 * where it is used (kv_q8_elem) */
template <int DPT>
__device__ static inline void kv_q8_words(uint16_t *w, const struct tv &t, int64_t b, int64_t hk, int64_t j, int d0)
{
    const uint16_t *blk = (const uint16_t *)(t.p + b * t.nb[0] + hk * t.nb[1] + j * t.nb[2] + (d0 / QK) * 34);
    w[0] = blk[0];
#pragma unroll
    for (int u = 0; u < DPT / 2; u++) w[1 + u] = blk[1 + (d0 % QK) / 2 + u];
}

/* element e of those words (kv_q8_words) as quant.c widens it, d the
 * block's scale (cu_h2f(w[0])) */
__device__ static inline float kv_q8_elem(const uint16_t *w, float d, int e)
{
    const uint16_t u = w[1 + e / 2];
    return d * (float)(int8_t)(e & 1 ? u >> 8 : u & 0xff);
}

/* RoPE's inverse frequencies (computed on the host, as the other backends
 * do) travel in the launch's parameters: no upload, so a recorded step
 * (backend.h's graphs) holds them. Wider rotations upload a table. */
#define ROPE_TAB 128
struct rope_tab {
    float f[ROPE_TAB];
};

/* RoPE's rotation of one dim as k_rope does it (rotate_half): mine =
 * x[d], other = x[d + half] where lower (d < half), else x[d - half];
 * c, s the cosine and sine of its angle */
__device__ static inline float rope_rot(float mine, float other, bool lower, float c, float s)
{
    return lower ? mine * c + (-other) * s : mine * c + other * s;
}

/* the angle's cosine and sine as k_rope takes them (double, rounded) */
__device__ static inline float rope_cos(float ang) { return (float)cos((double)ang); }
__device__ static inline float rope_sin(float ang) { return (float)sin((double)ang); }

/* A row of op_attention_group (cuda_attention_group): its cache's row of
 * keys and of values (head stride kh, vh; positions nb bytes apart, the
 * k / v tv's nb[2]) and its position `at`: the new key goes there, the
 * query attends [0, at + 1). */
struct ad_row {
    char *k, *v;
    int64_t kh, vh;
    int32_t at;
};
/* The rows of one launch travel in its parameters (no upload: a pageable
 * upload would wait for the stream to drain): at most AG_ROWS, about 2.5
 * KiB of the 4 KiB a launch takes. ad_none: a launch of one cache. */
#define AG_ROWS 64
struct ad_rows {
    static constexpr bool group = true, append = false, rope = false;
    struct ad_row r[AG_ROWS];
};
struct ad_none {
    static constexpr bool group = false, append = false, rope = false;
};
/* op_attention_append (cuda_attention_append): the new keys and values
 * kn, vn [B, Hk, 1, D] (F32 views) and the position *at they go to in
 * the caches k, v of `type`. The query attends [0, *at + 1): row *at is
 * taken from kn / vn converted as the cache holds it (kv_new_dims), and
 * the first query head of each kv head writes it to the caches; no block
 * reads that row from memory, so the write needs no ordering. */
struct ad_app {
    static constexpr bool group = false, append = true, rope = false;
    struct tv kn, vn;
    const int32_t *at;
    int type;
};
/* ad_app with op_attention_append's rope: q and the new key rotated at
 * *at over all D = AD_G * DPT dims, so dim d's partner d +- D / 2 sits on
 * lane d / DPT ^ AD_G / 2 of its group; invf the inverse frequencies */
struct ad_rope : ad_app {
    static constexpr bool rope = true;
    struct rope_tab invf;
};

/* dims [d0, d0 + n) of the new row (b, hk) of x (F32) -> f (0 beyond
 * n), as loaded: kv_new_dims converts them */
template <int DPT>
__device__ static inline void kv_new_load(float *f, const struct tv &x, int64_t b, int64_t hk, int d0, int n)
{
    const char *xr = x.p + b * x.nb[0] + hk * x.nb[1];
#pragma unroll
    for (int e = 0; e < DPT; e++) f[e] = e < n ? *(const float *)(xr + (d0 + e) * x.nb[3]) : 0.0f;
}

/* f, dims [d0, d0 + n) of the new row (kv_new_load), stored at cache row
 * dst (element stride es) unless dst is NULL, and given back as the cache
 * holds them: F32 as is and F16 rounded as k_cpy does, in f; Q8_0 (MODE
 * KV_Q8_0 only: n == DPT, DPT dividing QK) quantised by blocks of QK as
 * k_cpy_blocks does, a block's amax over its QK / DPT threads (adjacent
 * lanes of the group's mask gmask), as the words kv_q8_words reads, in
 * w[0 .. DPT / 2] (f is left rotated, not widened). With cs (ad_rope; n
 * == DPT: the cosines, then the sines, of the row's AD_G * DPT / 2
 * angles), the row is first rotated as k_rope rotates it. */
template <int DPT, int MODE>
__device__ static inline void kv_new_dims(float *f, int d0, int n, int type, char *dst, int64_t es, unsigned gmask,
                                          const float *cs, uint16_t *w)
{
    constexpr int half = AD_G * DPT / 2;
    if (cs)
#pragma unroll
        for (int e = 0; e < DPT; e++) {
            const int i = (d0 + e) % half;
            f[e] = rope_rot(f[e], __shfl_xor_sync(gmask, f[e], AD_G / 2), d0 < half, cs[i], cs[half + i]);
        }
    if (MODE == KV_Q8_0) {
        float amax = 0.0f;
#pragma unroll
        for (int e = 0; e < DPT; e++) amax = fmaxf(amax, fabsf(f[e]));
        for (int o = 1; o < QK / DPT; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(gmask, amax, o));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        const uint16_t dh = scalar_f32_to_fp16(d);
        char *blk = dst ? dst + (d0 / QK) * 34 : NULL;
        w[0] = dh;
#pragma unroll
        for (int e = 0; e < DPT; e++) {
            const int8_t qv = (int8_t)roundf(f[e] * id);
            if (e & 1) w[1 + e / 2] |= (uint16_t)((uint8_t)qv << 8);
            else w[1 + e / 2] = (uint8_t)qv;
            if (blk) blk[2 + d0 % QK + e] = (char)qv;
        }
        if (blk && d0 % QK == 0) {
            blk[0] = (char)(dh & 0xff);
            blk[1] = (char)(dh >> 8);
        }
        return;
    }
    if (type == TYPE_F16) {
#pragma unroll
        for (int e = 0; e < DPT; e++) {
            const uint16_t h = scalar_f32_to_fp16(f[e]);
            f[e] = scalar_fp16_to_f32(h);
            if (dst && e < n) *(uint16_t *)(dst + (d0 + e) * es) = h;
        }
        return;
    }
    if (dst)
#pragma unroll
        for (int e = 0; e < DPT; e++)
            if (e < n) *(float *)(dst + (d0 + e) * es) = f[e];
}

/* DPT: dims a thread holds (D <= AD_G * DPT). ROWS ad_rows: batch row b
 * reads the cache of rows.r[b] (k and v give type and row strides), its
 * length at + 1. */
template <int DPT, int MODE, typename ROWS>
__global__ static void __cluster_dims__(AD_CLUSTER, 1, 1) __launch_bounds__(ATT_THREADS, AD_MIN_BLOCKS(DPT, MODE))
    k_attn_decode(float *out, struct tv q, struct tv k, struct tv v, struct tv bias, bool has_bias, float scale,
                  const int32_t *len, ROWS rows)
{
    __shared__ float gm[AD_GROUPS], gl[AD_GROUPS], gw[AD_GROUPS];
    __shared__ float go[AD_GROUPS][AD_G * DPT + 1];
    /* block 0's: every block's part (max, exp-sum, sum), written there */
    __shared__ float all_m[AD_CLUSTER], all_l[AD_CLUSTER], all_o[AD_CLUSTER][AD_G * DPT];
    cg::cluster_group cluster = cg::this_cluster();
    cu_pdl_next();
    cluster.barrier_arrive(); /* this block runs: waited for before block 0's memory is written */
    cu_pdl_wait();
    const int64_t sp = blockIdx.x, h = blockIdx.y, b = blockIdx.z, Hq = q.ne[1];
    const int D = (int)q.ne[3], dpt = (D + AD_G - 1) / AD_G;
    int64_t Tk = len ? (*len < 0 ? 0 : *len < k.ne[2] ? *len : k.ne[2]) : k.ne[2];
    if constexpr (ROWS::group) { /* row b's own cache, as a batch of one at b */
        const struct ad_row &r = rows.r[b];
        k.p = r.k - b * k.nb[0];
        k.nb[1] = r.kh;
        v.p = r.v - b * v.nb[0];
        v.nb[1] = r.vh;
        Tk = (int64_t)r.at + 1;
    }
    int64_t jn = -1; /* ROWS::append: the new row's position */
    if constexpr (ROWS::append) {
        const int64_t p = *rows.at;
        Tk = p < 0 ? 0 : p < k.ne[2] ? p + 1 : k.ne[2];
        jn = p < k.ne[2] ? p : -1;
    }
    const int64_t nact = (Tk + AD_KEYS - 1) / AD_KEYS, row = b * Hq + h;
    const int64_t hk = h / (Hq / k.ne[1]);
    const int t = threadIdx.x, gi = t / AD_G, lane8 = t % AD_G, d0 = lane8 * dpt;
    const int nd = D - d0 < dpt ? (D - d0 > 0 ? D - d0 : 0) : dpt;
    const char *qr = q.p + b * q.nb[0] + h * q.nb[1];
    float qd[DPT], od[DPT], m = -INFINITY, l = 0;
#pragma unroll
    for (int e = 0; e < DPT; e++) {
        qd[e] = e < nd ? *(const float *)(qr + (d0 + e) * q.nb[3]) : 0.0f;
        od[e] = 0;
    }
    /* ad_rope: the angles' cosines and sines at the new row's position
     * (one a thread), then q rotated */
    __shared__ float cs[ROWS::rope ? AD_G * DPT : 1];
    if constexpr (ROWS::rope) {
        constexpr int half = AD_G * DPT / 2;
        if (t < 2 * half) {
            const float ang = (float)*rows.at * rows.invf.f[t % half];
            cs[t] = t < half ? rope_cos(ang) : rope_sin(ang);
        }
        __syncthreads();
#pragma unroll
        for (int e = 0; e < DPT; e++) {
            const int i = (d0 + e) % half;
            qd[e] = rope_rot(qd[e], __shfl_xor_sync(0xffffffffu, qd[e], AD_G / 2), d0 < half, cs[i], cs[half + i]);
        }
    }
    /* this block's chunks sp, sp + AD_CLUSTER, ...: the group's running
     * max m, exp-sum l and sum od, rescaled as the max grows */
    for (int64_t c = sp; c < nact; c += AD_CLUSTER) {
        /* the chunk's loads at once (a warp's groups: adjacent rows): every
         * key's raw words, then the new row's dims (append), are in flight
         * before any is widened or converted, so no store, conversion or
         * shuffle sits between two loads: one round trip to memory. Q8_0
         * rows stay words (the new row's too: kv_new_dims), each element
         * widened where the dot and the sum use it, so the registers hold
         * a chunk's words, not its floats (AD_BLOCKS_SM) */
        constexpr int NF = MODE == KV_Q8_0 ? 1 : AD_PER, NW = MODE == KV_Q8_0 ? AD_PER : 1;
        float kd[NF][DPT], vd[NF][DPT], s[AD_PER];
        uint16_t kw[NW][DPT / 2 + 1] = {}, vw[NW][DPT / 2 + 1] = {};
#pragma unroll
        for (int u = 0; u < AD_PER; u++) {
            const int64_t j = c * AD_KEYS + gi + (int64_t)u * AD_GROUPS;
            if (j < Tk && j != jn) {
                if constexpr (MODE == KV_Q8_0) {
                    kv_q8_words<DPT>(kw[u], k, b, hk, j, d0);
                    kv_q8_words<DPT>(vw[u], v, b, hk, j, d0);
                } else {
                    kv_dims<DPT>(kd[u], k, b, hk, j, d0, nd, MODE);
                    kv_dims<DPT>(vd[u], v, b, hk, j, d0, nd, MODE);
                }
            }
        }
        if constexpr (ROWS::append) {
            const int un = (int)((jn - c * AD_KEYS - gi) / AD_GROUPS); /* the new row's slot, if this group's */
            if (jn >= c * AD_KEYS && jn < (c + 1) * AD_KEYS && (jn - c * AD_KEYS) % AD_GROUPS == gi) {
                /* the group's 8 lanes take this branch together */
                float nk[DPT], nv[DPT];
                kv_new_load<DPT>(nk, rows.kn, b, hk, d0, nd);
                kv_new_load<DPT>(nv, rows.vn, b, hk, d0, nd);
                const bool put = h % (Hq / k.ne[1]) == 0;
                const unsigned gmask = 0xffu << (threadIdx.x & 24);
                uint16_t nkw[DPT / 2 + 1] = {}, nvw[DPT / 2 + 1] = {};
                kv_new_dims<DPT, MODE>(nk, d0, nd, rows.type,
                                       put ? k.p + b * k.nb[0] + hk * k.nb[1] + jn * k.nb[2] : NULL, k.nb[3], gmask,
                                       ROWS::rope ? cs : NULL, nkw);
                kv_new_dims<DPT, MODE>(nv, d0, nd, rows.type,
                                       put ? v.p + b * v.nb[0] + hk * v.nb[1] + jn * v.nb[2] : NULL, v.nb[3], gmask,
                                       NULL, nvw);
#pragma unroll
                for (int u = 0; u < AD_PER; u++)
                    if (u == un) {
                        if constexpr (MODE == KV_Q8_0) {
#pragma unroll
                            for (int e = 0; e <= DPT / 2; e++) {
                                kw[u][e] = nkw[e];
                                vw[u][e] = nvw[e];
                            }
                        } else {
#pragma unroll
                            for (int e = 0; e < DPT; e++) {
                                kd[u][e] = nk[e];
                                vd[u][e] = nv[e];
                            }
                        }
                    }
            }
        }
        float mc = -INFINITY;
#pragma unroll
        for (int u = 0; u < AD_PER; u++) {
            const int64_t j = c * AD_KEYS + gi + (int64_t)u * AD_GROUPS;
            const float dk = MODE == KV_Q8_0 ? cu_h2f(kw[u < NW ? u : 0][0]) : 0.0f;
            float dot = 0;
#pragma unroll
            for (int e = 0; e < DPT; e++)
                if (e < nd && j < Tk)
                    dot += qd[e] * (MODE == KV_Q8_0 ? kv_q8_elem(kw[u < NW ? u : 0], dk, e) : kd[u < NF ? u : 0][e]);
            for (int o = 1; o < AD_G; o <<= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
            s[u] = -INFINITY;
            if (j < Tk) {
                s[u] = dot * scale;
                if (has_bias) s[u] += *(const float *)(bias.p + b * bias.nb[0] + h * bias.nb[1] + j * bias.nb[3]);
            }
            mc = fmaxf(mc, s[u]);
        }
        if (mc == -INFINITY) continue;
        if (mc > m) { /* rescale what came before to the new max */
            const float r = m == -INFINITY ? 0.0f : expf(m - mc);
            l *= r;
#pragma unroll
            for (int e = 0; e < DPT; e++) od[e] *= r;
            m = mc;
        }
#pragma unroll
        for (int u = 0; u < AD_PER; u++)
            if (s[u] != -INFINITY) {
                const float p = expf(s[u] - m), dv = MODE == KV_Q8_0 ? cu_h2f(vw[u < NW ? u : 0][0]) : 0.0f;
                l += p;
#pragma unroll
                for (int e = 0; e < DPT; e++)
                    od[e] += p * (MODE == KV_Q8_0 ? kv_q8_elem(vw[u < NW ? u : 0], dv, e) : vd[u < NF ? u : 0][e]);
            }
    }
    if (lane8 == 0) {
        gm[gi] = m;
        gl[gi] = l;
    }
#pragma unroll
    for (int e = 0; e < DPT; e++)
        if (e < nd) go[gi][d0 + e] = od[e];
    __syncthreads();
    /* the groups' weights exp(m - M), one a thread, then the sums (the
     * block's last thread takes l's, which no dim of D <= 127 keeps busy) */
    float M = -INFINITY;
#pragma unroll
    for (int g = 0; g < AD_GROUPS; g++) M = fmaxf(M, gm[g]);
    if (t < AD_GROUPS) gw[t] = gm[t] == -INFINITY ? 0.0f : expf(gm[t] - M);
    __syncthreads();
    cluster.barrier_wait(); /* every block runs (barrier_arrive above) */
    for (int d = t; d < D; d += blockDim.x) {
        float acc = 0;
#pragma unroll
        for (int g = 0; g < AD_GROUPS; g++)
            if (gm[g] != -INFINITY) acc += go[g][d] * gw[g];
        cluster.map_shared_rank(all_o[sp], 0)[d] = acc;
    }
    if (t == (int)blockDim.x - 1) {
        float L = 0;
#pragma unroll
        for (int g = 0; g < AD_GROUPS; g++)
            if (gm[g] != -INFINITY) L += gl[g] * gw[g];
        *cluster.map_shared_rank(&all_m[sp], 0) = M;
        *cluster.map_shared_rank(&all_l[sp], 0) = L;
    }
    cluster.sync(); /* every part is in block 0's shared memory; the others are done */
    if (sp == 0 && t < D) { /* thread t: dim t (D <= ATT_THREADS); the parts combined in order */
        float L = 0, Mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < AD_CLUSTER; i++) Mx = fmaxf(Mx, all_m[i]);
        float o = 0;
#pragma unroll
        for (int i = 0; i < AD_CLUSTER; i++) {
            const float wt = all_m[i] == -INFINITY ? 0.0f : expf(all_m[i] - Mx);
            L += all_l[i] * wt;
            if (wt != 0.0f) o += all_o[i][t] * wt;
        }
        out[row * D + t] = Mx == -INFINITY ? 0.0f : o / L; /* no key seen: zeros */
    }
}

/* How k_attn_decode reads the rows of k and v (kv_dims): F32 rows of
 * 16-byte aligned dims by float4, contiguous Q8_0 rows of 2-byte aligned
 * blocks by 16-bit words, else element by element (the same values). */
static int kv_mode(const struct tensor *k, const struct tensor *v, int64_t D)
{
    if (D % AD_G != 0 || k->type != v->type) return KV_ANY;
    if (rows_f4(tv_of(k)) && rows_f4(tv_of(v))) return KV_F32;
    const int64_t q8row = D / QK * 34;
    if (k->type == TYPE_Q8_0 && D % QK == 0 && k->nb[3] == 1 && v->nb[3] == 1 && (uintptr_t)k->data % 2 == 0 &&
        (uintptr_t)v->data % 2 == 0 && k->nb[0] % 2 == 0 && k->nb[1] % 2 == 0 && k->nb[2] == q8row &&
        v->nb[0] % 2 == 0 && v->nb[1] % 2 == 0 && v->nb[2] == q8row)
        return KV_Q8_0;
    return KV_ANY;
}

/* k_attn_decode<DPT, mode, ROWS> launched (mode as a compile-time read mode) */
template <int DPT, typename ROWS>
static void attn_decode_launch(cudaStream_t st, bool pdl, dim3 grid, float *out, const struct tv &q, const struct tv &k,
                               const struct tv &v, const struct tv &bias, bool has_bias, float scale,
                               const int32_t *len, int mode, const ROWS &rows)
{
    if (mode == KV_F32)
        cu_launch(st, pdl, k_attn_decode<DPT, KV_F32, ROWS>, grid, ATT_THREADS, 0, out, q, k, v, bias, has_bias, scale,
                  len, rows);
    else if (mode == KV_Q8_0)
        cu_launch(st, pdl, k_attn_decode<DPT, KV_Q8_0, ROWS>, grid, ATT_THREADS, 0, out, q, k, v, bias, has_bias,
                  scale, len, rows);
    else
        cu_launch(st, pdl, k_attn_decode<DPT, KV_ANY, ROWS>, grid, ATT_THREADS, 0, out, q, k, v, bias, has_bias, scale,
                  len, rows);
}

/* k_attn_decode over q [B, Hq, 1, D] (D <= ATT_THREADS) into out (B rows
 * of Hq * D floats): k, v as the cache (ad_none), or their type and row
 * strides with each batch row's cache in rows */
template <typename ROWS>
static void attn_decode(struct arena *a, float *out, const struct tv &q, const struct tensor *k,
                        const struct tensor *v, const struct tensor *bias, float scale, const int32_t *len, int mode,
                        const ROWS &rows)
{
    const int64_t D = q.ne[3];
    const int dpt = (int)((D + AD_G - 1) / AD_G);
    struct tv bv = bias ? tv_of(bias) : q;
    const dim3 grid(AD_CLUSTER, (unsigned)q.ne[1], (unsigned)q.ne[0]);
    const bool pdl = cuda_of(a)->pdl;
    cudaStream_t st = cuda_of(a)->st;
    const struct tv kv = tv_of(k), vv = tv_of(v);
    if (dpt > 8)
        attn_decode_launch<16>(st, pdl, grid, out, q, kv, vv, bv, bias != NULL, scale, len, dpt == 16 ? mode : KV_ANY,
                               rows);
    else
        attn_decode_launch<8>(st, pdl, grid, out, q, kv, vv, bv, bias != NULL, scale, len, dpt == 8 ? mode : KV_ANY,
                              rows);
    cu_launched(a, "attention (decode)");
}

/* The mode attn_decode runs k, v in (kv_mode, KV_ANY unless a thread's
 * dims are its DPT) */
static int decode_mode(const struct tensor *k, const struct tensor *v, int64_t D)
{
    const int dpt = (int)((D + AD_G - 1) / AD_G);
    return dpt == 8 || dpt == 16 ? kv_mode(k, v, D) : KV_ANY;
}

/* op_attention_append in one attn_decode launch; false when the operands
 * are not for it (a Q8_0 cache the kernel does not read by blocks) */
static bool cuda_attention_append(struct arena *a, struct tensor *out, const struct tensor *q,
                                  const struct tensor *kn, const struct tensor *vn, struct tensor *kc,
                                  struct tensor *vc, const struct tensor *at, float scale,
                                  const struct rope_params *rope)
{
    const int64_t B = q->ne[0], Hq = q->ne[1], D = q->ne[3];
    if (D > ATT_THREADS || B > 65535 || Hq > 65535) return false;
    const int mode = decode_mode(kc, vc, D);
    if (kc->type == TYPE_Q8_0 && mode != KV_Q8_0) return false;
    /* a rotation of all dims, a thread's DPT dims (8 or 16) whole */
    if (rope && (rope->n_dims != D || D % AD_G != 0 || (D / AD_G != 8 && D / AD_G != 16))) return false;
    const struct ad_app app = {tv_of(kn), tv_of(vn), (const int32_t *)at->data, (int)kc->type};
    if (!rope) {
        attn_decode(a, (float *)out->data, tv_of(q), kc, vc, NULL, scale, NULL, mode, app);
        return true;
    }
    struct ad_rope rot;
    static_cast<struct ad_app &>(rot) = app;
    for (int i = 0; i < ROPE_TAB; i++) rot.invf.f[i] = i < D / 2 ? scalar_rope_inv_freq(rope, i) : 0.0f;
    attn_decode(a, (float *)out->data, tv_of(q), kc, vc, NULL, scale, NULL, mode, rot);
    return true;
}

/* Each row's new key and value (kn, vn [R, Hk, 1, D] F32 views) into its
 * cache at rows[r].at, converted as k_cpy / k_cpy_blocks do (F32 copied,
 * F16 rounded, Q8_0 a block a thread as quant.c's ref); grid (R, Hk).
 * nb: the caches' position stride. */
__global__ static void k_kv_append(const struct ad_rows rows, struct tv kn, struct tv vn, int type, int64_t nb)
{
    cu_pdl_next();
    cu_pdl_wait();
    const int64_t b = blockIdx.x, h = blockIdx.y, D = kn.ne[3];
    const struct ad_row &r = rows.r[b];
    for (int s = 0; s < 2; s++) {
        const struct tv &x = s ? vn : kn;
        const char *xr = x.p + b * x.nb[0] + h * x.nb[1];
        char *o = (s ? r.v + h * r.vh : r.k + h * r.kh) + (int64_t)r.at * nb;
        if (type == TYPE_Q8_0) {
            for (int64_t bi = threadIdx.x; bi < D / QK; bi += blockDim.x) {
                float f[QK];
                for (int j = 0; j < QK; j++) f[j] = *(const float *)(xr + (bi * QK + j) * x.nb[3]);
                float amax = 0.0f;
                for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(f[j]));
                const float d = amax / 127;
                const float id = d ? 1.0f / d : 0.0f;
                const uint16_t dh = scalar_f32_to_fp16(d);
                char *blk = o + bi * 34;
                blk[0] = (char)(dh & 0xff);
                blk[1] = (char)(dh >> 8);
                for (int j = 0; j < QK; j++) blk[2 + j] = (char)(int8_t)roundf(f[j] * id);
            }
            continue;
        }
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
            const float f = *(const float *)(xr + d * x.nb[3]);
            if (type == TYPE_F16) ((uint16_t *)o)[d] = scalar_f32_to_fp16(f);
            else ((float *)o)[d] = f;
        }
    }
}

/* op_attention_group: per AG_ROWS rows one append and one decode
 * attention (ops.h); false when the operands are not for these kernels */
static bool cuda_attention_group(struct arena *a, struct tensor *out, const struct tensor *q, const struct tensor *k,
                                 const struct tensor *v, const struct attn_group *g)
{
    const int64_t R = q->ne[0], Hq = q->ne[1], Hk = k->ne[1], D = q->ne[3];
    const struct tensor *k0 = g->kc[0];
    const enum dtype type = k0->type;
    const int64_t nb = (int64_t)dtype_row_size(type, D);
    if (D > ATT_THREADS || R > 65535 || Hq > 65535 || Hk > 65535 || (type == TYPE_Q8_0 && D % QK)) return false;
    int mode = KV_ANY;
    for (int i = 0; i < g->n; i++) {
        const struct tensor *kc = g->kc[i], *vc = g->vc[i];
        if (kc->type != type || kc->nb[2] != nb || vc->nb[2] != nb ||
            (type != TYPE_Q8_0 && (kc->nb[3] != (int64_t)dtype_traits(type)->size || vc->nb[3] != kc->nb[3])))
            return false;
        const int mi = kv_mode(kc, vc, D);
        mode = i == 0 ? mi : mode == mi ? mode : KV_ANY;
    }
    /* AG_ROWS rows a launch: the table in its parameters */
    const unsigned th = type == TYPE_Q8_0 ? 32 : (unsigned)(D < 128 ? (D + 31) / 32 * 32 : 128);
    struct ad_rows rows = {};
    struct tv qv = tv_of(q), kv = tv_of(k), vv = tv_of(v);
    int i = 0, j = 0; /* member i, its row j */
    for (int64_t r0 = 0; r0 < R; r0 += AG_ROWS) {
        const int64_t n = R - r0 < AG_ROWS ? R - r0 : AG_ROWS;
        for (int64_t r = 0; r < n; r++) {
            const struct tensor *kc = g->kc[i], *vc = g->vc[i];
            rows.r[r] = ad_row{(char *)kc->data + j * kc->nb[0], (char *)vc->data + j * vc->nb[0], kc->nb[1],
                               vc->nb[1], (int32_t)g->n_past[i]};
            if (++j == g->rows[i]) {
                i++;
                j = 0;
            }
        }
        struct tv qc = qv, kn = kv, vn = vv;
        qc.p += r0 * qv.nb[0];
        kn.p += r0 * kv.nb[0];
        vn.p += r0 * vv.nb[0];
        qc.ne[0] = kn.ne[0] = vn.ne[0] = n;
        cu_launch(cuda_of(a)->st, cuda_of(a)->pdl, k_kv_append, dim3((unsigned)n, (unsigned)Hk), dim3(th), 0, rows,
                  kn, vn, (int)type, nb);
        if (!cu_launched(a, "attention group (append)")) return true;
        attn_decode(a, (float *)out->data + r0 * Hq * D, qc, k0, g->vc[0], NULL, g->scale, NULL, mode, rows);
        if (arena_status(a) != CBX_OK) return true;
    }
    return true;
}

static void cuda_attention(struct arena *a, struct tensor *out, const struct tensor *q,
                           const struct tensor *k, const struct tensor *v,
                           const struct tensor *bias, const struct attn_params *p)
{
    const int64_t B = q->ne[0], Hq = q->ne[1], Tq = q->ne[2], D = q->ne[3];
    int64_t Tk = k->ne[2];
    if (B * Hq * Tq * D == 0) return;
    if (Tq > INT32_MAX || Hq > 65535 || B > 65535) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "attention: grid [%lld, %lld, %lld] too large",
                   (long long)B, (long long)Hq, (long long)Tq);
        return;
    }
    cudaStream_t st = cuda_of(a)->st;
    const struct attn_probs *pr = p->probs;
    const bool split = Tq == 1 && D <= ATT_THREADS && !(pr && pr->n > 0);
    const int32_t *len = p->kv_len ? (const int32_t *)p->kv_len->data : NULL;
    struct tensor ks, vs;
    if (len && !split) { /* the other kernels take the length from the host */
        int32_t n = 0;
        if (!cu_download(a, &n, len, sizeof n)) return;
        if (n < 1 || n > Tk) {
            arena_fail(a, CBX_ERR_INTERNAL, "attention: %d of %lld keys", n, (long long)Tk);
            return;
        }
        ks = *k;
        vs = *v;
        ks.ne[2] = vs.ne[2] = Tk = n;
        k = &ks;
        v = &vs;
        len = NULL;
    }
    if (split && (len || Tk >= 2 * AD_KEYS)) {
        attn_decode(a, (float *)out->data, tv_of(q), k, v, bias, p->scale, len, kv_mode(k, v, D), ad_none{});
        return;
    }
    /* many queries with the BF16 hint: the tensor-core kernel (head dim 64,
     * F32 rows of float4s) */
    const struct tv qt = tv_of(q), kt = tv_of(k), vt = tv_of(v);
    const bool vec = rows_f4(kt) && rows_f4(vt);
    if (Tq >= 16 && D == FM_D && arena_bf16(a) && cuda_of(a)->mma && vec && rows_f4(qt) &&
        !(pr && pr->n > 0)) {
        struct tv bv = bias ? tv_of(bias) : qt;
        dim3 grid((unsigned)((Tq + FM_QB - 1) / FM_QB), (unsigned)Hq, (unsigned)B);
        k_attn_mma<<<grid, FM_THREADS, 0, st>>>((float *)out->data, qt, kt, vt, bv, bias != NULL, p->scale,
                                                 p->causal);
        cu_launched(a, "attention (bf16 mma)");
        return;
    }
    /* many queries: the flash kernel (head dim a multiple of 4, at most 128) */
    if (Tq >= 4 && D % 4 == 0 && D <= 128 && !(pr && pr->n > 0)) {
        const size_t sm = flash_smem(D);
        void (*fn)(float *, struct tv, struct tv, struct tv, struct tv, bool, float, bool, bool) =
            D == 64 ? k_attn_flash<1, 64> : D == 128 ? k_attn_flash<2, 128> : D < 64 ? k_attn_flash<1, 0>
                                                                                  : k_attn_flash<2, 0>;
        if (sm > 48 * 1024 &&
            !cu_ok(a, cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm),
                   "attention shared memory"))
            return;
        struct tv bv = bias ? tv_of(bias) : tv_of(q);
        dim3 grid((unsigned)((Tq + FA_QB - 1) / FA_QB), (unsigned)Hq, (unsigned)B);
        fn<<<grid, FA_THREADS, sm, st>>>((float *)out->data, tv_of(q), kt, vt, bv, bias != NULL, p->scale,
                                         p->causal, vec);
        cu_launched(a, "attention (flash)");
        return;
    }
    float *gscores = NULL;
    size_t smem = (size_t)(D + ATT_THREADS + 1) * 4 + ATT_THREADS * 8; /* qs, red, dred */
    if (Tk > ATT_SMEM_SCORES) {
        gscores = (float *)arena_alloc(a, (size_t)(B * Hq * Tq) * (size_t)Tk * 4);
        if (!gscores) return;
    } else {
        smem += (size_t)Tk * 4;
    }
    if (smem > 48 * 1024 &&
        !cu_ok(a, cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem),
               "attention shared memory"))
        return;
    struct attn_export ex = {0, 0, 0, 0, NULL};
    if (pr && pr->n > 0 && Tk > 0) {
        ex.b = pr->b;
        ex.h = pr->h;
        ex.i0 = pr->i0;
        ex.n = pr->n;
        ex.dst = (float *)arena_alloc(a, (size_t)(pr->n * Tk) * 4);
        if (!ex.dst) return;
    }
    struct tv bv = bias ? tv_of(bias) : tv_of(q);
    dim3 grid((unsigned)Tq, (unsigned)Hq, (unsigned)B);
    k_attention<<<grid, ATT_THREADS, smem, st>>>((float *)out->data, tv_of(q), tv_of(k), tv_of(v),
                                                 bv, bias != NULL, p->scale, p->causal, gscores, ex);
    if (!cu_launched(a, "attention")) return;
    if (ex.dst) { /* probabilities to the caller's host rows (stride ld) */
        cu_ok(a, cudaMemcpy2DAsync(pr->dst, (size_t)pr->ld * 4, ex.dst, (size_t)Tk * 4,
                                   (size_t)Tk * 4, (size_t)pr->n, cudaMemcpyDeviceToHost, st),
              "attention probabilities") &&
            cu_ok(a, cudaStreamSynchronize(st), "attention probabilities");
    }
}

/* ---- rotary ---------------------------------------------------------------------------------- */


__global__ static void k_rope(float *out, struct tv x, const char *pos, int64_t pos_nb,
                              const float *tab, struct rope_tab arg, int n_dims, int64_t n)
{
    const float *invf = tab ? tab : arg.f;
    const int half = n_dims / 2;
    CU_FOR(e, n) {
        const int64_t D = x.ne[3], d = e % D, r = e / D;
        const int64_t t = r % x.ne[2], h = (r / x.ne[2]) % x.ne[1], b = r / (x.ne[2] * x.ne[1]);
        const char *xr = x.p + b * x.nb[0] + h * x.nb[1] + t * x.nb[2];
        if (d >= n_dims) {
            out[e] = *(const float *)(xr + d * x.nb[3]);
            continue;
        }
        const int i = (int)(d < half ? d : d - half);
        const float ps = (float)*(const int32_t *)(pos + t * pos_nb);
        const float ang = ps * invf[i];
        const float c = rope_cos(ang), s = rope_sin(ang);
        const float x0 = *(const float *)(xr + i * x.nb[3]);
        const float x1 = *(const float *)(xr + (i + half) * x.nb[3]);
        out[e] = d < half ? rope_rot(x0, x1, true, c, s) : rope_rot(x1, x0, false, c, s);
    }
}

static void cuda_rope(struct arena *a, struct tensor *out, const struct tensor *x,
                      const struct tensor *pos, const struct rope_params *p)
{
    const int64_t n = tensor_nelements(out);
    if (n == 0) return;
    const int half = p->n_dims / 2;
    struct rope_tab arg;
    float *h = half <= ROPE_TAB ? arg.f : (float *)arena_alloc_host(a, (size_t)half * 4);
    if (!h) return;
    for (int i = 0; i < half; i++) h[i] = scalar_rope_inv_freq(p, i);
    for (int i = half; i < ROPE_TAB; i++) arg.f[i] = 0;
    const float *tab = NULL;
    if (half > ROPE_TAB && !(tab = (const float *)cu_upload(a, h, (size_t)half * 4))) return;
    k_rope<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cuda_of(a)->st>>>(
        (float *)out->data, tv_of(x), (const char *)pos->data, pos->nb[0], tab, arg, p->n_dims, n);
    cu_launched(a, "rope");
}

void cuda_register_nn(struct kernels *k)
{
    k->layer_norm = cuda_layer_norm;
    k->add_layer_norm = cuda_add_layer_norm;
    k->rms_norm = cuda_rms_norm;
    k->group_norm = cuda_group_norm;
    k->channel_affine = cuda_channel_affine;
    k->softmax = cuda_softmax;
    k->attention = cuda_attention;
    k->attention_group = cuda_attention_group;
    k->attention_append = cuda_attention_append;
    k->rope = cuda_rope;
}
