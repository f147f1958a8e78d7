/* conv_kernels.h - what the cpu conv group (conv.c) shares with its SIMD
 * files: the small helpers every path uses (static inline, so each file's
 * loops keep them inlined) and the entry points of conv_avx2.c (axpy and
 * the LSTM step's dot products and gates), conv_avx512.c (the direct
 * stride-1 conv1d) and conv_bf16.c (conv1d and conv_transpose1d with BF16
 * products on AMX-BF16 or AVX512-BF16). The SIMD files compile to nothing
 * where CONV_X86 (and for BF16, CONV_BF16) is undefined. */
#ifndef CBX_CPU_CONV_KERNELS_H
#define CBX_CPU_CONV_KERNELS_H

#include <string.h>

#include "../backend.h"
#include "../threadpool.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CONV_X86 1
#if defined(__linux__)
#define CONV_BF16 1
#endif
#endif

/* im2col / col2im scratch per chunk: 2M floats (8 MiB). */
#define CHUNK_FLOATS ((int64_t)1 << 21)

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Grain so that one task touches about 32k floats. */
static inline int64_t grain_for(int64_t per_item)
{
    return max64(1, ((int64_t)1 << 15) / max64(1, per_item));
}

static inline struct threadpool *pool(struct arena *a) { return arena_backend(a)->tp; }

/* Source index for padded position pos of a length-T signal, or -1 where
 * the padding is a constant. */
static inline int64_t pad_index(int64_t pos, int64_t T, enum pad_mode mode)
{
    if (pos >= 0 && pos < T) return pos;
    if (mode == PAD_REFLECT) return pos < 0 ? -pos : 2 * (T - 1) - pos;
    if (mode == PAD_REPLICATE) return pos < 0 ? 0 : T - 1;
    return -1;
}

/* dst[j] = xpad[pos0 + j*step], j in [0, n), where xpad is the row src
 * (length T, element stride es floats) padded on both sides by mode
 * (constant value for PAD_ZERO). In-range runs are copied without
 * per-element tests. */
static inline void fetch_row(float *dst, const float *src, int64_t es, int64_t T,
                             int64_t pos0, int64_t step, int64_t n, enum pad_mode mode, float value)
{
    int64_t jlo = pos0 >= 0 ? 0 : (-pos0 + step - 1) / step;
    int64_t jhi = T - 1 - pos0 < 0 ? 0 : (T - 1 - pos0) / step + 1;
    jlo = min64(jlo, n);
    jhi = max64(jlo, min64(jhi, n));
    for (int64_t j = 0; j < jlo; j++) {
        int64_t s = pad_index(pos0 + j * step, T, mode);
        dst[j] = s < 0 ? value : src[s * es];
    }
    if (es == 1 && step == 1) {
        memcpy(dst + jlo, src + pos0 + jlo, (size_t)(jhi - jlo) * sizeof *dst);
    } else {
        const float *p = src + (pos0 + jlo * step) * es;
        int64_t d = step * es;
        for (int64_t j = jlo; j < jhi; j++, p += d) dst[j] = *p;
    }
    for (int64_t j = jhi; j < n; j++) {
        int64_t s = pad_index(pos0 + j * step, T, mode);
        dst[j] = s < 0 ? value : src[s * es];
    }
}

/* x[b, c, :] of a [B, C, T] or [C, T] activation, element stride in *es. */
static inline const float *act_row(const struct tensor *x, int64_t b, int64_t c, int64_t *es)
{
    int n = x->ndim;
    const char *p = (const char *)x->data + c * x->nb[n - 2];
    if (n == 3) p += b * x->nb[0];
    *es = x->nb[n - 1] / (int64_t)sizeof(float);
    return (const float *)p;
}

/* o[j] += w * s[j*step] for j < n; a plain loop the compiler vectorises,
 * built twice (generic / AVX2) and picked at run time. */
#define AXPY_BODY                                                              \
    if (step == 1)                                                             \
        for (int64_t j = 0; j < n; j++) o[j] += w * s[j];                      \
    else                                                                       \
        for (int64_t j = 0; j < n; j++) o[j] += w * s[j * step];

#ifdef CONV_X86
/* AXPY_BODY built for AVX2 */
void conv_axpy_avx2(float *restrict o, const float *restrict s, float w, int64_t step, int64_t n);
/* r[q] = w[q * stride .. + n) . h, q < 4 (conv.c dot4_fn) */
void conv_dot4_avx2(const float *w, int64_t stride, const float *h, int64_t n, float *r);
/* LSTM cell update of n <= 8 units (conv.c gates_fn) */
void conv_gates_avx2(const float *pre, float *c, float *h, int n);
/* Stride-1 conv1d at the AVX-512 level through the register-tile kernel
 * (out [B, Cout, Tout] contiguous, w F32 [Cout, Cin_g, K]). Returns false
 * when the path does not apply and nothing was done; true when done or
 * when an arena allocation failed (recorded in the arena). */
bool conv_conv1d_avx512(struct arena *a, struct tensor *out, const struct tensor *x,
                        const struct tensor *wt, const float *w, const float *bias,
                        const struct conv1d_params *p, int64_t B);
#endif
#ifdef CONV_BF16
/* conv1d with BF16 products (AMX-BF16 or AVX512-BF16) when the arena asks
 * for them and it applies (stride 1, one group); false: nothing done.
 * true: done, or an allocation failed (recorded in the arena). */
bool conv_conv1d_bf16(struct arena *a, struct tensor *out, const struct tensor *x,
                     const struct tensor *wt, const float *w, const float *bias,
                     const struct conv1d_params *p, int64_t B);
/* conv_transpose1d with BF16 products by output phases when the arena
 * asks for them and it applies (one group, dilation 1, stride u with
 * 1 < u <= K, u <= AB_MAX_PH); false: nothing done. true: done, or an
 * allocation failed (recorded in the arena). */
bool conv_convt_bf16(struct arena *a, struct tensor *out, const struct tensor *x,
                    const struct tensor *wt, const float *w, const float *bias,
                    const struct conv_transpose1d_params *p, int64_t B);
#endif

#endif
