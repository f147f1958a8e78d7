/* linear.cu - CUDA kernels of the linear group (see ops.h): op_linear for
 * every weight type and op_matmul with broadcast batch dims.
 *
 * linear, y[M, N] = x[M, K] @ w[N, K]^T + b:
 *  - up to GEMV_ROWS rows of x (decode): a GEMV kernel, one warp (or S)
 *    per output, F32 accumulation (F32/Q8_0/Q4_0: the fast kernels below,
 *    with a fused norm prologue and epilogue; other types: k_gemv). Q8_0 /
 *    Q4_0 rows as the decode keeps them (16-byte aligned, K a multiple of
 *    256) take x quantised to Q8_0 and integer block dots, as the cpu
 *    backend's decode products and ggml's do (k_gemv_qs: the cpu's sums,
 *    bit for bit per block); otherwise the weight is widened on the fly
 *    exactly as quant.c's dequantize_row does.
 *    An arena that wants row-exact products (arena_set_row_exact: the
 *    batched decode) gets this path at any row count, GEMV_ROWS rows a
 *    launch, so each row gives the bits it gives alone.
 *  - F32 weights, more rows: one cuBLAS SGEMM (full F32 unless
 *    CBX_CUDA_TF32=1; TF32 tensor-core math with the arena's BF16 hint,
 *    cu_gemm).
 *  - other weights, more rows: the weight is widened to F32 in
 *    chunks of rows (exact, as the ref backend) and multiplied by SGEMM
 *    (cu_gemm, as above).
 *    With the arena's BF16 hint (arena_set_bf16) F16/BF16 weights instead
 *    go through cublasGemmEx on 16-bit operands with F32 accumulation.
 * matmul: SGEMM (batched over pointer arrays for the broadcast batch dims)
 * on the operands' own strides when cuBLAS can express them, else on a
 * contiguous copy. */
#include "cuda_common.h"

#define GEMV_ROWS 4
#define GEMV_WARPS 8
#define GEMV_UNROLL 8
#define GEMV_SEG 1152 /* bytes of a quantised row a warp stages (k_gemv_qs): half a
                        * Q4_0 row of K 4096, a Q8_0 row of K 1024 */
#define GEMV_RPW 4 /* most outputs a warp of k_gemv_qs takes (gemv_group.rpw) */
#define GEMV_BLOCKS_SM 3 /* blocks of the decode GEMVs a multiprocessor holds: their
                          * launch bounds' minimum (a block of 80-register threads) */
#define DEQUANT_CHUNK_BYTES ((size_t)64 << 20)

/* ---- decode GEMV ---------------------------------------------------------- */

/* What op_linear_ex does after the product, in the store: the activation
 * (act >= 0, as op_unary evaluates it) and the residual res[r][o] (ld ldy)
 * added in front, as op_add. {-1, NULL}: op_linear. */
struct gemv_epi {
    int act;
    const float *res;
};

/* The weights of one decode GEMV launch (op_linear_cat: up to
 * OP_LINEAR_CAT_MAX of one type and width, outputs side by side in y):
 * part i takes blocks [blk0, next part's blk0) and writes columns
 * [col, col + N) through its own bias and activation; the residual is the
 * launch's (a group of one). norm >= 0 (enum linear_norm_kind): the input
 * rows are normalised first, ng/nb the norm's weight and bias (F32 or
 * NULL; other types run the norm kernel first). xs: the kernel reads its
 * input rows from shared memory, staged there (and normalised) by
 * gemv_stage_rows, float4s laid out for lanes that stride over K (xw 0)
 * or that each take whole blocks (xw > 0, gemv_xpos), or quantised to
 * Q8_0 by gemv_stage_q8 (k_gemv_qs, which always stages); else from x.
 * x2 (op_linear_gated; k_gemv_qs without a norm only): the input is x *
 * x2, formed as gemv_stage_q8 reads them; ldx: the rows' stride in
 * floats, x's and x2's (K unless x2). */
struct gemv_part {
    const char *w; /* N rows of nb0 bytes */
    int64_t nb0, N, col;
    int act;
    unsigned blk0;
    const char *bias;
    int64_t bias_nb;
};
struct gemv_group {
    int n;
    struct gemv_part p[OP_LINEAR_CAT_MAX];
    const float *res;
    int norm;
    const float *ng, *nb;
    float eps;
    bool xs;
    int xw;
    bool early; /* every part's weight and the norm's are placed
                 * (cuda_weight_placed): their loads go out before
                 * cu_pdl_wait */
    int rpw;    /* outputs a warp (k_gemv_qs, k_gemv_f32; k_gemv_q takes one) */
    const float *x2;
    int64_t ldx;
};

/* this block's part */
__device__ static inline struct gemv_part gemv_pick(const struct gemv_group &g)
{
    struct gemv_part pp = g.p[0];
#pragma unroll
    for (int i = 1; i < OP_LINEAR_CAT_MAX; i++)
        if (i < g.n && blockIdx.x >= g.p[i].blk0) pp = g.p[i];
    return pp;
}

/* The epilogue's operands of output o, its bias and residual (gemv_epi),
 * loaded by the lane that stores o right after the wait, so their latency
 * overlaps the product (the fast kernels, one row: more rows load them in
 * the store, as registers would spill) */
template <int MM>
struct gemv_pre {
    float b, res[MM];
};

template <int S, int MM>
__device__ static inline gemv_pre<MM> gemv_preload(int64_t ldy, int64_t o, int64_t N, const char *bias,
                                                   int64_t bias_nb, const float *res)
{
    gemv_pre<MM> p;
    p.b = 0;
#pragma unroll
    for (int r = 0; r < MM; r++) p.res[r] = 0;
    if (MM == 1 && (threadIdx.x & 31) == 0 && (threadIdx.x >> 5) % S == 0 && o < N) {
        if (bias) p.b = *(const float *)(bias + o * bias_nb);
        if (res)
#pragma unroll
            for (int r = 0; r < MM; r++) p.res[r] = res[r * ldy + o];
    }
    return p;
}

/* output o of row r: the product's sum v (+ bias[o]) through the epilogue;
 * pb, pr: bias[o] and the residual when loaded ahead (gemv_pre) */
__device__ static inline void gemv_put(float *y, int64_t ldy, int r, int64_t o, float v, const char *bias,
                                       int64_t bias_nb, const struct gemv_epi &e, const float *pb = NULL,
                                       const float *pr = NULL)
{
    if (bias) v += pb ? *pb : *(const float *)(bias + o * bias_nb);
    if (e.act >= 0) v = scalar_unary(e.act, v, 0.0f, 0.0f);
    if (e.res) v = (pr ? *pr : e.res[r * ldy + o]) + v;
    y[r * ldy + o] = v;
}

/* lane 0 of each warp: the warp's sums acc[0..M) to y[r][o] (M <= MM,
 * MM a compile-time count, so acc stays in registers) */
template <int MM>
__device__ static inline void gemv_store(float *y, int64_t ldy, int M, int64_t o, const float (&acc)[MM],
                                         const char *bias, int64_t bias_nb, const struct gemv_epi &e)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < MM; r++) {
        float v = acc[r];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
        if (lane == 0 && r < M) gemv_put(y, ldy, r, o, v, bias, bias_nb, e);
    }
}

/* S warps per output (split-K): warp part s of output o reduces its sums
 * acc[0..M) into sh[warp][], and part 0 adds the S parts in order and
 * stores them through gemv_put. S 1: gemv_store. Every thread of the
 * block calls it (it synchronises the block). */
template <int S, int M>
__device__ static inline void gemv_finish(float *y, int64_t ldy, int64_t N, int64_t o, float (&acc)[M],
                                          const char *bias, int64_t bias_nb, const struct gemv_epi &e,
                                          float (*sh)[GEMV_ROWS], const gemv_pre<M> &pre)
{
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r < M; r++) {
        float v = acc[r];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
        if (S == 1) {
            if (lane == 0 && o < N) gemv_put(y, ldy, r, o, v, bias, bias_nb, e, M == 1 ? &pre.b : NULL,
                                             M == 1 ? &pre.res[r] : NULL);
        } else if (lane == 0) {
            sh[wi][r] = v;
        }
    }
    if (S == 1) return;
    __syncthreads();
    if (lane == 0 && wi % S == 0 && o < N)
#pragma unroll
        for (int r = 0; r < M; r++) {
            float v = sh[wi][r];
            for (int j = 1; j < S; j++) v += sh[wi + j][r];
            gemv_put(y, ldy, r, o, v, bias, bias_nb, e, M == 1 ? &pre.b : NULL, M == 1 ? &pre.res[r] : NULL);
        }
}

/* Where float4 i of a staged row goes (gemv_stage_rows): in order for W
 * 0 (the F32 kernel, whose lanes stride over K); for W > 0 (a power of
 * two dividing the row's blocks of QK; the quantised kernels, where each
 * lane takes whole blocks) float4 j of block bi = i / 8 goes to
 * ((bi / W) * 8 + j) * W + bi % W, so the lanes of a warp, each on its
 * own block, read adjacent float4s: no shared-memory bank conflicts (in
 * order, lanes 128 bytes apart all hit the same four banks). */
