/* cuda_common.h - shared by the CUDA kernels (the .cu files of src/core/cuda/ only; never
 * included by C code): the backend's private state, the 4-d tensor view
 * handed to kernels, element loads/stores of every dtype on the device
 * (bit-exact ports of tensor.c's conversions and quant.c's block layouts),
 * and checked launches that report through arena_fail.
 *
 * Invariants:
 *  1. Every kernel of a backend runs on its one stream (cuda_backend.st),
 *     so kernels of one arena run in issue order; to_host / from_host
 *     synchronise that stream, so a host read sees every earlier kernel.
 *  2. A kernel entry point (struct kernels) checks each launch and each
 *     CUDA/cuBLAS/cuFFT call; the first failure goes to arena_fail as one
 *     line "cuda: <what>: <driver message>" and the kernel returns.
 *  3. Device views (struct tv) are right-aligned to 4 dims like elem.h's
 *     elem_shape4: padded dims have ne 1 and stride 0; strides in bytes.
 *  4. Host scratch handed to cudaMemcpyAsync lives in the arena until its
 *     reset, and pageable copies are staged before the call returns.
 *  5. Programmatic dependent launch (cu_launch with cuda_backend.pdl): such
 *     a kernel may start while the kernel before it in the stream is still
 *     running. It lets the next one start (cu_pdl_next), and reads or
 *     writes nothing but placed weights (cuda_weight_placed: immutable)
 *     before cu_pdl_wait, which returns once the kernel before it has
 *     finished and its writes are visible. Without the attribute both are
 *     no-ops. */
#ifndef CBX_CUDA_COMMON_H
#define CBX_CUDA_COMMON_H

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "../scalar.h"

extern "C" {
#include "../backend.h"
#include "../quant.h"
}

struct cuda_backend {
    struct backend be; /* first: arena_backend() hands back &be */
    int device;
    int sms; /* multiprocessors */
    cudaStream_t st;
    cublasHandle_t blas;
    bool tf32;       /* CBX_CUDA_TF32=1: TF32 tensor-core F32 GEMMs */
    bool sync_check; /* CBX_CUDA_SYNC=1: synchronise after every kernel */
    char name[64];
    struct cuda_prof *prof; /* CBX_CUDA_PROFILE=1 (implies sync_check): wall
                             * time per kernel step, printed at free */
    bool pdl;               /* invariant 5: compute capability 9.0 or newer,
                             * unless CBX_CUDA_PDL=0 */
    bool mma;               /* compute capability 8.0 or newer: BF16
                             * tensor-core mma.sync (nn.cu, k_attn_mma) */
};

/* Whether t is a weight placed by this backend (prepare_weight): its
 * bytes never change while kernels run. */
bool cuda_weight_placed(const struct tensor *t);

/* ---- programmatic dependent launch (invariant 5) ----------------------- */

__device__ static inline void cu_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ static inline void cu_pdl_next(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* k<<<grid, block, smem, st>>>(args...), as a programmatic dependent
 * launch when pdl (the kernel keeps invariant 5); check with cu_launched */
template <typename... P, typename... A>
static inline void cu_launch(cudaStream_t st, bool pdl, void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                             A... args)
{
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, k, args...); /* an error stays for cu_launched */
}

static inline struct cuda_backend *cuda_of(struct arena *a)
{
    return (struct cuda_backend *)arena_backend(a);
}

/* ---- checks (invariant 2) --------------------------------------------- */

/* false (and the arena failed) when e is an error */
bool cu_ok(struct arena *a, cudaError_t e, const char *what);
bool cublas_ok(struct arena *a, cublasStatus_t s, const char *what);
/* After a launch: the launch error, and with sync_check the kernel's. */
bool cu_launched(struct arena *a, const char *what);
/* cublas_ok for a GEMM call, counted by the profiler like a launch. */
bool cublas_launched(struct arena *a, cublasStatus_t s, const char *what);
/* n bytes of device scratch in the arena holding a copy of host[n]. */
void *cu_upload(struct arena *a, const void *host, size_t n);
/* Device -> host copy of n bytes, synchronous. */
bool cu_download(struct arena *a, void *host, const void *dev, size_t n);

