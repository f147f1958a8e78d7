/* cpu_weight.h - what the cpu backend attaches to a placed weight
 * (tensor.extra; core/weights.h, cpu/weights.c). Only cpu kernels read it.
 *   CPU_WEIGHT_GEMV16: q4_0 / q8_0 rows repacked for the decode GEMV
 *     (linear_kernels.h, linear_pack); a static tag, nothing to free.
 *   CPU_WEIGHT_CONV: a convolution's BF16 weight panels (conv_bf16.c),
 *     made on the first call that needs them (one per output phase of a
 *     transposed conv) and kept with the tensor until its set is freed. */
#ifndef CBX_CPU_WEIGHT_H
#define CBX_CPU_WEIGHT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../tensor.h"

enum cpu_weight_kind { CPU_WEIGHT_GEMV16 = 1, CPU_WEIGHT_CONV = 2 };

struct cpu_conv_panels {
    int64_t cout, cin, K, tag; /* tag: 0 conv, else 1 + phase + 256 * stride */
    uint16_t *wp;
    struct cpu_conv_panels *next;
};

struct cpu_weight {
    enum cpu_weight_kind kind;
    pthread_mutex_t lock;            /* CPU_WEIGHT_CONV: guards panels */
    struct cpu_conv_panels *panels;  /* entries are never removed before release */
};

/* The tag linear_pack attaches (shared, never freed). */
extern const struct cpu_weight cpu_weight_gemv16;

static inline bool cpu_weight_is(const struct tensor *t, enum cpu_weight_kind k)
{
    return t && t->extra && ((const struct cpu_weight *)t->extra)->kind == k;
}

#endif
