/* linear_kernels.h - row dot-product kernels of the cpu linear group, one
 * set per SIMD level (linear_avx2.c, linear_avx512.c), all with the
 * contract of quant.h's vec_dot_fn: w one weight row of type t, x the
 * activation row already in quant_vec_dot_type(t) (Q8_0/Q8_1 blocks or
 * F32). The portable set is quant_vec_dot_generic(). */
#ifndef CBX_CPU_LINEAR_KERNELS_H
#define CBX_CPU_LINEAR_KERNELS_H

#include "../cpu_features.h"
#include "../quant.h"

/* x prepared once per row for the "dotx" kernels, which need more than
 * the ggml blocks: the quants contiguous (so two blocks fill a 512-bit
 * register) and the per-block scales as floats, with d * sum(q) for the
 * unsigned-times-signed products (sum((q_w - 8) x) = sum(q_w x) - 8 sum(x)). */
struct linear_xq {
    const void *q;      /* the row as quant_vec_dot_type(t) blocks */
    const int8_t *qs;   /* its quants, n contiguous bytes */
    const float *d;     /* per block: d */
    const float *ds;    /* per block: d * sum(q) */
};
typedef float (*linear_dotx_fn)(const void *w, const struct linear_xq *x, int64_t n);
/* Fill the arrays of xq (qs: n bytes, d and ds: n / QK floats) from the
 * Q8_0 blocks xq->q of a row of n elements. */
void linear_xq_prepare(struct linear_xq *xq, int8_t *qs, float *d, float *ds, int64_t n);
/* AVX-512 VNNI dotx kernel for t, or NULL. */
linear_dotx_fn linear_dotx_avx512(enum dtype t);
/* out[r] = row r of four weight rows (w + r * stride bytes) . x, the x
 * loads shared by the four rows; the same per-block arithmetic as the
 * dotx kernel, so only float summation order differs. */
typedef void (*linear_dotx4_fn)(const void *w, size_t stride, const struct linear_xq *x,
                                int64_t n, float *out);
/* AVX-512 VNNI four-row dotx kernel for t, or NULL. */
linear_dotx4_fn linear_dotx4_avx512(enum dtype t);

/* ---- packed weights: the decode GEMV layout (linear.c, linear_pack) ---
 * A q4_0 / q8_0 weight [N, K] (K a multiple of 64) may be repacked once at
 * load into groups of LINEAR_PK_ROWS rows: group g (rows 16g..16g+15)
 * occupies the same bytes as those rows did (16 row sizes, from byte
 * 16 g * row_size), as K / 64 records of two blocks b, b + 1:
 *   bytes 0..63    32 fp16 scales: the 16 rows' d of block b, then of b + 1
 *   then per block (b, then b + 1) LINEAR_PK_ROWS dword vectors:
 *     q4_0: 4 vectors of 64 bytes; vector t holds dword t (bytes 4t..4t+3)
 *           of each row's qs, row r at bytes 4r..4r+3: low nibbles are
 *           elements 4t.., high nibbles 16 + 4t..
 *     q8_0: 8 vectors; vector t holds elements 4t..4t+3 of each row, as
 *           unsigned q + 128 (top bit flipped)
 * so a record is 576 bytes (q4_0) or 1088 (q8_0), 64-byte multiples: with
 * a 64-byte aligned tensor every vector load is aligned. Rows past the
 * last full group (N % 16) stay in the ggml layout at their usual offset.
 * Such a tensor carries the CPU_WEIGHT_GEMV16 tag in tensor.extra (set by
 * linear_pack; cpu_weight.h); op_linear on
 * the cpu backend multiplies it on the packed path at every row count;
 * nothing else may read it (ref backend, casts). */
#define LINEAR_PK_ROWS 16
#define LINEAR_PK_PAIR_Q4_0 576
#define LINEAR_PK_PAIR_Q8_0 1088
/* out[r * 16 + i] = row i of the group at w . x[r] (nb blocks), for
 * activation rows r < rows: the group is read once for up to four of
 * them. Each row's result is bit for bit the one it gets alone. */
