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

/* The kernel for t at level l, falling back to lower levels; NULL when t
 * is not a weight type. */
vec_dot_fn linear_dot_kernel(enum dtype t, enum cpu_level l);

/* op_linear takes the dot path up to this many rows of x, sgemm above.
 * A tuning knob for bench_kernels; set it only while no linear runs. */
extern int linear_dot_max_rows;

#endif
