/* conv_bf16.c - conv1d / conv_transpose1d of the conv group with BF16
 * products on AMX-BF16 or, without AMX, AVX512-BF16 (see conv_kernels.h).
 *
 * Taken when the arena asks for BF16 products (arena_bf16) and AMX-BF16
 * (cpu_amx_ready) or AVX512-BF16 is ready, for one-group convs of
 * stride 1:
 *   y[co][t] = bias[co] + sum over taps k and input channels ci of
 *              bf16(W[co][ci][k]) * bf16(xpad[ci][t + k*dil]),
 * operands rounded to nearest even, products and sums in FP32 on 16 x 16
 * tiles. The output tile is time-major: C[t][co] += A[t][ci] * B[ci][co]
 *   A: x of a block of 32 input channels, time-major (x is packed per task
 *      into xw[cb][pos][32] bf16), so the tile of tap k at columns
 *      t..t+15 is the 1 KiB at row t + k*dil: one contiguous, aligned load;
 *      a tap shift is a row offset and nothing is im2col'ed;
 *   B: W in VNNI pairs, packed once per weight tensor into
 *      wp[k][cb][cob][ci pair 16][co 16][2] (contiguous 1 KiB tiles) and
 *      kept with a placed weight (its cpu_weight slot, cpu_weight.h; a
 *      weight placed without one is packed per call into the arena).
 * A task is one block of up to AB_TB output columns (of one batch item and
 * one group of out-channel blocks): it packs its input window (with the
 * conv's padding, channels zero-padded to 32) and then, for each 32
 * columns and each pair of 16-channel output blocks, accumulates four
 * C tiles (2 column halves x 2 channel blocks: each A and B load feeds two
 * products) over all (k, cb), transposes them back to [co][t] and adds the
 * bias. Without AMX the same sums over the same layouts come from
 * bf16dp_8x32 (bf16_dp_avx512.h), 8 columns x 32 channels a call over all
 * (k, cb), into the same [t][co] buffer. Error: each product carries the
 * two operands' bf16 rounding (<= 2^-8 of |x w|, both together); see
 * core_conv_bf16.
 * conv_transpose1d (stride u, dilation 1, one group, u <= K) is the same
 * kernel once per output phase r in [0, u): outputs o = m*u + r - padding
 * take taps k = r + u*j at input m - j only, a stride-1 conv of x with the
 * Kr = ceil((K - r) / u) taps W[ci][co][r + u*j] reversed, written to
 * every u-th output column; all phases run in one parallel loop.
 * (An earlier opt-in path, CBX_AMX=1, split F32 operands into three bf16
 * parts to keep F32 accuracy in a channel-major layout; it saved ~7% of
 * HiFT's CPU time and was removed.) */
#include "../cpu_features.h"
#include "amx_tilecfg.h"
#include "conv_kernels.h"
#include "cpu_weight.h"

#ifdef CONV_BF16
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>

#include "avx512_tr16.h"
#include "bf16_dp_avx512.h"

#define AB_TB 256  /* most output columns per task (a multiple of 32) */
#define AB_MAX_PH 16 /* most phases (transposed-conv stride) */

/* One phase (a plain conv has one): its packed W, taps, output columns,
 * x position of column 0's tap 0 (= -pad_left) and output column of the
 * phase's column 0. */
struct ab_phase {
    const uint16_t *wp;
    int64_t K, M, x0, o0;
};

struct ab_job {
    const struct tensor *x;
    const float *bias;
    float *out;              /* [B, Cout, Tout] contiguous */
    float *rows;             /* per thread [32][lw] floats (fetch scratch) */
    uint16_t *xw;            /* per thread [ncb][lw][32] bf16 */
    enum pad_mode mode;
    int64_t T, tout, cin, cout, ncb, nco, dil, ostep, lw, tb, n_tb, n_cg, cbg, B, nph;
    bool amx;                /* tile products, else bf16dp_8x32 */
    struct ab_phase ph[AB_MAX_PH];
};

/* W packing: w' [cout][cin][K] of a conv, or of phase r of a transposed
 * conv of stride u: w'[co][ci][k] = w[ci][co][r + u*(K - 1 - k)] (w
 * [cin, cout, Kfull]). */
struct ab_pack {
    const float *w;
    uint16_t *wp;
    int64_t cout, cin, K, ncb, nco, kfull, u, r;
    bool transposed;
};

#define TGTAMX __attribute__((target("amx-tile,amx-bf16,avx2,fma,avx512f,avx512bw,avx512dq,avx512bf16")))