__device__ static inline int64_t gemv_xpos(int64_t i, int W)
{
    if (!W) return i;
    const int64_t bi = i >> 3;
    return (bi & ~(int64_t)(W - 1)) * 8 + (i & 7) * W + (bi & (W - 1));
}

/* the first float4 of block bi in a staged row (gemv_xpos) */
__device__ static inline int64_t gemv_xblk(int64_t bi, int W)
{
    return W ? (bi & ~(int64_t)(W - 1)) * 8 + (bi & (W - 1)) : bi * 8;
}

/* The norm's weight and bias at float4 threadIdx.x (where K / 4 is
 * larger), loaded by gemv_norm_pre before the wait on the kernel before
 * for placed norms, so gemv_stage_q8's affine map does not wait on
 * them (one L2 round trip less where K <= 4 * blockDim, T3's widths).
 * The staged quantised kernel only (k_gemv_qs): in the others (their
 * weight loads in flight take the registers) they would spill. */
struct gemv_ngb {
    float4 g, b;
};

__device__ static inline gemv_ngb gemv_norm_pre(const struct gemv_group &g, int64_t K)
{
    gemv_ngb p = {make_float4(1, 1, 1, 1), make_float4(0, 0, 0, 0)};
    if (g.norm >= 0 && threadIdx.x < K / 4) {
        if (g.ng) p.g = __ldg((const float4 *)g.ng + threadIdx.x);
        if (g.nb) p.b = __ldg((const float4 *)g.nb + threadIdx.x);
    }
    return p;
}

/* v normalised with its row's mean and 1 / std (st) and the affine map
 * gv, bv, in double as the norm kernels do; v as is without a norm */
__device__ static inline float4 gemv_norm_x(float4 v, const struct gemv_group &g, const double *st, float4 gv,
                                            float4 bv)
{
    if (g.norm < 0) return v;
    const double mean = st[0], rstd = st[1];
    return make_float4((float)(((double)v.x - mean) * rstd * gv.x + bv.x),
                       (float)(((double)v.y - mean) * rstd * gv.y + bv.y),
                       (float)(((double)v.z - mean) * rstd * gv.z + bv.z),
                       (float)(((double)v.w - mean) * rstd * gv.w + bv.w));
}

/* The norm's statistics of rows [0, M) of x [M, K] (g.norm >= 0) into
 * st[r] = {mean, 1 / std}, as the norm kernels compute them (ops_nn.c):
 * mean and mean square in double over the block in one reduction. Every
 * thread of the block calls it (it synchronises the block). */
__device__ static void gemv_norm_stats(double (*st)[2], const float *x, int M, int64_t K, const struct gemv_group &g)
{
    __shared__ double red[GEMV_WARPS][2 * GEMV_ROWS];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, K4 = (int)(K / 4);
    const float4 *x4 = (const float4 *)x;
    for (int r = 0; r < M; r++) {
        double s1 = 0, s2 = 0;
#pragma unroll 4
        for (int i = threadIdx.x; i < K4; i += blockDim.x) {
            const float4 v = __ldg(x4 + (int64_t)r * K4 + i);
            s1 += (double)v.x + (double)v.y + (double)v.z + (double)v.w;
            s2 += (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
        }
        for (int off = 16; off > 0; off >>= 1) {
            s1 += __shfl_xor_sync(0xffffffffu, s1, off);
            s2 += __shfl_xor_sync(0xffffffffu, s2, off);
        }
        if (lane == 0) {
            red[wi][2 * r] = s1;
            red[wi][2 * r + 1] = s2;
        }
    }
    __syncthreads();
    if (threadIdx.x < M) {
        const int r = threadIdx.x;
        double s1 = 0, s2 = 0;
        for (int w = 0; w < GEMV_WARPS; w++) {
            s1 += red[w][2 * r];
            s2 += red[w][2 * r + 1];
        }
        const double mean = g.norm == LINEAR_NORM_LAYER ? s1 / (double)K : 0.0, var = s2 / (double)K - mean * mean;
        st[r][0] = mean;
        st[r][1] = 1.0 / sqrt((var > 0 ? var : 0.0) + (double)g.eps);
    }
    __syncthreads();
}

/* The product's input in shared memory (g.xs): rows [0, M) of x [M, K]
 * (K % 4 == 0) at s4, float4 i of row r at r * K / 4 + gemv_xpos(i,
 * g.xw); normalised first when g.norm >= 0 (gemv_norm_stats, then the
 * affine map in double as the norm kernels do). x, the norm's weight and
 * bias are read from global memory (x twice with a norm: the second read
 * hits the cache). Every thread of the block calls it (it synchronises
 * the block). */
__device__ static void gemv_stage_rows(float4 *s4, const float *x, int M, int64_t K, const struct gemv_group &g)
{
    __shared__ double st[GEMV_ROWS][2]; /* each row's mean and 1 / std */
    const int K4 = (int)(K / 4);
    const float4 *x4 = (const float4 *)x;
    if (g.norm >= 0) gemv_norm_stats(st, x, M, K, g);
    const float4 one = make_float4(1, 1, 1, 1), zero = make_float4(0, 0, 0, 0);
    const float4 *g4 = g.norm >= 0 ? (const float4 *)g.ng : NULL, *b4 = g.norm >= 0 ? (const float4 *)g.nb : NULL;
#pragma unroll 4
    for (int e = threadIdx.x; e < M * K4; e += blockDim.x) {
        const int r = e / K4, i = e - r * K4;
        const float4 gv = g4 ? __ldg(g4 + i) : one, bv = b4 ? __ldg(b4 + i) : zero;
        s4[(int64_t)r * K4 + gemv_xpos(i, g.xw)] = gemv_norm_x(__ldg(x4 + e), g, st[r], gv, bv);
    }
    __syncthreads();
}

/* The staged quantised kernel's input (k_gemv_qs): rows [0, M) of x
 * [M, K] (normalised first when g.norm >= 0, as gemv_stage_rows) quantised
 * to Q8_0 as the cpu backend's decode products quantise theirs
 * (quantize_row_q8_0_ref bit for bit: scale absmax / 127 rounded to F16,
 * quants roundf(x / scale) through the unrounded scale's reciprocal). Row
 * r's block bi: its 32 quants as two uint4 planes, bytes 0-15 at q[2r *
 * nblk + bi] and 16-31 at q[(2r + 1) * nblk + bi] (lanes on consecutive
 * blocks read consecutive uint4s: no bank conflicts), its scale (the F16
 * widened, as float bits) and the sum of its quants at m[r * nblk + bi].
 * gemv_q8_rounds<U>: 8 / U adjacent threads take a block, U float4s
 * each, in rounds over the rows' blocks; gemv_stage_q8 takes U 1 while
 * the blocks are few (one round for one row of K 1024), 2 once they
 * outnumber the threads / 8 (K 4096, or the CFG pair's two rows: half the
 * rounds, each a chain of loads, shuffles and a division; U 4 spilled
 * under the kernel's launch bounds). pre: the norm's weight and bias at
 * float4 threadIdx.x (gemv_norm_pre). Every thread of the block calls
 * gemv_stage_q8 (it synchronises the block). */
template <int U>
__device__ static inline void gemv_q8_rounds(uint32_t *q32, int2 *m, const float4 *x4, int nblk, int nb, int ld4,
                                             const struct gemv_group &g, const gemv_ngb &pre, const double (*st)[2])
{
    constexpr int G = 8 / U, LG = U == 1 ? 3 : 2;
    const float4 one = make_float4(1, 1, 1, 1), zero = make_float4(0, 0, 0, 0);
    const float4 *g4 = g.norm >= 0 ? (const float4 *)g.ng : NULL, *b4 = g.norm >= 0 ? (const float4 *)g.nb : NULL;
    /* every thread runs every round (the shuffles) */
    for (int u0 = 0; u0 < nb * G; u0 += blockDim.x) {
        const int u = u0 + (int)threadIdx.x, part = u & (G - 1);
        const bool ok = u < nb * G;
        const int blk = ok ? u >> LG : 0;
        int r = 0, bi = blk; /* row and block (M <= GEMV_ROWS: no division) */
        while (bi >= nblk) {
            bi -= nblk;
            r++;
        }
        float4 v[U];
        float amax = 0;
#pragma unroll
        for (int t = 0; t < U; t++) {
            v[t] = zero;
            if (ok) {
                const int i = bi * 8 + part * U + t;
                const bool mine = i == (int)threadIdx.x;
                const float4 gv = mine ? pre.g : g4 ? __ldg(g4 + i) : one;
                const float4 bv = mine ? pre.b : b4 ? __ldg(b4 + i) : zero;
                float4 xv = __ldg(x4 + r * ld4 + i);
                if (g.x2) { /* op_linear_gated: x * x2, as op_mul */
                    const float4 u = __ldg((const float4 *)g.x2 + r * ld4 + i);
                    xv = make_float4(xv.x * u.x, xv.y * u.y, xv.z * u.z, xv.w * u.w);
                }
                v[t] = gemv_norm_x(xv, g, st[r], gv, bv);
            }
            amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v[t].x), fabsf(v[t].y)), fmaxf(fabsf(v[t].z), fabsf(v[t].w))));
        }
