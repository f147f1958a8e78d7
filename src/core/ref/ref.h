/* ref.h - shared by the ref kernels (src/core/ref/): element access by
 * index over any strides. */
#ifndef CBX_REF_H
#define CBX_REF_H

#include "../backend.h"

/* Element of t at index i[0..ndim-1], as float (F32, F16 or BF16). */
static inline float ref_ld(const struct tensor *t, const int64_t *i)
{
    const char *p = t->data;
    for (int d = 0; d < t->ndim; d++) p += i[d] * t->nb[d];
    switch (t->type) {
    case TYPE_F16: return fp16_to_f32(*(const uint16_t *)p);
    case TYPE_BF16: return bf16_to_f32(*(const uint16_t *)p);
    default: return *(const float *)p;
    }
}

#endif
