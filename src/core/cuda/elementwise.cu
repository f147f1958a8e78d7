/* elementwise.cu - CUDA kernels of the elementwise group (see ops.h):
 * copy and type conversion (block types included), fill, broadcast binary
 * ops, activations, Snake, reductions, cumsum and row gathers.
 *
 * Semantics are ref/elementwise.c's, element for element: activations are
 * evaluated in double and rounded once, float arithmetic (binary ops,
 * scale, clamp, Snake's outer sum) is done in float in the same order
 * (the .cu files build with --fmad=false, so nothing is contracted), sums
 * accumulate in double. */
#include <math.h>

#include "cuda_common.h"

/* ---- scalar element access of every plain dtype (elem.h on the device) -- */

__device__ static inline bool d_is_int(int t)
{
    return t == TYPE_I8 || t == TYPE_I16 || t == TYPE_I32 || t == TYPE_I64 || t == TYPE_U8 ||
           t == TYPE_BOOL;
}

__device__ static inline int64_t d_ldi(int t, const char *p)
{
    switch (t) {
    case TYPE_I8: return *(const int8_t *)p;
    case TYPE_U8: return *(const uint8_t *)p;
    case TYPE_BOOL: return *(const uint8_t *)p != 0;
    case TYPE_I16: return *(const int16_t *)p;
    case TYPE_I32: return *(const int32_t *)p;
    case TYPE_I64: return *(const int64_t *)p;
    default: return 0;
    }
}

__device__ static inline double d_ldd(int t, const char *p)
{
    switch (t) {
    case TYPE_F32: return *(const float *)p;
    case TYPE_F64: return *(const double *)p;
    case TYPE_F16: return scalar_fp16_to_f32(*(const uint16_t *)p);
    case TYPE_BF16: return scalar_bf16_to_f32(*(const uint16_t *)p);
    default: return (double)d_ldi(t, p);
    }
}

__device__ static inline void d_sti(int t, char *p, int64_t v)
{
    switch (t) {
    case TYPE_I8: case TYPE_U8: *(uint8_t *)p = (uint8_t)v; break;
    case TYPE_BOOL: *(uint8_t *)p = v != 0; break;
    case TYPE_I16: *(uint16_t *)p = (uint16_t)v; break;
    case TYPE_I32: *(uint32_t *)p = (uint32_t)v; break;
    case TYPE_I64: *(int64_t *)p = v; break;
    default: break;
    }
}

__device__ static inline void d_std(int t, char *p, double v)
{
    switch (t) {
    case TYPE_F32: *(float *)p = (float)v; return;
    case TYPE_F64: *(double *)p = v; return;
    case TYPE_F16: *(uint16_t *)p = scalar_f32_to_fp16((float)v); return;
    case TYPE_BF16: *(uint16_t *)p = scalar_f32_to_bf16((float)v); return;
    case TYPE_BOOL: *(uint8_t *)p = v != 0; return;
    default: break;
    }
    int64_t i;
    if (v != v) i = 0;
    else if (v >= 9.2233720368547758e18) i = INT64_MAX;
    else if (v <= -9.2233720368547758e18) i = INT64_MIN;
    else i = (int64_t)v;
    d_sti(t, p, i);
}

/* ---- cpy ---------------------------------------------------------------- */

/* op_copy_into_at's move of the destination, read on the device: o.p +=
 * at[0] * nb; false (copy nothing) when at[0] is outside [0, max]. No
 * move when at is NULL. */
struct dshift {
    const int32_t *at;
    int64_t nb, max;
};

__device__ static inline bool d_shift(struct tv &o, const struct dshift &sh)
{
    if (!sh.at) return true;
    const int32_t v = *sh.at;
    if (v < 0 || v > sh.max) return false;
    o.p += v * sh.nb;
    return true;
}