/* C[b] = A[b] B[b] (column-major, cuBLAS's operands; strides between the
 * batch's matrices sa, sb, sc), F32 in and out. An arena that asks for
 * reduced-precision products (arena_set_bf16: S3Gen's BF16 setting, the
 * default for quantised models) gets TF32 tensor-core math, operands
 * rounded to TF32 (10-bit mantissa, finer than the CPU's BF16), F32
 * accumulation; otherwise full F32 (unless CBX_CUDA_TF32=1 set the
 * handle's math mode). */
static inline cublasStatus_t cu_gemm(struct arena *a, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                     int k, const float *A, int lda, long long sa, const float *B, int ldb,
                                     long long sb, float beta, float *C, int ldc, long long sc, int batch)
{
    const float one = 1.0f;
    cublasHandle_t h = cuda_of(a)->blas;
    if (!arena_bf16(a)) {
        if (batch == 1) return cublasSgemm(h, ta, tb, m, n, k, &one, A, lda, B, ldb, &beta, C, ldc);
        return cublasSgemmStridedBatched(h, ta, tb, m, n, k, &one, A, lda, sa, B, ldb, sb, &beta, C, ldc, sc,
                                         batch);
    }
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &one, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb,
                                      &beta, C, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F_FAST_TF32,
                                      CUBLAS_GEMM_DEFAULT);
}

/* ---- views ------------------------------------------------------------ */

struct tv {
    char *p;
    int type;
    int64_t ne[4], nb[4];
};

static inline struct tv tv_of(const struct tensor *t)
{
    struct tv v;
    v.p = (char *)t->data;
    v.type = (int)t->type;
    int off = 4 - t->ndim;
    for (int d = 0; d < 4; d++) {
        v.ne[d] = 1;
        v.nb[d] = 0;
    }
    for (int d = 0; d < t->ndim; d++) {
        v.ne[off + d] = t->ne[d];
        v.nb[off + d] = t->nb[d];
    }
    return v;
}

/* i / d, and i % d in *r: in 32 bits when both fit (the usual case; a
 * 64-bit division is a long subroutine on the GPU) */
__device__ static inline int64_t cu_divmod(int64_t i, int64_t d, int64_t *r)
{
    if ((((uint64_t)i | (uint64_t)d) >> 32) == 0) {
        const uint32_t q = (uint32_t)i / (uint32_t)d;
        *r = (int64_t)((uint32_t)i - q * (uint32_t)d);
        return q;
    }
    const int64_t q = i / d;
    *r = i - q * d;
    return q;
}

/* byte offset of linear (row-major) index i of v's shape */
__device__ static inline int64_t tv_off(const struct tv &v, int64_t i)
{
    int64_t i3, i2, i1;
    i = cu_divmod(i, v.ne[3], &i3);
    i = cu_divmod(i, v.ne[2], &i2);
    const int64_t i0 = cu_divmod(i, v.ne[1], &i1);
    return i0 * v.nb[0] + i1 * v.nb[1] + i2 * v.nb[2] + i3 * v.nb[3];
}

/* byte offset of row r of v (its three leading dims; the last is the row) */
__device__ static inline int64_t tv_row_off(const struct tv &v, int64_t r)
{
    int64_t i2, i1;
    r = cu_divmod(r, v.ne[2], &i2);
    const int64_t i0 = cu_divmod(r, v.ne[1], &i1);
    return i0 * v.nb[0] + i1 * v.nb[1] + i2 * v.nb[2];
}

/* ---- grid helpers ----------------------------------------------------- */

#define CU_THREADS 256
static inline unsigned cu_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65536) b = 65536; /* kernels loop (grid-stride) beyond */
    return (unsigned)b;
}
#define CU_FOR(i, n)                                                           \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);  \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---- element loads (conversions: core/scalar.h, shared with tensor.c) -- */

__device__ static inline uint16_t d_ld16(const char *p)
{
    return (uint16_t)((uint8_t)p[0] | ((uint16_t)(uint8_t)p[1] << 8));
}

