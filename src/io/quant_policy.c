/* quant_policy.c - the per-tensor convert rule (rules listed in
 * quant_policy.h, checked here in the same order). */
#include "io/quant_policy.h"

#include <stdbool.h>
#include <string.h>

int quant_policy_target_ok(enum dtype t)
{
    switch (t) {
    case TYPE_F32: case TYPE_F16: case TYPE_BF16:
    case TYPE_Q8_0: case TYPE_Q4_0: case TYPE_Q4_1: case TYPE_Q5_0: case TYPE_Q5_1:
        return 1;
    default:
        return 0;
    }
}

static bool is_float(enum dtype t)
{
    return t == TYPE_F32 || t == TYPE_F16 || t == TYPE_BF16 || t == TYPE_F64;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Some dot-separated segment of name contains `part` (starts with it when
 * prefix). */
static bool segment_has(const char *name, const char *part, bool prefix)
{
    size_t n = strlen(part);
    for (const char *s = name; *s;) {
        const char *e = strchr(s, '.');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len >= n) {
            if (prefix) {
                if (!strncmp(s, part, n)) return true;
            } else {
                for (size_t i = 0; i + n <= len; i++)
                    if (!strncmp(s + i, part, n)) return true;
            }
        }
        if (!e) break;
        s = e + 1;
    }
    return false;
}

static enum dtype keep(enum dtype stored, const char **why, const char *reason)
{
    if (why) *why = reason;
    return stored;
}

enum dtype quant_policy_type(const char *name, int ndim, const int64_t *ne, enum dtype stored,
                             enum dtype target, const char **why)
{
    if (!quant_policy_target_ok(target)) return keep(stored, why, "target type not supported");
    /* 1 */
    if (!is_float(stored) || stored == TYPE_F64) return keep(stored, why, "integer or f64 tensor");
    /* 2 */
    if (!name || !ends_with(name, ".weight")) return keep(stored, why, "not a .weight (bias, buffer, lstm)");
    /* 3 */
    if (ndim != 2) return keep(stored, why, "not a 2-D linear weight (conv, norm)");
    /* 4 */
    if (segment_has(name, "norm", false) || segment_has(name, "ln_", true))
        return keep(stored, why, "norm");
    /* 5 */
    if (segment_has(name, "emb", false) || segment_has(name, "wpe", true) ||
        segment_has(name, "wte", true) || segment_has(name, "pos_enc", false) ||
        segment_has(name, "position", false))
        return keep(stored, why, "embedding or position table");
    /* 6 */
    if (dtype_traits(target)->quantized && ne[1] % QK != 0)
        return keep(stored, why, "inner dim not a multiple of 32");
    /* 7 */
    if (ne[0] * ne[1] < QUANT_POLICY_MIN_ELEMENTS) return keep(stored, why, "small");
    if (why) *why = "quantisable";
    return target;
}