__global__ static void k_cpy(struct tv o, struct tv x, int64_t n, int size, struct dshift sh)
{
    cu_pdl_next();
    cu_pdl_wait();
    if (!d_shift(o, sh)) return;
    CU_FOR(i, n) {
        const char *xp = x.p + tv_off(x, i);
        char *op = o.p + tv_off(o, i);
        if (x.type == o.type) {
            switch (size) {
            case 1: *op = *xp; break;
            case 2: *(uint16_t *)op = *(const uint16_t *)xp; break;
            case 4: *(uint32_t *)op = *(const uint32_t *)xp; break;
            default: *(uint64_t *)op = *(const uint64_t *)xp; break;
            }
        } else if (d_is_int(x.type) && d_is_int(o.type)) {
            d_sti(o.type, op, d_ldi(x.type, xp));
        } else {
            d_std(o.type, op, d_ldd(x.type, xp));
        }
    }
}

/* Block-typed rows: same type copies bytes; block -> float dequantises;
 * float -> q8_0 / q4_0 quantises as quant.c's *_ref (one thread a block). */
__global__ static void k_cpy_blocks(struct tv o, struct tv x, int64_t rows, int64_t n,
                                    int xbs, int obs, int64_t row_bytes, struct dshift sh)
{
    cu_pdl_next();
    cu_pdl_wait();
    if (!d_shift(o, sh)) return;
    const int64_t nblk = n / QK;
    if (x.type == o.type) {
        CU_FOR(e, rows * row_bytes) {
            int64_t r = e / row_bytes, c = e % row_bytes;
            o.p[tv_row_off(o, r) + c] = x.p[tv_row_off(x, r) + c];
        }
        return;
    }
    if (xbs) { /* dequantise */
        CU_FOR(e, rows * n) {
            int64_t r = e / n, i = e % n;
            float v = d_block_elem(x.type, x.p + tv_row_off(x, r) + (i / QK) * xbs, (int)(i % QK));
            d_std(o.type, o.p + tv_row_off(o, r) + i * o.nb[3], v);
        }
        return;
    }
    CU_FOR(e, rows * nblk) { /* quantise one block */
        int64_t r = e / nblk, bi = e % nblk;
        const char *xr = x.p + tv_row_off(x, r) + bi * QK * x.nb[3];
        char *blk = o.p + tv_row_off(o, r) + bi * obs;
        float v[QK];
        for (int j = 0; j < QK; j++) v[j] = (float)d_ldd(x.type, xr + j * x.nb[3]);
        if (o.type == TYPE_Q8_0) {
            float amax = 0.0f;
            for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(v[j]));
            const float d = amax / 127;
            const float id = d ? 1.0f / d : 0.0f;
            uint16_t dh = scalar_f32_to_fp16(d);
            blk[0] = (char)(dh & 0xff);
            blk[1] = (char)(dh >> 8);
            for (int j = 0; j < QK; j++) blk[2 + j] = (char)(int8_t)roundf(v[j] * id);
        } else { /* q4_0 */
            float amax = 0.0f, mx = 0.0f;
            for (int j = 0; j < QK; j++)
                if (amax < fabsf(v[j])) {
                    amax = fabsf(v[j]);
                    mx = v[j];
                }
            const float d = mx / -8;
            const float id = d ? 1.0f / d : 0.0f;
            uint16_t dh = scalar_f32_to_fp16(d);
            blk[0] = (char)(dh & 0xff);
            blk[1] = (char)(dh >> 8);
            for (int j = 0; j < QK / 2; j++) {
                const float x0 = v[j] * id, x1 = v[QK / 2 + j] * id;
                int xi0 = (int8_t)(x0 + 8.5f), xi1 = (int8_t)(x1 + 8.5f);
                if (xi0 > 15) xi0 = 15;
                if (xi1 > 15) xi1 = 15;
                blk[2 + j] = (char)(uint8_t)(xi0 | (xi1 << 4));
            }
        }
    }
}

