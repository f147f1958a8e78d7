/* punc_norm.c - port of punc_norm() (chatterbox tts.py / mtl_tts.py /
 * tts_turbo.py), in upstream order:
 *   1. empty text -> "You need to add some text for me to talk."
 *   2. a lowercase first character is upper-cased (Python str.upper, full
 *      mapping: "ß" -> "SS")
 *   3. whitespace collapsed as Python " ".join(text.split())
 *   4. the variant's literal replacements, in order
 *   5. trailing spaces stripped
 *   6. "." appended unless the text ends with a sentence ender. */
#include "punc_norm.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Python str.isspace(): bidi class WS/B/S or category Zs. */
static bool py_isspace(utf8proc_int32_t c)
{
    if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
        c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
        c == 0x202f || c == 0x205f || c == 0x3000)
        return true;
    return false;
}

struct sbuf { char *p; size_t n, cap; bool oom; };

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 64) + n;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_cp(struct sbuf *b, utf8proc_int32_t c)
{
    utf8proc_uint8_t u[4];
    sb_put(b, (const char *)u, (size_t)utf8proc_encode_char(c, u));
}

/* Python's full upper-casing of one code point where it differs from the
 * simple mapping (SpecialCasing.txt, unconditional entries that occur at
 * the start of text in practice). */
static const char *special_upper(utf8proc_int32_t c)
{
    switch (c) {
    case 0x00df: return "SS";       /* ß */
    case 0xfb00: return "FF";
    case 0xfb01: return "FI";
    case 0xfb02: return "FL";
    case 0xfb03: return "FFI";
    case 0xfb04: return "FFL";
    case 0xfb05: case 0xfb06: return "ST";
    case 0x0149: return "\xca\xbcN"; /* ŉ -> ʼN */
    case 0x01f0: return "J\xcc\x8c"; /* ǰ -> J̌ */
    }
    return NULL;
}

/* Replace every occurrence of `from` by `to` (Python str.replace). */
static bool replace_all(struct sbuf *b, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to);
    if (!b->n || !strstr(b->p, from)) return true;
    struct sbuf o = {0};
    const char *s = b->p, *hit;
    while ((hit = strstr(s, from))) {
        sb_put(&o, s, (size_t)(hit - s));
        sb_put(&o, to, tl);
        s = hit + fl;
    }
    sb_put(&o, s, strlen(s));
    if (o.oom) { free(o.p); return false; }
    free(b->p);
    *b = o;
    return true;
}

static bool ends_with(const struct sbuf *b, const char *s)
{
    size_t n = strlen(s);
    return b->n >= n && memcmp(b->p + b->n - n, s, n) == 0;
}

cbx_status punc_norm(const char *text, enum punc_variant v, char **out, char *err)
{
    *out = NULL;
    size_t len = strlen(text);
    /* validate UTF-8 first so every later step can trust it */
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + i,
                                              (utf8proc_ssize_t)(len - i), &c);
        if (k <= 0)
            return err_setf(err, CBX_ERR_INVALID_ARG, "text is not valid UTF-8 (byte %zu)", i);
        i += (size_t)k;
    }
    if (len == 0) text = "You need to add some text for me to talk.", len = strlen(text);

    struct sbuf b = {0};
    /* 2 + 3: first character upper-cased, whitespace collapsed */
    bool first = true, pending_space = false;
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t c;
        i += (size_t)utf8proc_iterate((const utf8proc_uint8_t *)text + i,
                                      (utf8proc_ssize_t)(len - i), &c);
        if (first) {
            first = false;
            if (utf8proc_islower(c)) {
                const char *sp = special_upper(c);
                if (sp) { sb_put(&b, sp, strlen(sp)); continue; }
                c = utf8proc_toupper(c);
            }
        }
        if (py_isspace(c)) { pending_space = b.n > 0; continue; }
        if (pending_space) sb_put(&b, " ", 1);
        pending_space = false;
        sb_cp(&b, c);
    }
    if (!b.p) sb_put(&b, "", 0);

    /* 4: replacements in upstream order */
    static const char *const common_head[][2] = {{"\xe2\x80\xa6", ", "}, {":", ","}};
    static const char *const english_head[][2] = {
        {"...", ", "}, {"\xe2\x80\xa6", ", "}, {":", ","}, {" - ", ", "}, {";", ", "}};
    static const char *const tail[][2] = {
        {"\xe2\x80\x94", "-"}, {"\xe2\x80\x93", "-"}, {" ,", ","}, {"\xe2\x80\x9c", "\""},
        {"\xe2\x80\x9d", "\""}, {"\xe2\x80\x98", "'"}, {"\xe2\x80\x99", "'"}};
    bool ok = true;
    if (v == PUNC_TURBO)
        for (size_t i = 0; i < 2; i++) ok = ok && replace_all(&b, common_head[i][0], common_head[i][1]);
    else
        for (size_t i = 0; i < 5; i++) ok = ok && replace_all(&b, english_head[i][0], english_head[i][1]);
    for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++)
        ok = ok && replace_all(&b, tail[i][0], tail[i][1]);

    /* 5: rstrip(" ") */
    while (b.n && b.p[b.n - 1] == ' ') b.p[--b.n] = 0;

    /* 6: sentence enders */
    static const char *const enders[] = {".", "!", "?", "-", ",",
                                         "\xe3\x80\x81", "\xef\xbc\x8c", "\xe3\x80\x82",
                                         "\xef\xbc\x9f", "\xef\xbc\x81"};
    size_t n_enders = v == PUNC_MULTILINGUAL ? 10 : 5;
    bool ended = false;
    for (size_t i = 0; i < n_enders; i++) ended = ended || ends_with(&b, enders[i]);
    if (!ended) sb_put(&b, ".", 1);

    if (!ok || b.oom) {
        free(b.p);
        return err_setf(err, CBX_ERR_NOMEM, "punc_norm: out of memory");
    }
    *out = b.p;
    return CBX_OK;
}