/* the first n of 16 lanes (none for n <= 0) */
static inline __mmask16 lanes(int64_t n) { return (__mmask16)(n <= 0 ? 0 : n >= 16 ? 0xffff : (1u << n) - 1); }

/* bf16 of 16 floats in the low halves of dwords, as f32_to_bf16: round
 * to nearest even, a NaN kept quiet */
TGTAMX static inline __m512i ab_bf16(__m512 f)
{
    const __m512i x = _mm512_castps_si512(f);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1))));
    r = _mm512_srli_epi32(r, 16);
    return _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
}

/* w' -> wp for the blocks [b0, b1) of 16 out channels: per tile (k, cb),
 * each channel's 32 input channels gathered (zeros past Cout, Cin) and
 * rounded to bf16 pairs, one dword per K pair, then the 16 x 16 dwords
 * transposed into the tile's rows (K pair p: 16 channels x 2). */
TGTAMX static void ab_pack_w(void *ctx, int64_t b0, int64_t b1, int ith)
{
    (void)ith;
    const struct ab_pack *j = ctx;
    /* w' element (co, ci, k) at w[co * sco + ci * sci + (k's tap)]; the
     * callers keep 31 * sci within the gather's 32-bit indices */
    const int64_t sci = j->transposed ? j->cout * j->kfull : j->K, sco = j->transposed ? j->kfull : j->cin * j->K;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)sci));
    for (int64_t cob = b0; cob < b1; cob++)
        for (int64_t cb = 0; cb < j->ncb; cb++) {
            const int64_t ci0 = cb * 32;
            const __mmask16 m0 = lanes(j->cin - ci0), m1 = lanes(j->cin - ci0 - 16);
            for (int64_t k = 0; k < j->K; k++) {
                const int64_t kw = j->transposed ? j->r + j->u * (j->K - 1 - k) : k; /* w's own tap */
                __m512i r[16];
                for (int c = 0; c < 16; c++) {
                    const int64_t co = cob * 16 + c;
                    if (co >= j->cout) {
                        r[c] = _mm512_setzero_si512();
                        continue;
                    }
                    const float *b = j->w + co * sco + ci0 * sci + kw;
                    __m512 lo = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m0, idx, b, 4);
                    __m512 hi = m1 ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m1, idx, b + 16 * sci, 4)
                                   : _mm512_setzero_ps();
                    r[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(ab_bf16(lo))),
                                              _mm512_cvtepi32_epi16(ab_bf16(hi)), 1);
                }
                avx512_tr16(r);
                uint16_t *t = j->wp + ((k * j->ncb + cb) * j->nco + cob) * 512;
                for (int p = 0; p < 16; p++) _mm512_storeu_si512(t + 32 * p, r[p]);
            }
        }
}

/* Packed weights of pk (pk->wp unset) for weight tensor wt: the panels
 * kept with wt (cpu_weight.h), made now on the first call; or, for a
 * weight placed without a slot, packed into a for this call. NULL after an
 * allocation failure (recorded in a). */
static const uint16_t *ab_weights(struct arena *a, struct ab_pack *pk, const struct tensor *wt)
{
    const int64_t tag = pk->transposed ? 1 + pk->r + 256 * pk->u : 0;
    const size_t nb = (size_t)(pk->K * pk->ncb * pk->nco) * 1024;
    if (!cpu_weight_is(wt, CPU_WEIGHT_CONV)) {
        if (!(pk->wp = arena_alloc(a, nb))) return NULL;
        tp_parallel_for(pool(a), pk->nco, 1, ab_pack_w, pk);
        return pk->wp;
    }
    struct cpu_weight *cw = wt->extra;
    pthread_mutex_lock(&cw->lock);
    struct cpu_conv_panels *e = cw->panels;
    while (e && !(e->cout == pk->cout && e->cin == pk->cin && e->K == pk->K && e->tag == tag)) e = e->next;
    pthread_mutex_unlock(&cw->lock);
    if (e) return e->wp;

    struct cpu_conv_panels *ne = malloc(sizeof *ne);
    pk->wp = ne ? aligned_alloc(64, nb) : NULL;
    if (!pk->wp) {
        free(ne);
        arena_fail(a, CBX_ERR_NOMEM, "conv: out of memory for packed weights");
        return NULL;
    }
    tp_parallel_for(pool(a), pk->nco, 1, ab_pack_w, pk);
    *ne = (struct cpu_conv_panels){.cout = pk->cout, .cin = pk->cin, .K = pk->K, .tag = tag, .wp = pk->wp};
    pthread_mutex_lock(&cw->lock);
    /* another thread may have packed the same panels meanwhile: keep one
     * (entries are never freed while the weight lives, so either serves) */
    for (e = cw->panels; e; e = e->next)
        if (e->cout == ne->cout && e->cin == ne->cin && e->K == ne->K && e->tag == tag) break;
    if (!e) {
        ne->next = cw->panels;
        cw->panels = ne;
    }
    pthread_mutex_unlock(&cw->lock);
    if (e) {
        free(ne->wp);
        free(ne);
        return e->wp;
    }
    return pk->wp;
}