static void cpy(struct arena *a, struct tensor *out, const struct tensor *x, struct dshift sh)
{
    const struct dtype_traits *tx = dtype_traits(x->type), *to = dtype_traits(out->type);
    if (!tx || !to || tensor_nelements(x) != tensor_nelements(out) || x->ndim != out->ndim) {
        arena_fail(a, CBX_ERR_INTERNAL, "cpy: bad operands (%s -> %s)", dtype_name(x->type),
                   dtype_name(out->type));
        return;
    }
    const int64_t total = tensor_nelements(x);
    if (total == 0) return;
    cudaStream_t st = cuda_of(a)->st;
    struct tv xv = tv_of(x), ov = tv_of(out);
    if (tx->quantized || to->quantized) {
        const int64_t n = xv.ne[3], rows = total / n;
        if ((tx->quantized && n % tx->blck) || (to->quantized && n % to->blck)) {
            arena_fail(a, CBX_ERR_INTERNAL, "cpy: rows of %lld are not whole blocks (%s -> %s)",
                       (long long)n, tx->name, to->name);
            return;
        }
        if (x->type != out->type && to->quantized &&
            (tx->quantized || (out->type != TYPE_Q8_0 && out->type != TYPE_Q4_0))) {
            arena_fail(a, CBX_ERR_UNSUPPORTED, "cpy: %s -> %s not supported by backend cuda",
                       tx->name, to->name);
            return;
        }
        const int64_t row_bytes = (int64_t)dtype_row_size(x->type, n);
        const int64_t work = x->type == out->type ? rows * row_bytes
                             : tx->quantized       ? rows * n
                                                   : rows * (n / QK);
        cu_launch(st, cuda_of(a)->pdl, k_cpy_blocks, cu_blocks(work, CU_THREADS), CU_THREADS, 0, ov, xv, rows, n,
                  tx->quantized ? (int)tx->size : 0, to->quantized ? (int)to->size : 0, row_bytes, sh);
        cu_launched(a, "cpy (block rows)");
        return;
    }
    if (!sh.at && x->type == out->type && tensor_is_contiguous(x) && tensor_is_contiguous(out)) {
        cu_ok(a, cudaMemcpyAsync(out->data, x->data, tensor_nbytes(x), cudaMemcpyDeviceToDevice, st),
              "cpy");
        return;
    }
    cu_launch(st, cuda_of(a)->pdl, k_cpy, cu_blocks(total, CU_THREADS), CU_THREADS, 0, ov, xv, total, (int)tx->size,
              sh);
    cu_launched(a, "cpy");
}

static void cuda_cpy(struct arena *a, struct tensor *out, const struct tensor *x)
{
    cpy(a, out, x, dshift{NULL, 0, 0});
}

static void cuda_cpy_at(struct arena *a, struct tensor *out, const struct tensor *x, const struct tensor *at,
                        int64_t nb, int64_t max)
{
    cpy(a, out, x, dshift{(const int32_t *)at->data, nb, max});
}

void cuda_to_f32(struct arena *a, float *dst, const struct tensor *x)
{
    struct tensor t = tensor_make(TYPE_F32, x->ndim, x->ne, dst, x->be);
    cuda_cpy(a, &t, x);
}

const float *cuda_f32_contig(struct arena *a, const struct tensor *x)
{
    if (x->type == TYPE_F32 && tensor_is_contiguous(x)) return (const float *)x->data;
    float *d = (float *)arena_alloc(a, (size_t)tensor_nelements(x) * sizeof(float));
    if (!d) return NULL;
    cuda_to_f32(a, d, x);
    return arena_status(a) == CBX_OK ? d : NULL;
}

/* ---- fill ---------------------------------------------------------------- */

__global__ static void k_fill(struct tv o, int64_t n, float v)
{
    CU_FOR(i, n) d_std(o.type, o.p + tv_off(o, i), v);
}

static void cuda_fill(struct arena *a, struct tensor *out, float v)
{
    int64_t n = tensor_nelements(out);
    if (n == 0) return;
    k_fill<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cuda_of(a)->st>>>(tv_of(out), n, v);
    cu_launched(a, "fill");
}

/* out[i] = the generator's gaussian at draw c + 2 i (scalar.h: the same
 * formula as the host's, log and cos in double) */
__global__ static void k_randn(float *o, int64_t n, uint64_t key, uint64_t c)
{
    CU_FOR(i, n) o[i] = scalar_rng_gaussian(key, c + 2 * (uint64_t)i);
}

static void cuda_randn(struct arena *a, struct tensor *out, uint64_t key, uint64_t c)
{
    const int64_t n = tensor_nelements(out);
    k_randn<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cuda_of(a)->st>>>((float *)out->data, n, key, c);
    cu_launched(a, "randn");
}

