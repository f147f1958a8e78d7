/* weights.c - the cpu backend's weight placement (backend.h
 * prepare_weight / release_weight; layouts in cpu_weight.h).
 *   - linears flagged WEIGHT_DECODE in q4_0 / q8_0 (where linear_pack
 *     supports them): repacked for the decode GEMV, in place when the set
 *     owns the bytes (a converted weight), else into set memory when
 *     linear_pack_copies() (not with CBX_PACK=1: the copy's fresh pages
 *     cost load time), the source's whole pages then dropped from this
 *     process (weight_drop_source). Weights that cannot be packed, or all
 *     when memory runs out, stay in the plain layout (the usual path).
 *   - conv1d / conv_transpose1d weights where AVX512-BF16 (with AMX or
 *     not) may run: a slot for their BF16 panels (made on first use,
 *     conv_bf16.c).
 *   - everything else: the plain layout. */
#include <stdlib.h>

#include "../backend.h"
#include "../cpu_features.h"
#include "conv_kernels.h"
#include "cpu_weight.h"
#include "linear_kernels.h"

const struct cpu_weight cpu_weight_gemv16 = {.kind = CPU_WEIGHT_GEMV16};

cbx_status cpu_prepare_weight(const struct backend *be, struct weight_set *s, struct tensor *t,
                              enum weight_role role, unsigned flags, char *err)
{
    if (role == WEIGHT_LINEAR && (flags & WEIGHT_DECODE) && linear_pack_supported(t)) {
        if (weight_set_owns(s, t->data)) {
            (void)linear_pack(be->tp, t, t->data, t);
        } else if (linear_pack_copies()) {
            const struct tensor src = *t;
            void *dst = weight_set_host(s, tensor_nbytes(t), true);
            if (dst && linear_pack(be->tp, t, dst, t)) weight_drop_source(&src);
        }
        return CBX_OK;
    }
#ifdef CONV_BF16
    if ((role == WEIGHT_CONV1D || role == WEIGHT_CONV_TRANSPOSE1D) && cpu_features()->avx512_bf16) {
        struct cpu_weight *w = calloc(1, sizeof *w);
        if (!w || pthread_mutex_init(&w->lock, NULL)) {
            free(w);
            return err_setf(err, CBX_ERR_NOMEM, "cpu: out of memory placing %s", t->name ? t->name : "a weight");
        }
        w->kind = CPU_WEIGHT_CONV;
        t->extra = w;
    }
#endif
    (void)err;
    return CBX_OK;
}

void cpu_release_weight(const struct backend *be, struct tensor *t)
{
    (void)be;
    if (cpu_weight_is(t, CPU_WEIGHT_CONV)) {
        struct cpu_weight *w = t->extra;
        for (struct cpu_conv_panels *p = w->panels; p;) {
            struct cpu_conv_panels *n = p->next;
            free(p->wp);
            free(p);
            p = n;
        }
        pthread_mutex_destroy(&w->lock);
        free(w);
    }
    t->extra = NULL;
}