#pragma unroll
        for (int off = 1; off < G; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        const float d = amax / ((1 << 7) - 1), id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
#pragma unroll
        for (int t = 0; t < U; t++) {
            const int q0 = (int)roundf(v[t].x * id), q1 = (int)roundf(v[t].y * id), q2 = (int)roundf(v[t].z * id),
                      q3 = (int)roundf(v[t].w * id);
            sum += q0 + q1 + q2 + q3;
            const int j = part * U + t;
            if (ok)
                q32[(((2 * r + (j >> 2)) * nblk + bi) << 2) + (j & 3)] =
                    (uint32_t)(q0 & 0xff) | (uint32_t)(q1 & 0xff) << 8 | (uint32_t)(q2 & 0xff) << 16 |
                    (uint32_t)(q3 & 0xff) << 24;
        }
#pragma unroll
        for (int off = 1; off < G; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        if (ok && part == 0) m[blk] = make_int2(__float_as_int(cu_h2f(cu_f2h(d))), sum);
    }
}

__device__ static void gemv_stage_q8(uint4 *q, int2 *m, const float *x, int M, int64_t K,
                                     const struct gemv_group &g, const gemv_ngb &pre)
{
    __shared__ double st[GEMV_ROWS][2];
    const int nblk = (int)(K / QK), nb = M * nblk, ld4 = (int)(g.ldx / 4);
    if (g.norm >= 0) gemv_norm_stats(st, x, M, K, g);
    if (nb * 8 > (int)blockDim.x)
        gemv_q8_rounds<2>((uint32_t *)q, m, (const float4 *)x, nblk, nb, ld4, g, pre, st);
    else
        gemv_q8_rounds<1>((uint32_t *)q, m, (const float4 *)x, nblk, nb, ld4, g, pre, st);
    __syncthreads();
}

/* One warp per output o. Block types: each lane takes whole blocks (lane,
 * lane + 32, ...: the warp reads consecutive blocks), widening each
 * element exactly as d_block_elem; F16/BF16 rows with 4-byte aligned
 * pairs: each lane takes element pairs; otherwise lanes stride over K. */
__global__ static void k_gemv(float *y, int64_t ldy, const float *x, int M, int64_t K,
                              int64_t N, const char *w, int64_t nb0, int64_t nb1, int type,
                              int bs, bool pairs, const char *bias, int64_t bias_nb)
{
    const int lane = threadIdx.x & 31;
    const int64_t o = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (o >= N) return;
    const char *row = w + o * nb0;
    float acc[GEMV_ROWS] = {0, 0, 0, 0};
    if (bs) {
        const int64_t nblk = K / QK;
        for (int64_t bi = lane; bi < nblk; bi += 32) {
            const char *blk = row + bi * bs;
            const float *xb = x + bi * QK;
            for (int j = 0; j < QK; j++) {
                const float wv = d_block_elem(type, blk, j);
#pragma unroll
                for (int r = 0; r < GEMV_ROWS; r++)
                    if (r < M) acc[r] += wv * xb[r * K + j];
            }
        }
    } else if (pairs) {
        for (int64_t i = 2 * lane; i + 1 < K; i += 64) {
            const uint32_t u = *(const uint32_t *)(row + i * 2);
            const uint16_t h0 = (uint16_t)(u & 0xffff), h1 = (uint16_t)(u >> 16);
            const float w0 = type == TYPE_F16 ? scalar_fp16_to_f32(h0) : scalar_bf16_to_f32(h0);
            const float w1 = type == TYPE_F16 ? scalar_fp16_to_f32(h1) : scalar_bf16_to_f32(h1);
#pragma unroll
            for (int r = 0; r < GEMV_ROWS; r++)
                if (r < M) acc[r] += w0 * x[r * K + i] + w1 * x[r * K + i + 1];
        }
        if ((K & 1) && lane == 0) {
            const float wv = d_ldf(type, row + (K - 1) * 2);
#pragma unroll
            for (int r = 0; r < GEMV_ROWS; r++)
                if (r < M) acc[r] += wv * x[r * K + K - 1];
        }
    } else {
        for (int64_t i = lane; i < K; i += 32) {
            const float wv = d_ldf(type, row + i * nb1);
#pragma unroll
            for (int r = 0; r < GEMV_ROWS; r++)
                if (r < M) acc[r] += wv * x[r * K + i];
        }
    }
    gemv_store<GEMV_ROWS>(y, ldy, M, o, acc, bias, bias_nb, gemv_epi{-1, NULL});
}

/* Decode GEMVs for the common weight layouts, one warp per output (S
 * warps, each a contiguous part of K, when K is long enough that one warp
 * would load it in several rounds: gemv_split), up to GEMV_ROWS rows of x,
 * the bias (and op_linear_ex's activation and residual) applied in the
 * same kernel. M (rows) and S are compile-time counts, so the sums stay
 * in registers; products are summed by FMA:
 *  - F32 rows 16-byte aligned: float4 loads of the weight and x (a warp
 *    takes g.rpw outputs one after the other where one a warp would need
 *    more than one wave of blocks);
 *  - Q8_0 / Q4_0 rows 16-byte aligned, K a multiple of 8 * S blocks:
 *    staged through shared memory (k_gemv_qs);
 *  - other Q8_0 / Q4_0 rows (2-byte aligned blocks): each lane takes whole
 *    blocks (the warp reads consecutive ones), loads the scale once and the
 *    quants as 16-bit words, and widens each as quant.c does (d * q).
 * Launch bounds: at most 80 registers, three blocks an SM (as before the
 * norm prologue). */

template <int S, int M>
__global__ static void __launch_bounds__(32 * GEMV_WARPS, GEMV_BLOCKS_SM)
    k_gemv_f32(float *y, int64_t ldy, const float *x, int64_t K, struct gemv_group g)
{
    __shared__ float sh[S > 1 ? GEMV_WARPS : 1][GEMV_ROWS];
    extern __shared__ float4 sx4[]; /* the staged rows (g.xs) */
    const struct gemv_part pp = gemv_pick(g);
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, R = g.rpw;
    const int64_t N = pp.N, o0 = ((int64_t)(blockIdx.x - pp.blk0) * (GEMV_WARPS / S) + wi / S) * R;
    const int64_t K4 = K / 4, per = (K4 + S - 1) / S, beg = (wi % S) * per, end = beg + per < K4 ? beg + per : K4;
    /* GEMV_UNROLL weight loads in flight per lane before the products; the
     * first output's first round is issued before the norm prologue (and,
     * for placed weights, before the wait on the kernel before) */
    cu_pdl_next();
    if (!g.early) cu_pdl_wait();
    float4 wv[GEMV_UNROLL];
#define GEMV_LOAD_F32(o, i0)                                                        \
    _Pragma("unroll") for (int u = 0; u < GEMV_UNROLL; u++)                         \
    {                                                                               \
        const int64_t i = (i0) + 32 * u;                                            \
        wv[u] = (o) < N && i < end ? __ldg(row + i) : make_float4(0, 0, 0, 0);      \
    }
    const float4 *row = (const float4 *)(pp.w + (o0 < N ? o0 : 0) * pp.nb0);
    GEMV_LOAD_F32(o0, beg + lane);
    cu_pdl_wait();
    const float *xs = x;
    if (g.xs) {
        gemv_stage_rows(sx4, x, M, K, g);
        xs = (const float *)sx4;
    }
    /* several outputs a warp (g.rpw, so a launch fits one wave of
     * blocks): one after the other, the next one's first round loaded
     * right after the last products of the one before */
    for (int j = 0; j < R; j++) {
        const int64_t o = o0 + j;
        const gemv_pre<M> pre = gemv_preload<S, M>(ldy, o, N, pp.bias, pp.bias_nb, g.res);
        float acc[M];
#pragma unroll
        for (int r = 0; r < M; r++) acc[r] = 0;
        for (int64_t i0 = beg + lane; o < N && i0 < end; i0 += 32 * GEMV_UNROLL) {
#pragma unroll
            for (int r = 0; r < M; r++) {
                const float4 *xr = (const float4 *)(xs + r * K);
#pragma unroll
                for (int u = 0; u < GEMV_UNROLL; u++) {
                    const int64_t i = i0 + 32 * u;
                    if (i < end) {
                        const float4 xv = xr[i];
                        acc[r] = fmaf(wv[u].x, xv.x, acc[r]);
                        acc[r] = fmaf(wv[u].y, xv.y, acc[r]);
                        acc[r] = fmaf(wv[u].z, xv.z, acc[r]);
                        acc[r] = fmaf(wv[u].w, xv.w, acc[r]);
                    }
                }
            }
            if (i0 + 32 * GEMV_UNROLL < end) {
                GEMV_LOAD_F32(o, i0 + 32 * GEMV_UNROLL);
            } else if (j + 1 < R) { /* the next output's first round */
                row = (const float4 *)((const char *)row + pp.nb0);
                GEMV_LOAD_F32(o + 1, beg + lane);
            }
        }
        if (S > 1 && j > 0) __syncthreads(); /* sh read by the output before */
        gemv_finish<S, M>(y + pp.col, ldy, N, o, acc, pp.bias, pp.bias_nb, gemv_epi{pp.act, g.res}, sh, pre);
    }
#undef GEMV_LOAD_F32
}