/* F16 <-> F32 by the GPU's conversion instructions: the values
 * scalar_fp16_to_f32 / scalar_f32_to_fp16 give (both round to nearest
 * even, with the same subnormals and overflow to infinity; NaN payloads
 * aside; an exhaustive check on one H100 found no input where they
 * differ), without their branches. Taken where measured faster on the
 * decode path: the quantised decode products' scales and their input
 * rows' Q8_0 scales, the decode attention's Q8_0 cache scales. Not in
 * the Q8_0 block stores (k_cpy_blocks, the cache appends): with cu_f2h
 * there, one H200 wrote blocks whose bytes differed from ref's (one byte
 * a block, 24 of 816 in `cast f32->q8_0`), not understood. Not
 * everywhere: as scalar_fp16_to_f32 itself on the device, in every
 * kernel, S3Gen's flash attention took 228 instead of 191 us a launch
 * (CBX_CUDA_PROFILE, Multilingual v2 Q4_0, one H100). */
__device__ static inline float cu_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ static inline uint16_t cu_f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }

/* F32 / F16 / BF16 element at p */
__device__ static inline float d_ldf(int type, const char *p)
{
    switch (type) {
    case TYPE_F16: return scalar_fp16_to_f32(*(const uint16_t *)p);
    case TYPE_BF16: return scalar_bf16_to_f32(*(const uint16_t *)p);
    default: return *(const float *)p;
    }
}

/* Element j (< QK) of the block at blk of a ggml block type, as
 * quant.c's dequantize_row computes it. Blocks are only 2-byte aligned. */
__device__ static inline float d_block_elem(int type, const char *blk, int j)
{
    const float d = scalar_fp16_to_f32(d_ld16(blk));
    const int h = j >= QK / 2, jj = j - h * (QK / 2);
    switch (type) {
    case TYPE_Q8_0: return d * (float)(int8_t)blk[2 + j];
    case TYPE_Q4_0: {
        uint8_t q = (uint8_t)blk[2 + jj];
        return d * (float)((h ? q >> 4 : q & 0x0f) - 8);
    }
    case TYPE_Q4_1: {
        const float m = scalar_fp16_to_f32(d_ld16(blk + 2));
        uint8_t q = (uint8_t)blk[4 + jj];
        return d * (float)(h ? q >> 4 : q & 0x0f) + m;
    }
    case TYPE_Q5_0:
    case TYPE_Q5_1: {
        const int q51 = type == TYPE_Q5_1;
        const char *qhp = blk + (q51 ? 4 : 2);
        const uint32_t qh = (uint32_t)(uint8_t)qhp[0] | (uint32_t)(uint8_t)qhp[1] << 8 |
                            (uint32_t)(uint8_t)qhp[2] << 16 | (uint32_t)(uint8_t)qhp[3] << 24;
        const uint8_t q = (uint8_t)qhp[4 + jj];
        int v = h ? ((q >> 4) | ((int)(qh >> (jj + 12)) & 0x10))
                  : ((q & 0x0f) | ((int)((qh >> jj) << 4) & 0x10));
        if (!q51) return d * (float)(v - 16);
        return d * (float)v + scalar_fp16_to_f32(d_ld16(blk + 2));
    }
    default: return 0.0f;
    }
}

/* Element i of a row at row of any weight type (float or block) */
__device__ static inline float d_row_elem(int type, int blk_size, const char *row, int64_t i,
                                          int64_t elem_stride)
{
    if (blk_size) return d_block_elem(type, row + (i / QK) * blk_size, (int)(i % QK));
    return d_ldf(type, row + i * elem_stride);
}

/* ---- kernel groups (one .cu each) ------------------------------------- */

/* contiguous F32 copy of any F32 view into dst (device) */
void cuda_to_f32(struct arena *a, float *dst, const struct tensor *x);
/* A contiguous F32 copy of x (x itself when already one); NULL on failure */
const float *cuda_f32_contig(struct arena *a, const struct tensor *x);
/* y[M, N] (ldy) = x[M, K] (contiguous F32) @ w[N, K]^T, w any linear weight
 * type (exact F32 widening); b F32 [N] or NULL. */
void cuda_linear_rows(struct arena *a, float *y, int64_t ldy, const float *x, int64_t M,
                      int64_t K, const struct tensor *w, const struct tensor *b);

extern "C" {
void cuda_register_elementwise(struct kernels *k);
void cuda_register_linear(struct kernels *k);
void cuda_register_nn(struct kernels *k);
void cuda_register_conv(struct kernels *k);
void cuda_register_spectral(struct kernels *k);
void cuda_register_sample(struct kernels *k);
}

#endif