/* The input window of a task: xw[cb][pos][32] = bf16 of xpad[cb*32 + c]
 * at x position c0 + pos for pos < n (zero past n up to lw, and for
 * channels past Cin), through rows (32 x lw floats). */
TGTAMX static void ab_pack_x(const struct ab_job *j, int64_t b, int64_t c0, int64_t n,
                             float *rows, uint16_t *xw)
{
    const __m512i il = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                        24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                        16, 0);
    int64_t n16 = (n + 15) / 16 * 16;
    for (int64_t cb = 0; cb < j->ncb; cb++) {
        for (int c = 0; c < 32; c++) {
            int64_t ci = cb * 32 + c, es;
            float *dst = rows + c * j->lw;
            if (ci < j->cin) {
                const float *src = act_row(j->x, b, ci, &es);
                fetch_row(dst, src, es, j->T, c0, 1, n, j->mode, 0.0f);
                memset(dst + n, 0, (size_t)(n16 - n) * sizeof *dst);
            } else {
                memset(dst, 0, (size_t)n16 * sizeof *dst);
            }
        }
        uint16_t *o = xw + cb * j->lw * 32;
        for (int64_t s = 0; s < n16; s += 16) {
            __m512i v[16];
            for (int r = 0; r < 16; r++) { /* lane i: channels 2r, 2r+1 at column s + i */
                __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(rows + (2 * r + 1) * j->lw + s),
                                                 _mm512_loadu_ps(rows + 2 * r * j->lw + s));
                v[r] = _mm512_permutexvar_epi16(il, (__m512i)h);
            }
            avx512_tr16(v);
            for (int i = 0; i < 16; i++) _mm512_storeu_si512(o + (s + i) * 32, v[i]);
        }
        if (n16 < j->lw) memset(o + n16 * 32, 0, (size_t)((j->lw - n16) * 32) * sizeof *o);
    }
}

/* A stored C tile tile[t][co] (16 x 16, rows ldt floats apart) ->
 * y[co][t * ystep] for co < nr, t < nt, plus bias (ldy: floats between y's
 * rows). */
TGTAMX static void ab_store(const float *tile, int64_t ldt, float *y, int64_t ldy, int64_t ystep,
                            const float *bias, int nr, int64_t nt)
{
    if (nt <= 0 || nr <= 0) return;
    __m512i v[16];
    for (int i = 0; i < 16; i++) v[i] = _mm512_load_si512(tile + ldt * i);
    avx512_tr16(v);
    __mmask16 m = (__mmask16)(nt >= 16 ? 0xffffu : (1u << nt) - 1);
    __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                       13, 14, 15),
                                     _mm512_set1_epi32((int)ystep));
    for (int r = 0; r < nr; r++) {
        __m512 o = _mm512_add_ps(_mm512_castsi512_ps(v[r]), _mm512_set1_ps(bias ? bias[r] : 0.0f));
        if (ystep == 1) _mm512_mask_storeu_ps(y + r * ldy, m, o);
        else _mm512_mask_i32scatter_ps(y + r * ldy, m, idx, o, 4);
    }
}

/* tiles 0-7 all 16 rows x 64 bytes; static, see amx_tilecfg.h (a config
 * built on the stack could lose its stores) */
static const struct amx_tilecfg ab_cfg __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

/* The four C tiles of 32 columns (A rows of xa) x 32 channels (B tiles
 * of wb; 16 when !two) over all (k, cb) -> tmp (tile (h, q) at h * 512 +
 * q * 256) */