/* one block's product with the M rows of x: the block's float4 j of row
 * r at xb[r * rs + j * js]. The block's elements widened as quant.c does
 * (d * q), summed by FMA into a block sum added to acc[r]. Q4_0 bytes j
 * hold elements j (low nibble) and j + 16 (high). q: the 16-bit words of
 * the quants (2-byte aligned). */
template <int TYPE, int M>
__device__ static inline void q_block_dot(float (&acc)[M], float d, const uint16_t *q, const float4 *xb, int64_t js,
                                          int64_t rs)
{
    float s[M];
#pragma unroll
    for (int r = 0; r < M; r++) s[r] = 0;
    if (TYPE == TYPE_Q8_0) {
#pragma unroll
        for (int j = 0; j < QK / 4; j++) {
            const uint16_t u0 = q[2 * j], u1 = q[2 * j + 1];
            const float w0 = d * (float)(int8_t)(u0 & 0xff), w1 = d * (float)(int8_t)(u0 >> 8);
            const float w2 = d * (float)(int8_t)(u1 & 0xff), w3 = d * (float)(int8_t)(u1 >> 8);
#pragma unroll
            for (int r = 0; r < M; r++) {
                const float4 xv = xb[r * rs + j * js];
                s[r] = fmaf(w0, xv.x, s[r]);
                s[r] = fmaf(w1, xv.y, s[r]);
                s[r] = fmaf(w2, xv.z, s[r]);
                s[r] = fmaf(w3, xv.w, s[r]);
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < QK / 8; j++) { /* bytes 4j .. 4j + 3 */
            const uint16_t u0 = q[2 * j], u1 = q[2 * j + 1];
            const float l0 = d * (float)((int)(u0 & 0x0f) - 8), l1 = d * (float)((int)((u0 >> 8) & 0x0f) - 8);
            const float l2 = d * (float)((int)(u1 & 0x0f) - 8), l3 = d * (float)((int)((u1 >> 8) & 0x0f) - 8);
            const float h0 = d * (float)((int)((u0 >> 4) & 0x0f) - 8), h1 = d * (float)((int)(u0 >> 12) - 8);
            const float h2 = d * (float)((int)((u1 >> 4) & 0x0f) - 8), h3 = d * (float)((int)(u1 >> 12) - 8);
#pragma unroll
            for (int r = 0; r < M; r++) {
                const float4 xl = xb[r * rs + j * js], xh = xb[r * rs + (QK / 8 + j) * js];
                s[r] = fmaf(l0, xl.x, s[r]);
                s[r] = fmaf(l1, xl.y, s[r]);
                s[r] = fmaf(l2, xl.z, s[r]);
                s[r] = fmaf(l3, xl.w, s[r]);
                s[r] = fmaf(h0, xh.x, s[r]);
                s[r] = fmaf(h1, xh.y, s[r]);
                s[r] = fmaf(h2, xh.z, s[r]);
                s[r] = fmaf(h3, xh.w, s[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < M; r++) acc[r] += s[r];
}

/* Q8_0 / Q4_0 rows with 2-byte aligned blocks: each lane takes whole
 * blocks (the warp reads consecutive ones) as 16-bit words. */
template <int TYPE, int S, int M>
__global__ static void __launch_bounds__(32 * GEMV_WARPS, GEMV_BLOCKS_SM)
    k_gemv_q(float *y, int64_t ldy, const float *x, int64_t K, struct gemv_group g)
{
    constexpr int BW = TYPE == TYPE_Q8_0 ? 17 : 9; /* a block's 16-bit words */
    __shared__ float sh[S > 1 ? GEMV_WARPS : 1][GEMV_ROWS];
    extern __shared__ float4 sx4[]; /* the staged rows (g.xs) */
    const struct gemv_part pp = gemv_pick(g);
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    const int64_t N = pp.N, o = (int64_t)(blockIdx.x - pp.blk0) * (GEMV_WARPS / S) + wi / S;
    const uint16_t *row = (const uint16_t *)(pp.w + (o < N ? o : 0) * pp.nb0);
    float acc[M];
#pragma unroll
    for (int r = 0; r < M; r++) acc[r] = 0;
    const int64_t nblk = K / QK, per = (nblk + S - 1) / S, beg = (wi % S) * per,
                  end = beg + per < nblk ? beg + per : nblk;
    /* the first block's loads are issued before the norm prologue (and,
     * for placed weights, before the wait on the kernel before) */
    cu_pdl_next();
    if (!g.early) cu_pdl_wait();
    uint16_t q[BW];
#define GEMV_LOAD_Q(bi)                                                                 \
    _Pragma("unroll") for (int j = 0; j < BW; j++) q[j] = o < N && (bi) < end ? __ldg(row + (bi) * BW + j) : 0;
    GEMV_LOAD_Q(beg + lane);
    cu_pdl_wait();
    const gemv_pre<M> pre = gemv_preload<S, M>(ldy, o, N, pp.bias, pp.bias_nb, g.res);
    const float4 *xs = (const float4 *)x;
    if (g.xs) {
        gemv_stage_rows(sx4, x, M, K, g);
        xs = sx4;
    }
    const int xw = g.xs ? g.xw : 0;
    for (int64_t bi = beg + lane; o < N && bi < end; bi += 32) {
        uint16_t c[BW];
#pragma unroll
        for (int j = 0; j < BW; j++) c[j] = q[j];
        GEMV_LOAD_Q(bi + 32);
        q_block_dot<TYPE, M>(acc, scalar_fp16_to_f32(c[0]), c + 1, xs + gemv_xblk(bi, xw), xw ? xw : 1, K / 4);
    }
#undef GEMV_LOAD_Q
    gemv_finish<S, M>(y + pp.col, ldy, N, o, acc, pp.bias, pp.bias_nb, gemv_epi{pp.act, g.res}, sh, pre);
}

/* One block's integer dot with a Q8_0 block of x (gemv_stage_q8: planes
 * x0 and x1, quant sum xs): the weight's quants qw as 32-bit words of its
 * bytes. Q4_0 byte j holds elements j (low nibble) and j + 16 (high),
 * each stored + 8: the nibbles' dot less 8 times the sum of x's quants.
 * Exact in int32, as quant.c's dot_blocks. */
template <int TYPE>
__device__ static inline int q8x_block_dot(const uint32_t *qw, uint4 x0, uint4 x1, int xs)
{
    const int xv[8] = {(int)x0.x, (int)x0.y, (int)x0.z, (int)x0.w, (int)x1.x, (int)x1.y, (int)x1.z, (int)x1.w};
    int s = 0;
    if (TYPE == TYPE_Q8_0) {
#pragma unroll
        for (int t = 0; t < 8; t++) s = __dp4a((int)qw[t], xv[t], s);
    } else {
        s = -8 * xs;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            s = __dp4a((int)(qw[t] & 0x0f0f0f0fu), xv[t], s);
            s = __dp4a((int)((qw[t] >> 4) & 0x0f0f0f0fu), xv[4 + t], s);
        }
    }
    return s;
}

/* 16 bytes global -> shared without registers (cp.async, compute
 * capability 8.0 and newer), completed by cu_cp_wait */
__device__ static inline void cu_cp16(uint4 *dst, const uint4 *src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src)
                 : "memory");
#else
    *dst = __ldg(src);
#endif
}

/* this thread's cu_cp16 copies done (other threads see them after a
 * barrier) */
__device__ static inline void cu_cp_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\ncp.async.wait_all;" ::: "memory");
#endif
}

/* Q8_0 / Q4_0 rows 16-byte aligned, K a multiple of 8 * S blocks: warp
 * part s of outputs o0 .. o0 + g.rpw loads their parts of the rows (per *
 * block bytes each, at most GEMV_SEG), all in flight at once (before the
 * wait on the kernel before for placed weights): the first into
 * registers, stored to the warp's stage after x's staging, the others
 * straight into their stages (cp.async). x is quantised to Q8_0
 * (gemv_stage_q8, as the cpu backend's decode products), and each lane
 * takes whole blocks from a stage: integer dot products (dp4a), each
 * block's sum times both scales added to the lane's float sum, as
 * quant.c's dot_blocks. Several outputs a warp (g.rpw) keep a launch
 * within one wave of blocks, each block staging the input rows once.
 * Dynamic shared memory: x's quants and scales (M * nblk * 40 bytes),
 * then GEMV_WARPS * g.rpw stages of per * block bytes. */
template <int TYPE, int S, int M>
__global__ static void __launch_bounds__(32 * GEMV_WARPS, GEMV_BLOCKS_SM)
    k_gemv_qs(float *y, int64_t ldy, const float *x, int64_t K, struct gemv_group g)
{
    constexpr int BS = TYPE == TYPE_Q8_0 ? 34 : 18, CH = (GEMV_SEG / 16 + 31) / 32, NW = (BS - 2) / 4;
    __shared__ float sh[S > 1 ? GEMV_WARPS : 1][GEMV_ROWS];
    extern __shared__ uint4 sq4[];
    const struct gemv_part pp = gemv_pick(g);
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, R = g.rpw;
    const int64_t N = pp.N, o0 = ((int64_t)(blockIdx.x - pp.blk0) * (GEMV_WARPS / S) + wi / S) * R;
    const int64_t nblk = K / QK, per = nblk / S, beg = (wi % S) * per;
    const int nch = (int)(per * BS / 16);
    int2 *xm = (int2 *)(sq4 + 2 * M * nblk);
    uint4 *stage = sq4 + (int64_t)M * nblk * 5 / 2 + (int64_t)wi * R * nch;
    cu_pdl_next();
    if (!g.early) cu_pdl_wait();
    const gemv_ngb npre = gemv_norm_pre(g, K);
    /* the first output's part into registers (stored to the stage after
     * the input rows), the others' straight to their stages */
    uint4 c[CH];
    const uint4 *src = (const uint4 *)(pp.w + (o0 < N ? o0 : 0) * pp.nb0 + beg * BS);
#pragma unroll
    for (int u = 0; u < CH; u++) {
        const int i = lane + 32 * u;
        if (o0 < N && i < nch) c[u] = __ldg(src + i);
    }
    for (int i = 1; i < R && o0 + i < N; i++) {
        src += pp.nb0 / 16;
        for (int u = lane; u < nch; u += 32) cu_cp16(stage + i * nch + u, src + u);
    }
    cu_pdl_wait();
    gemv_pre<M> pre[GEMV_RPW];
#pragma unroll
    for (int i = 0; i < GEMV_RPW; i++)
        if (i < R) pre[i] = gemv_preload<S, M>(ldy, o0 + i, N, pp.bias, pp.bias_nb, g.res);
    gemv_stage_q8(sq4, xm, x, M, K, g, npre);
#pragma unroll
    for (int u = 0; u < CH; u++) {
        const int i = lane + 32 * u;
        if (o0 < N && i < nch) stage[i] = c[u];
    }
    if (R > 1) cu_cp_wait();
    __syncwarp();
#pragma unroll
    for (int i = 0; i < GEMV_RPW; i++) {
        if (i >= R) break; /* R is the block's: every warp leaves together */
        const int64_t o = o0 + i;
        const uint32_t *s32 = (const uint32_t *)(stage + i * nch);
        float acc[M];
#pragma unroll
        for (int r = 0; r < M; r++) acc[r] = 0;
        for (int64_t b = lane; o < N && b < per; b += 32) {
            /* the block's scale, then its quants as words: 4-byte loads
             * from the word holding its first quant byte, shifted by 0 or
             * 2 bytes */
            const int off = (int)b * BS + 2, w0 = off >> 2, sft = (off & 3) * 8;
            const float dw = cu_h2f(((const uint16_t *)s32)[b * BS / 2]);
            uint32_t wv[NW + 1], qw[NW];
#pragma unroll
            for (int t = 0; t < NW; t++) wv[t] = s32[w0 + t];
            wv[NW] = sft ? s32[w0 + NW] : 0; /* a block that ends its stage starts on a word */
#pragma unroll
            for (int t = 0; t < NW; t++) qw[t] = __funnelshift_r(wv[t], wv[t + 1], sft);
            const int64_t bi = beg + b;
#pragma unroll
            for (int r = 0; r < M; r++) {
                const int2 xb = xm[r * nblk + bi];
                const int si = q8x_block_dot<TYPE>(qw, sq4[2 * r * nblk + bi], sq4[(2 * r + 1) * nblk + bi], xb.y);
                acc[r] += (dw * __int_as_float(xb.x)) * (float)si;
            }
        }
        if (S > 1 && i > 0) __syncthreads(); /* sh read by the output before */
        gemv_finish<S, M>(y + pp.col, ldy, N, o, acc, pp.bias, pp.bias_nb, gemv_epi{pp.act, g.res}, sh, pre[i]);
    }
}

/* Warps per output: enough that each lane's loads are in flight at once
 * (one round of `round` units each), at most 4. */
static int gemv_split(int64_t units, int64_t round)
{
    return units >= 4 * round ? 4 : units >= 2 * round ? 2 : 1;
}

/* blocks of the decode GEMV kernels for N outputs, S warps an output and
 * R outputs a warp */
static unsigned gemv_grid(int64_t N, int S, int R)
{
    const int64_t per = (int64_t)(GEMV_WARPS / S) * R;
    return (unsigned)((N + per - 1) / per);
}

/* The decode GEMV kernel of a type (F32: k_gemv_f32; Q8_0 / Q4_0:
 * k_gemv_qs when staged, else k_gemv_q) for S warps per output and M
 * rows, as compile-time counts */
template <int TYPE, int S, int M>
static void gemv_go(cudaStream_t st, bool pdl, unsigned gr, size_t sm, bool staged, float *y, int64_t ldy, const float *x,
                    int64_t K, const struct gemv_group &g)
{
    const unsigned t = 32 * GEMV_WARPS;
    if constexpr (TYPE == TYPE_F32) {
        if constexpr (S <= 4) cu_launch(st, pdl, k_gemv_f32<S, M>, gr, t, sm, y, ldy, x, K, g);
    } else if (staged) {
        cu_launch(st, pdl, k_gemv_qs<TYPE, S, M>, gr, t, sm, y, ldy, x, K, g);
    } else if constexpr (S <= 4) {
        cu_launch(st, pdl, k_gemv_q<TYPE, S, M>, gr, t, sm, y, ldy, x, K, g);
    }
}

template <int TYPE, int S>
static void gemv_rows(cudaStream_t st, bool pdl, unsigned gr, size_t sm, bool staged, float *y, int64_t ldy, const float *x,
                      int m, int64_t K, const struct gemv_group &g)
{
    switch (m) {
    case 1: gemv_go<TYPE, S, 1>(st, pdl, gr, sm, staged, y, ldy, x, K, g); break;
    case 2: gemv_go<TYPE, S, 2>(st, pdl, gr, sm, staged, y, ldy, x, K, g); break;
    case 3: gemv_go<TYPE, S, 3>(st, pdl, gr, sm, staged, y, ldy, x, K, g); break;
    default: gemv_go<TYPE, S, 4>(st, pdl, gr, sm, staged, y, ldy, x, K, g); break;
    }
}

/* The dynamic shared memory of a k_gemv_qs launch: m input rows of nblk
 * Q8_0 blocks (40 bytes each as staged) and GEMV_WARPS * rpw stages of a
 * row part (nblk / S blocks of bs bytes). */
static size_t gemv_qs_smem(int64_t m, int64_t nblk, int S, int rpw, int64_t bs)
{
    return (size_t)m * (size_t)nblk * 40 + (size_t)GEMV_WARPS * (size_t)rpw * (size_t)(nblk / S * bs);
}

template <int TYPE>
static void gemv_launch(cudaStream_t st, bool pdl, int S, unsigned gr, bool staged, float *y, int64_t ldy, const float *x,
                        int m, int64_t K, const struct gemv_group &g)
{
    const size_t sm = staged ? gemv_qs_smem(m, K / QK, S, g.rpw, TYPE == TYPE_Q8_0 ? 34 : 18)
                      : g.xs ? (size_t)m * (size_t)K * 4 /* gemv_stage_rows */
                             : 0;
    switch (S) {
    case 1: gemv_rows<TYPE, 1>(st, pdl, gr, sm, staged, y, ldy, x, m, K, g); break;
    case 2: gemv_rows<TYPE, 2>(st, pdl, gr, sm, staged, y, ldy, x, m, K, g); break;
    case 4: gemv_rows<TYPE, 4>(st, pdl, gr, sm, staged, y, ldy, x, m, K, g); break;
    default: gemv_rows<TYPE, 8>(st, pdl, gr, sm, staged, y, ldy, x, m, K, g); break;
    }
}

/* Whether the fast decode GEMV takes weight w (F32 rows 16-byte aligned,
 * or contiguous Q8_0 / Q4_0 rows 2-byte aligned). */
static bool gemv_fits(const struct tensor *w)
{
    if (w->ne[0] > (int64_t)INT32_MAX) return false;
    if (w->type == TYPE_F32) return w->nb[1] == 4 && w->nb[0] % 16 == 0 && (uintptr_t)w->data % 16 == 0;
    return (w->type == TYPE_Q8_0 || w->type == TYPE_Q4_0) && w->nb[0] % 2 == 0 && (uintptr_t)w->data % 2 == 0 &&
           w->nb[1] == (int64_t)(dtype_traits(w->type)->size / (size_t)QK);
}

/* The most shared memory the decode GEMV's staged input rows take (M * K
 * floats, gemv_stage_rows; M * K / 32 Q8_0 blocks of 40 bytes,
 * gemv_stage_q8): more runs a norm as its own kernel first and reads the
 * rows from global memory. With the warps' stages (GEMV_WARPS *
 * GEMV_SEG) and the kernels' static arrays it stays within the 48 KB a
 * block gets without opting in. */
#define GEMV_X_SMEM (38 * 1024)
#define GEMV_STATIC_SMEM 1024  /* bound of the kernels' static arrays */
#define GEMV_SMEM_MAX (48 * 1024) /* a block's shared memory without opting in */
static_assert(GEMV_X_SMEM + GEMV_WARPS * GEMV_SEG + GEMV_STATIC_SMEM <= GEMV_SMEM_MAX,
              "decode GEMV shared memory over 48 KB");

/* The fast decode GEMV over weights w[0..n) of one type (gemv_fits), the
 * products side by side in y (ld ldy), part i through b[i] and act[i];
 * the residual as gemv_group's; norm (or NULL) in the prologue; x2 (or
 * NULL) the gated product's second input, rows ldx floats apart as x's
 * (K without x2). false (nothing launched) when it does not fit. */
static bool gemv_fast_group(struct arena *a, float *y, int64_t ldy, const float *x, int64_t ldx, const float *x2,
                            int64_t M, int64_t K, int n, const struct tensor *const *w,
                            const struct tensor *const *b, const int *act, const float *res,
                            const struct linear_norm *norm)
{
    /* more rows: in launches of GEMV_ROWS when the arena wants each row's
     * products as it would be alone (arena_set_row_exact: the batched
     * decode of t3_batch_step), else the GEMM paths */
    if ((M > GEMV_ROWS && !arena_row_exact(a)) || K % 4 || (uintptr_t)x % 16 || n < 1 || n > OP_LINEAR_CAT_MAX)
        return false;
    const int64_t mc = M < GEMV_ROWS ? M : GEMV_ROWS;
    const bool xfits = (size_t)mc * (size_t)K * 4 <= GEMV_X_SMEM;
    if (norm && ((norm->g && (norm->g->type != TYPE_F32 || !tensor_is_contiguous(norm->g) ||
                              (uintptr_t)norm->g->data % 16)) ||
                 (norm->b && (norm->b->type != TYPE_F32 || !tensor_is_contiguous(norm->b) ||
                              (uintptr_t)norm->b->data % 16))))
        return false;
    const int type = (int)w[0]->type;
    for (int i = 0; i < n; i++)
        if ((int)w[i]->type != type || !gemv_fits(w[i])) return false;
    /* quantised rows: staged when every weight's rows are 16-byte aligned
     * and some S (1, 2, 4, 8) gives parts of 8k blocks within GEMV_SEG
     * bytes, the fewest such parts (more, to fill the GPU with blocks,
     * measured slower: every block stages and normalises the input rows,
     * and S warps share one output), and x's Q8_0 blocks fit */
    const int64_t nblk = K / QK, bs = type == TYPE_Q8_0 ? 34 : 18;
    bool staged = type != TYPE_F32 && K % QK == 0 && (size_t)mc * (size_t)nblk * 40 <= GEMV_X_SMEM;
    for (int i = 0; staged && i < n; i++)
        staged = w[i]->nb[0] % 16 == 0 && (uintptr_t)w[i]->data % 16 == 0;
    int S = type == TYPE_F32 ? gemv_split(K / 4, 32 * GEMV_UNROLL) : gemv_split(K / QK, 32);
    if (staged) {
        S = 1;
        while (S < 8 && !(nblk % (8 * S) == 0 && nblk / S * bs <= GEMV_SEG)) S *= 2;
        staged = nblk % (8 * S) == 0 && nblk / S * bs <= GEMV_SEG;
        if (!staged) S = gemv_split(K / QK, 32);
    }
    if (norm && !staged && !xfits) return false;
    if (x2 ? norm || !staged || ldx % 4 || (uintptr_t)x2 % 16 : ldx != K) return false;
    struct gemv_group g;
    memset(&g, 0, sizeof g);
    g.ldx = ldx;
    g.n = n;
    g.res = res;
    g.early = true;
    for (int i = 0; i < n; i++) g.early = g.early && cuda_weight_placed(w[i]);
    if (norm)
        g.early = g.early && (!norm->g || cuda_weight_placed(norm->g)) && (!norm->b || cuda_weight_placed(norm->b));
    g.norm = norm ? (int)norm->kind : -1;
    /* staged and F32: the fewest outputs a warp that fit the launch in
     * one wave of blocks (GEMV_BLOCKS_SM a multiprocessor), at most
     * GEMV_RPW and (staged) what the shared memory holds. One H100,
     * bench_e2e, Q4_0 T3: a
     * second wave (Turbo's c_fc: 512 blocks at one output a warp; the
     * Multilingual CFG pair's gate and up: 1024) cost 5-7% of a token's
     * time; fewer blocks than a wave (one a multiprocessor) cost 10% */
    g.rpw = 1;
    if (staged || type == TYPE_F32) {
        int64_t units = 0;
        for (int i = 0; i < n; i++) units += gemv_grid(w[i]->ne[0], S, 1);
        const int64_t wave = (int64_t)cuda_of(a)->sms * GEMV_BLOCKS_SM;
        int64_t r = (units + wave - 1) / wave;
        r = r > GEMV_RPW ? GEMV_RPW : r;
        while (staged && r > 1 && gemv_qs_smem(mc, nblk, S, (int)r, bs) + GEMV_STATIC_SMEM > GEMV_SMEM_MAX) r--;
        g.rpw = (int)r;
    }
    /* the input rows in shared memory for a norm, and for the unstaged
     * quantised kernel (each lane takes whole blocks: laid out by
     * gemv_xpos); the staged one always quantises them there (g.xs
     * unread) */
    g.xs = !staged && (norm || (type != TYPE_F32 && xfits));
    g.xw = type == TYPE_F32 ? 0 : nblk % 32 == 0 ? 32 : nblk % 16 == 0 ? 16 : nblk % 8 == 0 ? 8 : 0;
    if (norm) {
        g.ng = norm->g ? (const float *)norm->g->data : NULL;
        g.nb = norm->b ? (const float *)norm->b->data : NULL;
        g.eps = norm->eps;
    }
    int64_t col = 0, blocks = 0;
    for (int i = 0; i < n; i++) {
        g.p[i] = gemv_part{(const char *)w[i]->data, w[i]->nb[0], w[i]->ne[0], col, act[i], (unsigned)blocks,
                           b[i] ? (const char *)b[i]->data : NULL, b[i] ? b[i]->nb[0] : 0};
        col += w[i]->ne[0];
        blocks += gemv_grid(w[i]->ne[0], S, g.rpw);
    }
    if (blocks > (int64_t)INT32_MAX) return false;
    cudaStream_t st = cuda_of(a)->st;
    const unsigned gr = (unsigned)blocks;
    const bool pdl = cuda_of(a)->pdl;
    /* rows [r0, r0 + m) per launch: each row's sums as in a launch of its
     * own (the kernels keep rows apart: same lanes, same order) */
    for (int64_t r0 = 0; r0 < M; r0 += GEMV_ROWS) {
        const int m = (int)(M - r0 < GEMV_ROWS ? M - r0 : GEMV_ROWS);
        float *yr = y + r0 * ldy;
        const float *xr = x + r0 * ldx;
        g.x2 = x2 ? x2 + r0 * ldx : NULL;
        g.res = res ? res + r0 * ldy : NULL;
        if (type == TYPE_F32) gemv_launch<TYPE_F32>(st, pdl, S, gr, false, yr, ldy, xr, m, K, g);
        else if (type == TYPE_Q8_0) gemv_launch<TYPE_Q8_0>(st, pdl, S, gr, staged, yr, ldy, xr, m, K, g);
        else gemv_launch<TYPE_Q4_0>(st, pdl, S, gr, staged, yr, ldy, xr, m, K, g);
        if (!cu_launched(a, "linear gemv")) return true;
    }
    return true;
}

/* The fast decode GEMV for one weight (see above); false otherwise. */
static bool gemv_fast(struct arena *a, float *y, int64_t ldy, const float *x, int64_t M, int64_t K,
                      const struct tensor *w, const struct tensor *b, const struct gemv_epi &e)
{
    return gemv_fast_group(a, y, ldy, x, K, NULL, M, K, 1, &w, &b, &e.act, e.res, NULL);
}

/* rows [0, nc) of a weight (any type) -> dst[nc, K] F32 */
__global__ static void k_widen_rows(float *dst, const char *w, int64_t nc, int64_t K,
                                    int64_t nb0, int64_t nb1, int type, int bs)
{
    CU_FOR(e, nc * K) {
        const int64_t r = e / K, i = e % K;
        dst[e] = d_row_elem(type, bs, w + r * nb0, i, nb1);
    }
}

/* rows [0, nc) of an F16/BF16 weight, or M rows of x, -> 16-bit dst */
__global__ static void k_to_half(uint16_t *dst, const char *src, int64_t rows, int64_t K,
                                 int64_t nb0, int64_t nb1, int src_type, int dst_type)
{
    CU_FOR(e, rows * K) {
        const int64_t r = e / K, i = e % K;
        const char *p = src + r * nb0 + i * nb1;
        if (src_type == dst_type) {
            dst[e] = *(const uint16_t *)p;
        } else {
            const float v = d_ldf(src_type, p);
            dst[e] = dst_type == TYPE_F16 ? scalar_f32_to_fp16(v) : scalar_f32_to_bf16(v);
        }
    }
}

__global__ static void k_add_bias(float *y, int64_t ldy, int64_t M, int64_t N, const char *b,
                                  int64_t nb)
{
    CU_FOR(e, M * N) {
        int64_t o;
        const int64_t r = cu_divmod(e, N, &o);
        y[r * ldy + o] += *(const float *)(b + o * nb);
    }
}

static bool sgemm(struct arena *a, cublasOperation_t ta, cublasOperation_t tb, int64_t m,
                  int64_t n, int64_t k, const float *A, int64_t lda, const float *B, int64_t ldb,
                  float beta, float *C, int64_t ldc)
{
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX ||
        ldc > INT32_MAX) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "cuda: GEMM of %lld x %lld x %lld exceeds 32-bit sizes",
                   (long long)m, (long long)n, (long long)k);
        return false;
    }
    return cublas_launched(a, cu_gemm(a, ta, tb, (int)m, (int)n, (int)k, A, (int)lda, 0, B, (int)ldb, 0, beta, C,
                                      (int)ldc, 0, 1),
                           "sgemm");
}

