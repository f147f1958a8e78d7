/* fuzz_synth_manifest.c - synth_manifest_parse on arbitrary bytes (no data
 * directory, so recipe entries fail cleanly): either an error with a
 * message, or a manifest whose every tensor has a valid rule, type and
 * shape, and whose first elements can be generated. */
#include <stdint.h>
#include <string.h>

#include "synth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct synth_manifest *m = NULL;
    char err[ERR_MAX] = "";
    if (synth_manifest_parse((const char *)data, size, "fuzz", NULL, &m, err) != CBX_OK) {
        if (m || !memchr(err, 0, sizeof err) || !err[0]) __builtin_trap();
        return 0;
    }
    if (!m || m->n < 0 || !m->file) __builtin_trap();
    int64_t total = 0;
    for (int i = 0; i < m->n; i++) {
        const struct synth_tensor *t = &m->t[i];
        if (!t->name || (t->type != TYPE_F32 && t->type != TYPE_I64) || t->ndim < 0 ||
            t->ndim > TENSOR_MAX_DIMS || t->rule == SYNTH_RECIPE)
            __builtin_trap();
        if (t->rule == SYNTH_INT_RANGE && (t->hi <= t->lo)) __builtin_trap();
        for (int d = 0; d < t->ndim; d++)
            if (t->ne[d] < 0) __builtin_trap();
        int64_t n = synth_tensor_nelements(t);
        total += n;
        int64_t buf[16];
        synth_tensor_fill(t, m->seed, 0, n < 16 ? n : 16, buf);
        if (t->rule == SYNTH_INT_RANGE)
            for (int k = 0; k < (n < 16 ? n : 16); k++)
                if (buf[k] < t->lo || buf[k] >= t->hi) __builtin_trap();
    }
    if (total != m->num_elements) __builtin_trap();
    synth_manifest_free(m);
    return 0;
}
