/* attn_bf16.h - attention with BF16 products on AMX-BF16 or AVX512-BF16
 * (attn_bf16.c), a path of the cpu backend's attention kernel (nn.c) for
 * long query blocks when the arena asks for BF16 products (arena_bf16). */
#ifndef CBX_CPU_ATTN_BF16_H
#define CBX_CPU_ATTN_BF16_H

#include <stdbool.h>

#include "../backend.h"

/* Attention as op_attention (ops.h; conventions of ops_nn.c) with Q.K^T
 * and P.V as BF16 products (AMX-BF16 tiles when cpu_amx_ready(), else
 * VDPBF16PS): the operands (q * scale, k, v and the softmax numerators p)
 * rounded to BF16 (round to nearest even), products accumulated in F32;
 * scores, bias, softmax and normalisation in F32. Takes the call only
 * when arena_bf16(a), cpu_avx512_bf16_ready(), k and v F32, q, k and v
 * with unit innermost stride, D 32 or 64 and Tq >= 16; returns false then
 * without touching anything, so the caller runs its F32 kernel. true: out written, or a failure
 * (out of memory) recorded in the arena. */
bool attn_bf16(struct arena *a, struct tensor *out, const struct tensor *q,
               const struct tensor *k, const struct tensor *v, const struct tensor *bias,
               const struct attn_params *p);

#endif
