/* linear_amx.c - AMX-INT8 tile kernel of the quantised GEMM (see
 * linear_kernels.h), for CPUs with amx_tile + amx_int8 whose kernel grants
 * the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, Linux >= 5.16).
 *
 * One tile is 16 weight rows x one packed x group (16 rows): per block,
 * TDPBUSD multiplies the 16 x 32 unsigned weight bytes (A, the unpacked
 * rows as they lie: 32 bytes a row) with the group's 8 x 64 record bytes
 * (B: the record's quant layout is AMX's B layout, dword l of row g =
 * quants 4g..4g+3 of x row l) into a 16 x 16 int32 tile C. C goes to
 * memory and the AVX-512 epilogue adds the x record's -off * sum(q),
 * converts and accumulates with d_x * d_w, the same integer and float
 * steps as the VNNI kernel, so both give bit-identical results. Two C
 * tiles alternate; block b's epilogue runs while block b + 1's TDPBUSD
 * does, on C stored one block earlier.
 * Tails of fewer than 16 weight rows use the VNNI tile kernel. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amx_tilecfg.h"
#include "linear_x86.h"

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")))


/* The VNNI kernels: unpack, pack, tails. */
static struct linear_qgemm vnni[2]; /* [0] q4_0, [1] q8_0 */

static bool amx_ok;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_detect(void)
{
    if (!cpu_amx_ready() || !cpu_features()->amx_int8) return;
    amx_ok = linear_qgemm_avx512(TYPE_Q4_0, &vnni[0]) && linear_qgemm_avx512(TYPE_Q8_0, &vnni[1]);
}

bool linear_amx_available(void)
{
    pthread_once(&amx_once, amx_detect);
    return amx_ok;
}

/* tmm0, tmm3: C (16 x 16 int32); tmm1, tmm4: A (16 rows x 32 bytes);
 * tmm2, tmm5: B (8 rows x 64 bytes); static, see amx_tilecfg.h */
static const struct amx_tilecfg amx_cfg __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 32, 64, 64, 32, 64},
    .rows = {16, 16, 8, 16, 16, 8},
};

TGT static void amx_begin(void)
{
    __asm__ volatile("" ::: "memory");
    _tile_loadconfig(&amx_cfg);
}

TGT static void amx_end(void) { _tile_release(); }

/* acc[i] += (C row i + c) * (d_x * d_w[i]) for block b's record */
TGT static inline __attribute__((always_inline)) void
amx_epilogue(__m512 *acc, const int32_t *cbuf, const uint8_t *rec, const float *wdb)
{
    __m512 dx = _mm512_loadu_ps((const float *)(rec + 512));
    __m512i c = _mm512_loadu_si512(rec + 576);
    for (int i = 0; i < 16; i++) {
        __m512i s = _mm512_add_epi32(_mm512_load_si512(cbuf + 16 * i), c);
        __m512 sc = _mm512_mul_ps(dx, _mm512_set1_ps(wdb[i]));
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, acc[i]);
    }
}

TGT static void amx_tile16(const int32_t *wq, const float *wd, const uint8_t *xp, int64_t nb,
                           const float *bias, float *y, int64_t ldy, int lanes)
{
    int32_t cbuf[2][256] __attribute__((aligned(64)));
    __m512 acc[16];
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    /* A of block b: wq + b * 128 dwords (16 rows of 32 bytes) */
#define ISSUE(C, A, B, b)                                                                  \
    do {                                                                                   \
        _tile_zero(C);                                                                     \
        _tile_loadd(A, wq + (b) * 128, 32);                                                \
        _tile_loadd(B, xp + (b) * LINEAR_QG_REC, 64);                                      \
        _tile_dpbusd(C, A, B);                                                             \
    } while (0)
    /* block b's C is stored right after its TDPBUSD and read back one
     * block later, while the next TDPBUSD runs, so the epilogue's loads
     * never wait for a tile store still in flight */
    ISSUE(0, 1, 2, 0);
    _tile_stored(0, cbuf[0], 64);
    int64_t b = 1;
    for (; b + 1 < nb; b += 2) {
        ISSUE(3, 4, 5, b);
        amx_epilogue(acc, cbuf[0], xp + (b - 1) * LINEAR_QG_REC, wd + (b - 1) * 16);
        _tile_stored(3, cbuf[1], 64);
        ISSUE(0, 1, 2, b + 1);
        amx_epilogue(acc, cbuf[1], xp + b * LINEAR_QG_REC, wd + b * 16);
        _tile_stored(0, cbuf[0], 64);
    }
    if (b < nb) {
        ISSUE(3, 4, 5, b);
        amx_epilogue(acc, cbuf[0], xp + (b - 1) * LINEAR_QG_REC, wd + (b - 1) * 16);
        _tile_stored(3, cbuf[1], 64);
        amx_epilogue(acc, cbuf[1], xp + b * LINEAR_QG_REC, wd + b * 16);
    } else {
        amx_epilogue(acc, cbuf[0], xp + (b - 1) * LINEAR_QG_REC, wd + (b - 1) * 16);
    }
#undef ISSUE
    qg_store(acc, 8, bias, y, ldy, lanes);
    qg_store(acc + 8, 8, bias + 8, y + 8, ldy, lanes);
}

static void amx_tile(const int32_t *wq, const float *wd, int nw, const uint8_t *xp, int64_t nb,
                     const float *bias, float *y, int64_t ldy, int lanes)
{
    if (nw == 16) {
        amx_tile16(wq, wd, xp, nb, bias, y, ldy, lanes);
        return;
    }
    /* tails: the unpacked layout is [b][nw][32 bytes], what the VNNI tile
     * kernel reads for nw <= 8; above, unpack order would differ, so the
     * driver never passes 8 < nw < 16 (see linear_qgemm_amx) */
    vnni[0].tile(wq, wd, nw, xp, nb, bias, y, ldy, lanes);
}

bool linear_qgemm_amx(enum dtype t, struct linear_qgemm *g)
{
    if (!linear_amx_available() || !linear_qgemm_avx512(t, g)) return false;
    g->tile = amx_tile;
    g->maxw = 16;
    g->thread_begin = amx_begin;
    g->thread_end = amx_end;
    return true;
}