/* ---- binary ---------------------------------------------------------------- */

__global__ static void k_binary(float *o, struct tv x, struct tv y, int64_t n, int op, bool xc)
{
    CU_FOR(i, n) {
        float u = *(const float *)(x.p + (xc ? i * 4 : tv_off(x, i)));
        float v = *(const float *)(y.p + tv_off(y, i));
        float r;
        switch (op) {
        case BIN_ADD: r = u + v; break;
        case BIN_SUB: r = u - v; break;
        case BIN_MUL: r = u * v; break;
        default: r = u / v; break;
        }
        o[i] = r;
    }
}

static void cuda_binary(struct arena *a, struct tensor *out, const struct tensor *x,
                        const struct tensor *y, enum binop op)
{
    struct tv xv = tv_of(x), yv = tv_of(y);
    for (int d = 0; d < 4; d++) /* broadcast y over x's shape */
        if (yv.ne[d] == 1) {
            yv.ne[d] = xv.ne[d];
            yv.nb[d] = 0;
        }
    int64_t n = tensor_nelements(out);
    k_binary<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cuda_of(a)->st>>>(
        (float *)out->data, xv, yv, n, (int)op, tensor_is_contiguous(x));
    cu_launched(a, "binary");
}

/* ---- unary ------------------------------------------------------------------ */


__global__ static void k_unary(float *o, struct tv x, int64_t n, int op, float p0, float p1,
                               bool xc)
{
    CU_FOR(i, n) o[i] = scalar_unary(op, *(const float *)(x.p + (xc ? i * 4 : tv_off(x, i))), p0, p1);
}

static void cuda_unary(struct arena *a, struct tensor *out, const struct tensor *x,
                       enum unop op, float p0, float p1)
{
    int64_t n = tensor_nelements(out);
    k_unary<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cuda_of(a)->st>>>(
        (float *)out->data, tv_of(x), n, (int)op, p0, p1, tensor_is_contiguous(x));
    cu_launched(a, "unary");
}

/* ---- snake -------------------------------------------------------------------- */

__global__ static void k_snake(float *o, struct tv x, const char *al, int64_t al_nb, int64_t n)
{
    CU_FOR(i, n) {
        int64_t c, t;
        cu_divmod(cu_divmod(i, x.ne[3], &t), x.ne[2], &c);
        float alpha = *(const float *)(al + c * al_nb);
        float inv = 1.0f / (alpha + 1e-9f);
        float v = *(const float *)(x.p + tv_off(x, i));
        float s = (float)sin((double)(v * alpha));
        o[i] = v + inv * (s * s);
    }
}

static void cuda_snake(struct arena *a, struct tensor *out, const struct tensor *x,
                       const struct tensor *alpha)
{
    int64_t n = tensor_nelements(out);
    k_snake<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cuda_of(a)->st>>>(
        (float *)out->data, tv_of(x), (const char *)alpha->data, alpha->nb[0], n);
    cu_launched(a, "snake");
}

/* ---- reduce and cumsum: one block per row --------------------------------------- */

#define RED_THREADS 256

__global__ static void k_reduce(float *o, struct tv x, int op)
{
    __shared__ double ss[RED_THREADS];
    __shared__ float sm[RED_THREADS];
    const int64_t r = blockIdx.x, n = x.ne[3];
    const char *row = x.p + tv_row_off(x, r);
    double s = 0;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = *(const float *)(row + i * x.nb[3]);
        s += v;
        if (v > m || v != v) m = v != v || m != m ? NAN : v;
    }
    ss[threadIdx.x] = s;
    sm[threadIdx.x] = m;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) {
            ss[threadIdx.x] += ss[threadIdx.x + w];
            float u = sm[threadIdx.x], v = sm[threadIdx.x + w];
            sm[threadIdx.x] = u != u || v != v ? NAN : (v > u ? v : u);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        o[r] = op == RED_MAX ? sm[0] : op == RED_SUM ? (float)ss[0] : (float)(ss[0] / (double)n);
}

