/* attn_amx.h - AMX-BF16 attention (attn_amx.c), a path of the cpu
 * backend's attention kernel (nn.c) for long query blocks when the arena
 * asks for BF16 products (arena_bf16). */
#ifndef CBX_CPU_ATTN_AMX_H
#define CBX_CPU_ATTN_AMX_H

#include <stdbool.h>

#include "../backend.h"

/* Attention as op_attention (ops.h; conventions of ops_nn.c) with Q.K^T
 * and P.V as AMX-BF16 tile products: the operands (q * scale, k, v and the
 * softmax numerators p) rounded to BF16 (round to nearest even), products
 * accumulated in F32; scores, bias, softmax and normalisation in F32.
 * Takes the call only when arena_bf16(a), cpu_amx_ready() with AMX-BF16
 * and AVX512-BF16, k and v F32, q, k and v with unit innermost stride,
 * D 32 or 64 and Tq >= 16; returns false then without touching anything,
 * so the caller runs its F32 kernel. true: out written, or a failure
 * (out of memory) recorded in the arena. */
bool attn_amx(struct arena *a, struct tensor *out, const struct tensor *q,
              const struct tensor *k, const struct tensor *v, const struct tensor *bias,
              const struct attn_params *p);

#endif