void cuda_linear_rows(struct arena *a, float *y, int64_t ldy, const float *x, int64_t M,
                      int64_t K, const struct tensor *w, const struct tensor *b)
{
    const int64_t N = w->ne[0];
    if (M == 0 || N == 0) return;
    cudaStream_t st = cuda_of(a)->st;
    const struct dtype_traits *tw = dtype_traits(w->type);
    const int bs = tw->quantized ? (int)tw->size : 0;
    const char *bias = b ? (const char *)b->data : NULL;
    const int64_t bias_nb = b ? b->nb[0] : 0;
    if (K == 0) { /* empty sum: the bias (or zeros) */
        cu_ok(a, cudaMemset2DAsync(y, (size_t)ldy * 4, 0, (size_t)N * 4, (size_t)M, st), "linear");
        if (b) {
            k_add_bias<<<cu_blocks(M * N, CU_THREADS), CU_THREADS, 0, st>>>(y, ldy, M, N, bias, bias_nb);
            cu_launched(a, "linear bias");
        }
        return;
    }
    if (gemv_fast(a, y, ldy, x, M, K, w, b, gemv_epi{-1, NULL})) return;
    if (w->type == TYPE_F32 && w->nb[0] % 4 == 0 && (w->nb[0] / 4 >= K || N == 1)) {
        if (!sgemm(a, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, (const float *)w->data,
                   N == 1 ? K : w->nb[0] / 4, x, K, 0.0f, y, ldy))
            return;
    } else if (M <= GEMV_ROWS || arena_row_exact(a)) {
        if (N > (int64_t)INT32_MAX * GEMV_WARPS) {
            arena_fail(a, CBX_ERR_UNSUPPORTED, "linear: %lld outputs", (long long)N);
            return;
        }
        unsigned grid = (unsigned)((N + GEMV_WARPS - 1) / GEMV_WARPS);
        const bool pairs = (w->type == TYPE_F16 || w->type == TYPE_BF16) && w->nb[1] == 2 &&
                           w->nb[0] % 4 == 0 && (uintptr_t)w->data % 4 == 0;
        /* row-exact (arena_set_row_exact): GEMV_ROWS rows a launch */
        for (int64_t r0 = 0; r0 < M; r0 += GEMV_ROWS) {
            const int m = (int)(M - r0 < GEMV_ROWS ? M - r0 : GEMV_ROWS);
            k_gemv<<<grid, 32 * GEMV_WARPS, 0, st>>>(y + r0 * ldy, ldy, x + r0 * K, m, K, N,
                                                     (const char *)w->data, w->nb[0], w->nb[1], (int)w->type,
                                                     bs, pairs, bias, bias_nb);
            if (!cu_launched(a, "linear gemv")) return;
        }
        return;
    } else if (arena_bf16(a) && (w->type == TYPE_F16 || w->type == TYPE_BF16)) {
        /* reduced precision: x rounded to the weight's type, F32 accumulation */
        const cudaDataType dt = w->type == TYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
        uint16_t *xh = (uint16_t *)arena_alloc(a, (size_t)(M * K) * 2);
        uint16_t *wh = (uint16_t *)arena_alloc(a, (size_t)(N * K) * 2);
        if (!xh || !wh) return;
        k_to_half<<<cu_blocks(M * K, CU_THREADS), CU_THREADS, 0, st>>>(
            xh, (const char *)x, M, K, K * 4, 4, TYPE_F32, (int)w->type);
        k_to_half<<<cu_blocks(N * K, CU_THREADS), CU_THREADS, 0, st>>>(
            wh, (const char *)w->data, N, K, w->nb[0], w->nb[1], (int)w->type, (int)w->type);
        if (!cu_launched(a, "linear to half")) return;
        const float one = 1.0f, zero = 0.0f;
        if (N > INT32_MAX || M > INT32_MAX || K > INT32_MAX || ldy > INT32_MAX) {
            arena_fail(a, CBX_ERR_UNSUPPORTED, "linear: GEMM sizes exceed 32 bits");
            return;
        }
        if (!cublas_launched(a, cublasGemmEx(cuda_of(a)->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M,
                                       (int)K, &one, wh, dt, (int)K, xh, dt, (int)K, &zero, y,
                                       CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT),
                       "gemm (16-bit)"))
            return;
    } else {
        int64_t nc = (int64_t)(DEQUANT_CHUNK_BYTES / ((size_t)K * 4));
        if (nc < 1) nc = 1;
        if (nc > N) nc = N;
        float *wf = (float *)arena_alloc(a, (size_t)(nc * K) * 4);
        if (!wf) return;
        for (int64_t n0 = 0; n0 < N; n0 += nc) {
            const int64_t c = N - n0 < nc ? N - n0 : nc;
            k_widen_rows<<<cu_blocks(c * K, CU_THREADS), CU_THREADS, 0, st>>>(
                wf, (const char *)w->data + n0 * w->nb[0], c, K, w->nb[0], w->nb[1],
                (int)w->type, bs);
            if (!cu_launched(a, "linear widen")) return;
            if (!sgemm(a, CUBLAS_OP_T, CUBLAS_OP_N, c, M, K, wf, K, x, K, 0.0f, y + n0, ldy))
                return;
        }
    }
    if (b) {
        k_add_bias<<<cu_blocks(M * N, CU_THREADS), CU_THREADS, 0, st>>>(y, ldy, M, N, bias, bias_nb);
        cu_launched(a, "linear bias");
    }
}

