/* scalar.h - scalar formulas compiled both as C (tensor.c, the reference
 * kernels) and as CUDA code (src/core/cuda/), so that the two backends
 * share one definition and stay bit-identical: IEEE half and bfloat16
 * conversions (round to nearest even, as numpy and torch), the unary
 * activations (torch's formulas, transcendental ones in double), and the
 * Llama-3 RoPE inverse frequencies (float32 step for step, as HF). */
#ifndef CBX_SCALAR_H
#define CBX_SCALAR_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "ops.h"
#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#define SCALAR_FN static inline __host__ __device__
#else
#define SCALAR_FN static inline
#endif

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* The run-time generator's draw (spec/rng.md, core/rng.h): the 24-bit
 * value number i of the sequence keyed by key, splitmix64 of key + (i + 1)
 * * golden ratio, top 24 bits. rng.c and the device's draw (op_sample). */
SCALAR_FN uint32_t scalar_rng_m24(uint64_t key, uint64_t i)
{
    uint64_t z = key + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z = z ^ (z >> 31);
    return (uint32_t)(z >> 40);
}

/* Gaussian value c / 2 of the sequence keyed by key (draws c and c + 1),
 * Box-Muller's cosine branch in double (spec/rng.md §2): rng.c's
 * rng_gaussian and op_randn's kernels on every backend. */
SCALAR_FN float scalar_rng_gaussian(uint64_t key, uint64_t c)
{
    const uint32_t a = scalar_rng_m24(key, c), b = scalar_rng_m24(key, c + 1);
    const double u1 = (double)(16777216u - a) * 0x1p-24;
    const double u2 = (double)b * 0x1p-24;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * 3.141592653589793 * u2));
}

SCALAR_FN float scalar_f32_of_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

SCALAR_FN uint32_t scalar_bits_of_f32(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

SCALAR_FN float scalar_fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return scalar_f32_of_bits(bits);
}

SCALAR_FN uint16_t scalar_f32_to_fp16(float f)
{
    uint32_t x = scalar_bits_of_f32(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow */
    if (ax < 0x38800000u) { /* result is subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign;
        uint32_t e = ax >> 23, man = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* value = man * 2^(e-150); unit 2^-24 */
        uint32_t r = man >> shift, rem = man & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((ax >> 13) - (112u << 10));
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

SCALAR_FN float scalar_bf16_to_f32(uint16_t h) { return scalar_f32_of_bits((uint32_t)h << 16); }

SCALAR_FN uint16_t scalar_f32_to_bf16(float f)
{
    uint32_t x = scalar_bits_of_f32(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* torch's formulas (aten/src/ATen/native/cpu/Activation.cpp and
 * UnaryOpsKernel.cpp); transcendental ones in double. */
SCALAR_FN float scalar_unary(int op, float x, float p0, float p1)
{
    const double d = x;
    switch (op) {
    case UN_GELU: return (float)(0.5 * d * (1.0 + erf(d / sqrt(2.0))));
    case UN_GELU_TANH: {
        const double k = sqrt(2.0 / M_PI);
        return (float)(0.5 * d * (1.0 + tanh(k * (d + 0.044715 * d * d * d))));
    }
    case UN_SILU: return (float)(d / (1.0 + exp(-d)));
    case UN_MISH: return (float)(d * tanh(log1p(exp(d))));
    case UN_ELU: return x > 0 ? x : (float)(p0 * expm1(d));
    case UN_LEAKY_RELU: return x > 0 ? x : x * p0;
    case UN_RELU: return x > 0 ? x : 0.0f;
    case UN_TANH: return (float)tanh(d);
    case UN_SIGMOID: return (float)(1.0 / (1.0 + exp(-d)));
    case UN_SOFTPLUS: return x > 20.0f ? x : (float)log1p(exp(d));
    case UN_EXP: return (float)exp(d);
    case UN_LOG: return (float)log(d);
    case UN_SIN: return (float)sin(d);
    case UN_COS: return (float)cos(d);
    case UN_ABS: return fabsf(x);
    case UN_SQRT: return (float)sqrt(d);
    case UN_SQR: return x * x;
    case UN_NEG: return -x;
    case UN_SCALE: return p0 * x + p1;
    case UN_CLAMP: return x < p0 ? p0 : (x > p1 ? p1 : x); /* NaN passes, as torch */
    }
    return 0;
}

/* HF inv_freq in float32: 1 / base ** (arange(0, dim, 2).float() / dim),
 * then _compute_llama3_parameters when p->factor != 0, each step in
 * float32 as torch evaluates it (python scalars cast to float32). Host
 * code (powf of the host libm) in both backends. */
static inline float scalar_rope_inv_freq(const struct rope_params *p, int i)
{
    float e = (float)(2 * i) / (float)p->n_dims;
    float f = 1.0f / powf(p->theta, e);
    if (p->factor == 0) return f;
    float old = (float)p->original_max_pos;
    float low_wavelen = (float)((double)p->original_max_pos / p->low_freq_factor);
    float high_wavelen = (float)((double)p->original_max_pos / p->high_freq_factor);
    float wavelen = (float)(2 * M_PI) / f;
    if (wavelen > low_wavelen) return f / p->factor;
    if (wavelen < high_wavelen) return f;
    float smooth = (old / wavelen - p->low_freq_factor) /
                   (float)((double)p->high_freq_factor - p->low_freq_factor);
    return (1 - smooth) * f / p->factor + smooth * f;
}

#endif
