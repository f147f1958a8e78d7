/* fuzz_cangjie_json.c - cangjie_load_mem (Cangjie5_TC.json) on arbitrary
 * bytes, then the Chinese step over the loaded table. A file is refused
 * with a one-line message, or it loads and every lookup is consistent: a
 * glyph with a code has an index in [0, entries), the code is valid UTF-8;
 * the multilingual "zh" step over it gives valid UTF-8 with every looked-up
 * glyph replaced by its [cj_*] group. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/cangjie.h"
#include "text/mtl_text.h"
#include "text/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cangjie *t = NULL;
    char err[ERR_MAX] = "";
    if (cangjie_load_mem((const char *)data, size, "fuzz", &t, err) != CBX_OK) {
        if (t || !memchr(err, 0, sizeof err) || !err[0] || strchr(err, '\n')) __builtin_trap();
        return 0;
    }
    if (!t) __builtin_trap();
    /* every glyph the input names, and a few fixed ones */
    char text[256];
    size_t tn = 0;
    static const int32_t fixed[] = {0x4e00, 0x65e5, 0x6708, 'a', 0x3042, 0x1f600};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        tn += (size_t)utf8proc_encode_char(fixed[i], (utf8proc_uint8_t *)text + tn);
    for (size_t i = 0; i < size && tn + 8 < sizeof text;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate(data + i, (utf8proc_ssize_t)(size - i), &c);
        if (k <= 0) { i++; continue; }
        size_t n = 0;
        int index = -1;
        const char *code = cangjie_code(t, c, &n, &index);
        if (code && (index < 0 || (size_t)index >= cangjie_n_entries(t) || !utf8_valid(code, n)))
            __builtin_trap();
        if (c != 0) tn += (size_t)utf8proc_encode_char(c, (utf8proc_uint8_t *)text + tn);
        i += (size_t)k;
    }
    text[tn] = 0;
    char *out = NULL;
    cbx_status rc = mtl_text_prepare(text, tn, "zh", t, &out, err);
    if (rc == CBX_OK && (!out || !utf8_valid(out, strlen(out)) || strncmp(out, "[zh]", 4))) __builtin_trap();
    if (rc != CBX_OK && (rc != CBX_ERR_INVALID_ARG || out)) __builtin_trap();
    free(out);
    cangjie_free(t);
    return 0;
}