TGTAMX static void ab_block_amx(const struct ab_job *j, const uint16_t *xa, const uint16_t *wb, int64_t K,
                                bool two, float *tmp)
{
    const int64_t dil32 = j->dil * 32, lw32 = j->lw * 32, wstep = j->nco * 512;
    _tile_zero(0);
    _tile_zero(2);
    if (two) {
        _tile_zero(1);
        _tile_zero(3);
    }
    for (int64_t k = 0; k < K; k++)
        for (int64_t cb = 0; cb < j->ncb; cb++) {
            const uint16_t *pa = xa + cb * lw32 + k * dil32;
            const uint16_t *pw = wb + (k * j->ncb + cb) * wstep;
            _tile_loadd(4, pa, 64);
            _tile_loadd(5, pa + 512, 64);
            _tile_loadd(6, pw, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(2, 5, 6);
            if (two) {
                _tile_loadd(7, pw + 512, 64);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(3, 5, 7);
            }
        }
    _tile_stored(0, tmp, 64);
    _tile_stored(2, tmp + 512, 64);
    if (two) {
        _tile_stored(1, tmp + 256, 64);
        _tile_stored(3, tmp + 768, 64);
    }
}

/* Tasks: (phase, batch item, column block, group of out-channel blocks). */
TGTAMX static void ab_run(void *ctx, int64_t i0, int64_t i1, int ith)
{
    const struct ab_job *j = ctx;
    if (j->amx) _tile_loadconfig(&ab_cfg);
    /* C of 32 columns x 32 channels: four 16 x 16 tiles (AMX: tile (h, q)
     * of column half h, channel block q at h * 512 + q * 256, rows 16
     * apart) or one [32][32] block (rows 32 apart, (h, q) at h * 512 +
     * q * 16) */
    float tmp[4 * 256] __attribute__((aligned(64)));
    float *rows = j->rows + ith * 32 * j->lw;
    uint16_t *xw = j->xw + ith * j->ncb * j->lw * 32;
    const int64_t dil32 = j->dil * 32, lw32 = j->lw * 32, wstep = j->nco * 512;
    for (int64_t i = i0; i < i1; i++) {
        int64_t cg = i % j->n_cg, r = i / j->n_cg, tb = r % j->n_tb;
        int64_t b = r / j->n_tb % j->B;
        const struct ab_phase *ph = j->ph + r / j->n_tb / j->B;
        int64_t t0 = tb * j->tb, tc = min64(j->tb, ph->M - t0);
        if (tc <= 0) continue;
        int64_t cb0 = cg * j->cbg, cb1 = min64(j->nco, cb0 + j->cbg), K = ph->K;
        ab_pack_x(j, b, ph->x0 + t0, tc + (K - 1) * j->dil, rows, xw);
        for (int64_t t = 0; t < tc; t += 32) {
            for (int64_t cob = cb0; cob < cb1; cob += 2) {
                const uint16_t *xa = xw + t * 32, *wb = ph->wp + cob * 512;
                bool two = cob + 1 < cb1;
                if (j->amx) ab_block_amx(j, xa, wb, K, two, tmp);
                else /* pairs: taps k (outer), channel blocks cb, 16 pairs each */
                    for (int g = 0; g < 4; g++)
                        bf16dp_8x32(tmp + 8 * g * 32, 32, false, xa + 8 * g * 32, 32, lw32, dil32,
                                    j->ncb, K, wb, wstep, 512, two ? 2 : 1);
                for (int q = 0; q < (two ? 2 : 1); q++) {
                    int64_t co0 = (cob + q) * 16;
                    int nr = (int)min64(16, j->cout - co0);
                    float *y = j->out + (b * j->cout + co0) * j->tout + ph->o0 + (t0 + t) * j->ostep;
                    const float *bias = j->bias ? j->bias + co0 : NULL;
                    const int64_t ldt = j->amx ? 16 : 32, qo = j->amx ? 256 : 16;
                    ab_store(tmp + q * qo, ldt, y, j->tout, j->ostep, bias, nr, tc - t);
                    ab_store(tmp + 512 + q * qo, ldt, y + 16 * j->ostep, j->tout, j->ostep, bias, nr,
                             tc - t - 16);
                }
            }
        }
    }
    if (j->amx) _tile_release();
}

static bool ab_ready(struct arena *a) { return arena_bf16(a) && cpu_avx512_bf16_ready(); }

/* Blocking and scratch of j (phases set), then the run. */
static void ab_launch(struct arena *a, struct ab_job *j)
{
    struct threadpool *tp = pool(a);
    int64_t nt = tp ? tp_n_threads(tp) : 1, mmax = 0, kmax = 0;
    for (int64_t r = 0; r < j->nph; r++) {
        mmax = max64(mmax, j->ph[r].M);
        kmax = max64(kmax, j->ph[r].K);
    }
    if (mmax <= 0 || j->B <= 0) return;
    /* column blocks of 32..AB_TB columns, about 4 tasks per thread; then
     * out-channel groups (even numbers of 16-channel blocks) when the
     * columns alone give too few tasks */
    int64_t n32 = (mmax + 31) / 32, want = 4 * nt, outer = j->B * j->nph;
    j->tb = 32 * max64(1, min64(AB_TB / 32, n32 * outer / want));
    j->n_tb = (mmax + j->tb - 1) / j->tb;
    int64_t npair = (j->nco + 1) / 2, ng = min64(npair, max64(1, want / (outer * j->n_tb)));
    j->cbg = 2 * ((npair + ng - 1) / ng);
    j->n_cg = (j->nco + j->cbg - 1) / j->cbg;
    j->lw = (j->tb + (kmax - 1) * j->dil + 15) / 16 * 16;
    j->rows = arena_alloc(a, (size_t)(nt * 32 * j->lw) * sizeof(float));
    j->xw = arena_alloc(a, (size_t)(nt * j->ncb * j->lw * 32) * sizeof(uint16_t));
    if (!j->rows || !j->xw) return;
    tp_parallel_for(tp, outer * j->n_tb * j->n_cg, 1, ab_run, j);
}

bool conv_conv1d_bf16(struct arena *a, struct tensor *out, const struct tensor *x,
                     const struct tensor *wt, const float *w, const float *bias,
                     const struct conv1d_params *p, int64_t B)
{
    if (p->stride != 1 || p->groups != 1 || wt->ne[2] > INT32_MAX / 32 || !ab_ready(a)) return false;
    int n = x->ndim;
    struct ab_job j = {
        .x = x, .bias = bias, .out = out->data, .mode = p->pad_mode, .T = x->ne[n - 1],
        .tout = out->ne[n - 1], .cin = x->ne[n - 2], .cout = wt->ne[0], .dil = p->dilation,
        .ostep = 1, .B = B, .nph = 1, .amx = cpu_amx_bf16_ready(),
    };
    j.ncb = (j.cin + 31) / 32;
    j.nco = (j.cout + 15) / 16;
    struct ab_pack pk = {.w = w, .cout = j.cout, .cin = j.cin, .K = wt->ne[2], .ncb = j.ncb,
                         .nco = j.nco};
    j.ph[0] = (struct ab_phase){.K = pk.K, .M = j.tout, .x0 = -p->pad_left};
    if (!(j.ph[0].wp = ab_weights(a, &pk, wt))) return true;
    ab_launch(a, &j);
    return true;
}

bool conv_convt_bf16(struct arena *a, struct tensor *out, const struct tensor *x,
                    const struct tensor *wt, const float *w, const float *bias,
                    const struct conv_transpose1d_params *p, int64_t B)
{
    int64_t u = p->stride, K = wt->ne[2];
    if (p->groups != 1 || p->dilation != 1 || u < 1 || u > K || u > AB_MAX_PH ||
        wt->ne[1] * K > INT32_MAX / 32 || !ab_ready(a))
        return false;
    int n = x->ndim;
    struct ab_job j = {
        .x = x, .bias = bias, .out = out->data, .mode = PAD_ZERO, .T = x->ne[n - 1],
        .tout = out->ne[n - 1], .cin = x->ne[n - 2], .cout = wt->ne[1], .dil = 1, .ostep = u,
        .B = B, .nph = u, .amx = cpu_amx_bf16_ready(),
    };
    j.ncb = (j.cin + 31) / 32;
    j.nco = (j.cout + 15) / 16;
    for (int64_t r = 0; r < u; r++) {
        /* outputs o = m*u + r - padding for m in [m0, m1]; taps r + u*j,
         * reversed: column m reads x from m - (Kr - 1) */
        int64_t P = p->padding, kr = (K - r + u - 1) / u;
        int64_t m0 = P - r > 0 ? (P - r + u - 1) / u : -((r - P) / u);
        int64_t lim = j.tout - 1 + P - r; /* m*u <= lim */
        int64_t m1 = lim >= 0 ? lim / u : -((-lim + u - 1) / u);
        struct ab_pack pk = {.w = w, .cout = j.cout, .cin = j.cin, .K = kr, .ncb = j.ncb,
                             .nco = j.nco, .kfull = K, .u = u, .r = r, .transposed = true};
        j.ph[r] = (struct ab_phase){.K = kr, .M = max64(0, m1 - m0 + 1), .x0 = m0 - (kr - 1),
                                    .o0 = m0 * u + r - P};
        if (!(j.ph[r].wp = ab_weights(a, &pk, wt))) return true;
    }
    ab_launch(a, &j);
    return true;
}
#endif
