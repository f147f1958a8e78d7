/* elem.h - one element of any dtype as a double or an int64, and a
 * tensor's shape right-aligned into 4 dims: the scalar conversions both
 * backends' elementwise ops (cpu/elementwise.c, ref/elementwise.c) apply,
 * with torch's semantics. Header-only, so the cpu backend's scalar loops
 * inline them. */
#ifndef CBX_CORE_ELEM_H
#define CBX_CORE_ELEM_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"
#include "tensor.h"

/* t's shape and strides right-aligned into 4 dims; padded dims have ne 1
 * and stride 0. */
static inline void elem_shape4(const struct tensor *t, int64_t ne[4], int64_t nb[4])
{
    int off = 4 - t->ndim;
    for (int d = 0; d < 4; d++) {
        ne[d] = 1;
        nb[d] = 0;
    }
    for (int d = 0; d < t->ndim; d++) {
        ne[off + d] = t->ne[d];
        nb[off + d] = t->nb[d];
    }
}

static inline bool elem_is_int(enum dtype t)
{
    return t == TYPE_I8 || t == TYPE_I16 || t == TYPE_I32 || t == TYPE_I64 || t == TYPE_U8 ||
           t == TYPE_BOOL;
}

static inline int64_t elem_load_i(enum dtype t, const char *p)
{
    switch (t) {
    case TYPE_I8: return *(const int8_t *)p;
    case TYPE_U8: return *(const uint8_t *)p;
    case TYPE_BOOL: return *(const uint8_t *)p != 0;
    case TYPE_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case TYPE_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case TYPE_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    default: return 0;
    }
}

static inline double elem_load_f(enum dtype t, const char *p)
{
    switch (t) {
    case TYPE_F32: { float v; memcpy(&v, p, 4); return v; }
    case TYPE_F64: { double v; memcpy(&v, p, 8); return v; }
    case TYPE_F16: { uint16_t h; memcpy(&h, p, 2); return fp16_to_f32(h); }
    case TYPE_BF16: { uint16_t h; memcpy(&h, p, 2); return bf16_to_f32(h); }
    default: return (double)elem_load_i(t, p);
    }
}

/* Integer stores wrap modulo 2^bits, as torch's .to(int) does. */
static inline void elem_store_i(enum dtype t, char *p, int64_t v)
{
    switch (t) {
    case TYPE_I8: case TYPE_U8: *(uint8_t *)p = (uint8_t)v; break;
    case TYPE_BOOL: *(uint8_t *)p = v != 0; break;
    case TYPE_I16: { uint16_t u = (uint16_t)v; memcpy(p, &u, 2); break; }
    case TYPE_I32: { uint32_t u = (uint32_t)v; memcpy(p, &u, 4); break; }
    case TYPE_I64: memcpy(p, &v, 8); break;
    default: break;
    }
}

/* Float to integer truncates toward zero (torch); NaN gives 0 and values
 * outside int64 saturate, where C would be undefined; then the integer
 * wraps to the narrower type. */
static inline void elem_store_f(enum dtype t, char *p, double v)
{
    switch (t) {
    case TYPE_F32: { float f = (float)v; memcpy(p, &f, 4); return; }
    case TYPE_F64: memcpy(p, &v, 8); return;
    case TYPE_F16: { uint16_t h = f32_to_fp16((float)v); memcpy(p, &h, 2); return; }
    case TYPE_BF16: { uint16_t h = f32_to_bf16((float)v); memcpy(p, &h, 2); return; }
    case TYPE_BOOL: *(uint8_t *)p = v != 0; return;
    default: break;
    }
    int64_t i = 0;
    if (v != v) i = 0;
    else if (v >= 9.2233720368547758e18) i = INT64_MAX;
    else if (v <= -9.2233720368547758e18) i = INT64_MIN;
    else i = (int64_t)v;
    elem_store_i(t, p, i);
}

#endif