typedef void (*linear_gemv16_fn)(const uint8_t *w, const struct linear_xq *x, int rows, int64_t nb,
                                 float *out);
linear_gemv16_fn linear_gemv16_avx512(enum dtype t);
/* rows r0..r0+nw-1 of the packed group at w -> the quantised GEMM's
 * unpacked tile (struct linear_qgemm's unpack output). */
typedef void (*linear_pk_unpack_fn)(const uint8_t *w, int r0, int nw, int64_t nb, int32_t *wq, float *wd);
linear_pk_unpack_fn linear_pk_unpack_avx512(enum dtype t);
/* 16 rows (src, rs bytes apart) of nb blocks of t -> one packed group at
 * dst (64-byte aligned). */
void linear_pk_pack_avx512(enum dtype t, const void *src, size_t rs, int64_t nb, uint8_t *dst);
/* linear_pack_supported is false while this is 0 (default 1): a knob for
 * benchmarks comparing packed with plain weights. The environment's
 * CBX_PACK=0 turns packing off for the process. */
extern int linear_pack_enable;
/* Whether packing that needs new memory is wanted (a copy of weights
 * borrowed from a mapped file, the file's pages dropped after): yes unless
 * CBX_PACK=1 (in place only) or 0. The copy faults in fresh pages at load
 * (176 MB for Turbo q4_0: bench_e2e load 0.38-0.42 s, once 1.02 s, against 0.21-0.40 s
 * without, at load average 3; 0.6-1.5 s of t3_load_gpt2 alone at load
 * average 11), see cpu/weights.c. */
bool linear_pack_copies(void);
/* Whether w (2-D, contiguous rows) can be packed here: q4_0 or q8_0, K a
 * multiple of 64, at least one full group, data 64-byte aligned, and the
 * cpu level AVX-512 (the packed kernels need VNNI). */
bool linear_pack_supported(const struct tensor *w);
/* Write w packed into dst (tensor_nbytes(w) bytes, 64-byte aligned; dst
 * may be w->data: packed in place, a group at a time) with the threads
 * of tp (NULL: the caller alone) and make *out the descriptor of the
 * result: w's type, shape and name over dst, tagged CPU_WEIGHT_GEMV16
 * (out may be w itself). False (nothing written) when not supported or
 * out of memory. */
struct threadpool;
bool linear_pack(struct threadpool *tp, const struct tensor *w, void *dst, struct tensor *out);

/* ---- quantised GEMM: many rows of x (linear.c, linear_qgemm) ----------
 * x is quantised to Q8_0 exactly as on the dot path, then packed in groups
 * of LINEAR_QG_LANES rows (the last group padded with zero rows): per
 * group and block b one record of LINEAR_QG_REC bytes,
 *   bytes 0..511    quants: dword l of the 64 bytes at 64 g = quants
 *                   4g..4g+3 of row l's block b (g = 0..7)
 *   bytes 512..575  16 floats: d of each row's block b
 *   bytes 576..639  16 int32: -off * sum(q) of each row's block b
 * Up to LINEAR_QG_MAXW weight rows are unpacked once per tile and
 * multiplied with every x group, 16 rows per vpdpbusd. */