static void cuda_reduce(struct arena *a, struct tensor *out, const struct tensor *x,
                        enum redop op)
{
    struct tv xv = tv_of(x);
    int64_t rows = xv.ne[0] * xv.ne[1] * xv.ne[2];
    if (rows > INT32_MAX) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "reduce: %lld rows", (long long)rows);
        return;
    }
    k_reduce<<<(unsigned)rows, RED_THREADS, 0, cuda_of(a)->st>>>((float *)out->data, xv, (int)op);
    cu_launched(a, "reduce");
}

/* Block scan in double: each thread sums a contiguous chunk, an exclusive
 * scan of the chunk sums gives its start, then it writes its prefix sums. */
__global__ static void k_cumsum(float *o, struct tv x)
{
    __shared__ double sh[RED_THREADS];
    const int64_t r = blockIdx.x, n = x.ne[3];
    const char *row = x.p + tv_row_off(x, r);
    float *orow = o + r * n;
    const int64_t chunk = (n + blockDim.x - 1) / blockDim.x;
    const int64_t i0 = threadIdx.x * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
    double s = 0;
    for (int64_t i = i0; i < i1; i++) s += *(const float *)(row + i * x.nb[3]);
    sh[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double acc = 0;
        for (unsigned t = 0; t < blockDim.x; t++) {
            double v = sh[t];
            sh[t] = acc;
            acc += v;
        }
    }
    __syncthreads();
    s = sh[threadIdx.x];
    for (int64_t i = i0; i < i1; i++) {
        s += *(const float *)(row + i * x.nb[3]);
        orow[i] = (float)s;
    }
}

static void cuda_cumsum(struct arena *a, struct tensor *out, const struct tensor *x)
{
    struct tv xv = tv_of(x);
    int64_t rows = xv.ne[0] * xv.ne[1] * xv.ne[2];
    if (rows > INT32_MAX) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "cumsum: %lld rows", (long long)rows);
        return;
    }
    k_cumsum<<<(unsigned)rows, RED_THREADS, 0, cuda_of(a)->st>>>((float *)out->data, xv);
    cu_launched(a, "cumsum");
}

/* ---- get_rows ------------------------------------------------------------------- */

/* ids were range-checked by the op (ops_elementwise.c); an id outside the
 * table still never reads outside it here: its row is zeros. */
__global__ static void k_get_rows(float *o, struct tv ids, const char *table, int64_t nrows,
                                  int64_t d, int64_t nb0, int64_t nb1, int type, int bs)
{
    const int64_t n = ids.ne[3], e = blockIdx.x;
    const int64_t b = e / n, j = e % n;
    const char *ip = ids.p + b * ids.nb[2] + j * ids.nb[3];
    const int64_t id = ids.type == TYPE_I32 ? *(const int32_t *)ip : *(const int64_t *)ip;
    float *dst = o + e * d;
    const bool ok = id >= 0 && id < nrows;
    const char *src = table + (ok ? id : 0) * nb0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
        dst[i] = ok ? d_row_elem(type, bs, src, i, nb1) : 0.0f;
}

static void cuda_get_rows(struct arena *a, struct tensor *out, const struct tensor *table,
                          const struct tensor *ids)
{
    const struct dtype_traits *tt = dtype_traits(table->type);
    struct tv iv = tv_of(ids);
    int64_t n = iv.ne[2] * iv.ne[3];
    if (n > INT32_MAX) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "get_rows: %lld ids", (long long)n);
        return;
    }
    k_get_rows<<<(unsigned)n, 128, 0, cuda_of(a)->st>>>(
        (float *)out->data, iv, (const char *)table->data, table->ne[0], table->ne[1],
        table->nb[0], table->nb[1], (int)table->type, tt->quantized ? (int)tt->size : 0);
    cu_launched(a, "get_rows");
}

void cuda_register_elementwise(struct kernels *k)
{
    k->cpy = cuda_cpy;
    k->cpy_at = cuda_cpy_at;
    k->fill = cuda_fill;
    k->randn = cuda_randn;
    k->binary = cuda_binary;
    k->unary = cuda_unary;
    k->snake = cuda_snake;
    k->reduce = cuda_reduce;
    k->cumsum = cuda_cumsum;
    k->get_rows = cuda_get_rows;
}