static void cuda_linear(struct arena *a, struct tensor *out, const struct tensor *x,
                        const struct tensor *w, const struct tensor *b)
{
    const int64_t K = x->ne[x->ndim - 1], M = tensor_nrows(x);
    if (tensor_nelements(out) == 0) return;
    const float *xc = cuda_f32_contig(a, x);
    if (!xc) return;
    cuda_linear_rows(a, (float *)out->data, w->ne[0], xc, M, K, w, b);
}

/* op_linear_ex: the epilogue in the decode GEMV's store where that kernel
 * runs (a contiguous residual); otherwise the product, then the unary and
 * binary kernels in place */
static void cuda_linear_ex(struct arena *a, struct tensor *out, const struct tensor *x, const struct tensor *w,
                           const struct tensor *b, int act, const struct tensor *r)
{
    const int64_t K = x->ne[x->ndim - 1], M = tensor_nrows(x), N = w->ne[0];
    if (tensor_nelements(out) == 0) return;
    const float *xc = cuda_f32_contig(a, x);
    if (!xc) return;
    const struct gemv_epi e = {act, r ? (const float *)r->data : NULL};
    if (K > 0 && (!r || tensor_is_contiguous(r)) && gemv_fast(a, (float *)out->data, N, xc, M, K, w, b, e))
        return;
    cuda_linear_rows(a, (float *)out->data, N, xc, M, K, w, b);
    const struct kernels *k = &arena_backend(a)->k;
    if (act >= 0 && arena_status(a) == CBX_OK) k->unary(a, out, out, (enum unop)act, 0.0f, 0.0f);
    if (r && arena_status(a) == CBX_OK) k->binary(a, out, r, out, BIN_ADD);
}