#define LINEAR_QG_LANES 16
#define LINEAR_QG_REC 640
#define LINEAR_QG_MAXW 8     /* VNNI kernels */
#define LINEAR_QG_MAXW_ANY 16 /* any kernel (AMX) */
struct linear_qgemm {
    /* weight rows per tile: tile() takes nw == maxw, or nw <= 8 */
    int maxw;
    /* run by each thread before / after its tiles (AMX tile config), or NULL */
    void (*thread_begin)(void);
    void (*thread_end)(void);
    /* the weight zero point: unpacked quants are q_w + off, all >= 0 */
    int off;
    /* nw (<= MAXW) rows w, w + stride, ... of nb blocks -> wq[b][j][8]
     * dwords of unsigned quants in element order, wd[b][j] their scales */
    void (*unpack)(const void *w, size_t stride, int nw, int64_t nb, int32_t *wq, float *wd);
    /* rows[0..lanes-1] (nb * QK contiguous floats each) -> one group's
     * records at dst, the quantisation bit for bit quantize_row_q8_0_ref's */
    void (*pack)(const float *const *rows, int lanes, int64_t nb, int off, uint8_t *dst);
    /* y[l * ldy + j] = x row l of the group at xp . weight row j + bias[j]
     * (j < nw, bias: nw floats), for the first `lanes` rows of the group */
    void (*tile)(const int32_t *wq, const float *wd, int nw, const uint8_t *xp, int64_t nb,
                 const float *bias, float *y, int64_t ldy, int lanes);
};
/* AVX-512 VNNI kernels for t (q4_0, q8_0); false when there are none. */
bool linear_qgemm_avx512(enum dtype t, struct linear_qgemm *g);
/* Whether AMX-INT8 is there and the OS granted its tile state to the
 * process (asked once, on the first call); false when the environment
 * has CBX_AMX=0 (then the state is never asked for). */
bool linear_amx_available(void);
/* AMX-INT8 tiles (16 weight rows) with the VNNI pack/unpack/tails, same
 * results bit for bit; false without AMX or for other types. */
bool linear_qgemm_amx(enum dtype t, struct linear_qgemm *g);
/* op_linear's quantised GEMM uses the AMX kernels when available and this
 * is nonzero (default 1); tests and benchmarks clear it to compare. */
extern int linear_qgemm_use_amx;
/* op_linear uses the quantised GEMM from this many rows of x up, when the
 * level has kernels for the weight type (else the dot path / sgemm as set
 * by linear_dot_max_rows). A tuning knob like linear_dot_max_rows. */
extern int linear_qgemm_min_rows;
/* Whether op_linear on the cpu backend at level l multiplies m rows of x
 * with weights of type t through Q8 quantised activations (dot path or
 * quantised GEMM) rather than sgemm on the float x. */
bool linear_x_quantised(enum dtype t, int64_t m, enum cpu_level l);

/* Row dequantisation for the sgemm tiles, same results as
 * dequantize_row (each value is one float product, or exact); NULL
 * when AVX2 has no kernel for t (the caller uses dequantize_row). */
typedef void (*linear_dequant_fn)(const void *src, float *dst, int64_t n);
linear_dequant_fn linear_dequant_avx2(enum dtype t);

/* NULL when that level has no kernel of its own for t. */
vec_dot_fn linear_dot_avx2(enum dtype t);
vec_dot_fn linear_dot_avx512(enum dtype t);

/* The body of linear_dot_<level> in a level's file, whose kernels for
 * every weight type are named dot_<type>. */
#define LINEAR_DOT_BY_TYPE(t)                                                   \
    switch (t) {                                                                \
    case TYPE_F32: return dot_f32;                                              \
    case TYPE_F16: return dot_f16;                                              \
    case TYPE_BF16: return dot_bf16;                                            \
    case TYPE_Q4_0: return dot_q4_0;                                            \
    case TYPE_Q4_1: return dot_q4_1;                                            \
    case TYPE_Q5_0: return dot_q5_0;                                            \
    case TYPE_Q5_1: return dot_q5_1;                                            \
    case TYPE_Q8_0: return dot_q8_0;                                            \
    default: return NULL;                                                       \
    }

/* The kernel for t at level l, falling back to lower levels; NULL when t
 * is not a weight type. */
vec_dot_fn linear_dot_kernel(enum dtype t, enum cpu_level l);

/* op_linear takes the dot path up to this many rows of x, sgemm above.
 * A tuning knob for bench_kernels; set it only while no linear runs. */
extern int linear_dot_max_rows;

#endif