/* Whether t's rows (innermost dim, F32 elements contiguous) lie evenly
 * spaced: *ld floats apart */
static bool even_rows(const struct tensor *t, int64_t *ld)
{
    const int n = t->ndim;
    if (n < 1 || t->nb[n - 1] != 4 || (n > 1 && t->nb[n - 2] % 4)) return false;
    *ld = n > 1 ? t->nb[n - 2] / 4 : t->ne[0];
    for (int d = 0; d + 2 < n; d++)
        if (t->ne[d] > 1 && t->nb[d] != t->nb[d + 1] * t->ne[d + 1]) return false;
    return true;
}

/* op_linear_gated: the staged quantised decode GEMV forms x * gate as it
 * quantises its input rows (gemv_group.x2); false for anything else (the
 * op then runs op_mul and op_linear_ex) */
static bool cuda_linear_gated(struct arena *a, struct tensor *out, const struct tensor *x, const struct tensor *gate,
                              const struct tensor *w, const struct tensor *b, int act, const struct tensor *r)
{
    const int64_t K = x->ne[x->ndim - 1], M = tensor_nrows(x), N = w->ne[0];
    int64_t ldx = 0, ldg = 0;
    if (tensor_nelements(out) == 0 || K < 1 || !even_rows(x, &ldx) || !even_rows(gate, &ldg) || ldx != ldg ||
        (r && !tensor_is_contiguous(r)))
        return false;
    return gemv_fast_group(a, (float *)out->data, N, (const float *)x->data, ldx, (const float *)gate->data, M, K, 1,
                           &w, &b, &act, r ? (const float *)r->data : NULL, NULL);
}

/* op_linear_cat: one decode GEMV launch over every weight, the norm in
 * its prologue, where that kernel runs; otherwise the norm kernel, then
 * each product (and its activation) in a contiguous scratch, copied into
 * its columns of out (the elementwise kernels write contiguous results) */
static void cuda_linear_cat(struct arena *a, struct tensor *out, const struct tensor *x,
                            const struct linear_norm *norm, int n, const struct tensor *const *w,
                            const struct tensor *const *b, const int *act)
{
    const int64_t K = x->ne[x->ndim - 1], M = tensor_nrows(x), N = out->ne[out->ndim - 1];
    if (tensor_nelements(out) == 0) return;
    const float *xc = cuda_f32_contig(a, x);
    if (!xc) return;
    float *y = (float *)out->data;
    if (K > 0 && gemv_fast_group(a, y, N, xc, K, NULL, M, K, n, w, b, act, NULL, norm)) return;
    if (norm) {
        const int64_t ne[2] = {M, K};
        struct tensor *h = arena_tensor(a, TYPE_F32, 2, ne);
        if (!h) return;
        struct tensor xs = *h;
        xs.data = (void *)xc;
        const struct kernels *k = &arena_backend(a)->k;
        if (norm->kind == LINEAR_NORM_LAYER) k->layer_norm(a, h, &xs, norm->g, norm->b, norm->eps);
        else k->rms_norm(a, h, &xs, norm->g, norm->eps);
        if (arena_status(a) != CBX_OK) return;
        xc = (const float *)h->data;
    }
    int64_t col = 0;
    for (int i = 0; i < n && arena_status(a) == CBX_OK; i++) {
        const int64_t Ni = w[i]->ne[0];
        const int64_t ne[2] = {M, Ni};
        struct tensor *part = arena_tensor(a, TYPE_F32, 2, ne);
        if (!part) return;
        cuda_linear_rows(a, (float *)part->data, Ni, xc, M, K, w[i], b[i]);
        if (act[i] >= 0 && arena_status(a) == CBX_OK)
            arena_backend(a)->k.unary(a, part, part, (enum unop)act[i], 0.0f, 0.0f);
        if (arena_status(a) == CBX_OK)
            cu_ok(a, cudaMemcpy2DAsync(y + col, (size_t)N * 4, part->data, (size_t)Ni * 4, (size_t)Ni * 4,
                                       (size_t)M, cudaMemcpyDeviceToDevice, cuda_of(a)->st),
                  "linear_cat columns");
        col += Ni;
    }
}

/* ---- matmul ------------------------------------------------------------------ */

/* How cuBLAS sees Z^T for a row-major [r, c] matrix Z with element strides
 * (sr, sc): op N on a column-major matrix of leading dimension ld, or op T
 * on Z itself. false when neither describes the strides. */
static bool layout(int64_t r, int64_t c, int64_t sr, int64_t sc, cublasOperation_t *op,
                   int64_t *ld)
{
    if ((sc == 1 || c == 1) && (r == 1 || sr >= c)) {
        *op = CUBLAS_OP_N;
        *ld = r == 1 ? (c > 0 ? c : 1) : sr;
        return true;
    }
    if ((sr == 1 || r == 1) && (c == 1 || sc >= r)) {
        *op = CUBLAS_OP_T;
        *ld = c == 1 ? (r > 0 ? r : 1) : sc;
        return true;
    }
    return false;
}

/* strides of the two innermost dims of t in elements, or false */
static bool inner(const struct tensor *t, int64_t *sr, int64_t *sc)
{
    const int64_t br = t->nb[t->ndim - 2], bc = t->nb[t->ndim - 1];
    if (br % 4 || bc % 4 || br < 0 || bc < 0) return false;
    *sr = br / 4;
    *sc = bc / 4;
    return true;
}

static void cuda_matmul(struct arena *a, struct tensor *out, const struct tensor *x,
                        const struct tensor *y)
{
    const int nd = out->ndim;
    const int64_t M = out->ne[nd - 2], N = out->ne[nd - 1], K = x->ne[x->ndim - 1];
    const int64_t total = tensor_nelements(out);
    if (total == 0) return;
    struct tensor xs = *x, ys = *y;
    cublasOperation_t opx = CUBLAS_OP_N, opy = CUBLAS_OP_N;
    int64_t ldx = 0, ldy = 0, sr = 0, sc = 0;
    bool ok = inner(&xs, &sr, &sc) && layout(M, K, sr, sc, &opx, &ldx);
    if (!ok) {
        xs.data = (void *)cuda_f32_contig(a, x);
        if (!xs.data) return;
        tensor_set_contiguous(&xs);
        inner(&xs, &sr, &sc);
        layout(M, K, sr, sc, &opx, &ldx);
    }
    ok = inner(&ys, &sr, &sc) && layout(K, N, sr, sc, &opy, &ldy);
    if (!ok) {
        ys.data = (void *)cuda_f32_contig(a, y);
        if (!ys.data) return;
        tensor_set_contiguous(&ys);
        inner(&ys, &sr, &sc);
        layout(K, N, sr, sc, &opy, &ldy);
    }
    if (K == 0) {
        cu_ok(a, cudaMemsetAsync(out->data, 0, (size_t)total * 4, cuda_of(a)->st), "matmul");
        return;
    }
    const int64_t nbatch = total / (M * N);
    float *o = (float *)out->data;
    if (nbatch == 1) {
        sgemm(a, opy, opx, N, M, K, (const float *)ys.data, ldy, (const float *)xs.data, ldx,
              0.0f, o, N);
        return;
    }
    const float **ptr = (const float **)arena_alloc_host(a, 3 * (size_t)nbatch * sizeof *ptr);
    if (!ptr) return;
    for (int64_t e = 0; e < nbatch; e++) {
        int64_t q = e, offx = 0, offy = 0;
        for (int d = nd - 3; d >= 0; d--) {
            const int64_t i = q % out->ne[d];
            q /= out->ne[d];
            const int dx = d - (nd - xs.ndim), dy = d - (nd - ys.ndim);
            if (dx >= 0 && xs.ne[dx] != 1) offx += i * xs.nb[dx];
            if (dy >= 0 && ys.ne[dy] != 1) offy += i * ys.nb[dy];
        }
        ptr[e] = (const float *)((const char *)ys.data + offy);
        ptr[nbatch + e] = (const float *)((const char *)xs.data + offx);
        ptr[2 * nbatch + e] = o + e * M * N;
    }
    const float **dptr = (const float **)cu_upload(a, ptr, 3 * (size_t)nbatch * sizeof *ptr);
    if (!dptr) return;
    if (nbatch > INT32_MAX || N > INT32_MAX || M > INT32_MAX || K > INT32_MAX ||
        ldx > INT32_MAX || ldy > INT32_MAX) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "matmul: sizes exceed 32 bits");
        return;
    }
    const float one = 1.0f, zero = 0.0f;
    cublas_launched(a, cublasSgemmBatched(cuda_of(a)->blas, opy, opx, (int)N, (int)M, (int)K, &one,
                                    dptr, (int)ldy, dptr + nbatch, (int)ldx, &zero,
                                    (float *const *)(dptr + 2 * nbatch), (int)N, (int)nbatch),
              "sgemm batched");
}

void cuda_register_linear(struct kernels *k)
{
    k->linear = cuda_linear;
    k->linear_ex = cuda_linear_ex;
    k->linear_gated = cuda_linear_gated;
    k->linear_cat = cuda_linear_cat;
    k->matmul = cuda_matmul;
}
