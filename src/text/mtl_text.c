/* mtl_text.c - the multilingual tokenizer's text steps (see mtl_text.h):
 * port of MTLTokenizer.encode / preprocess_text / korean_normalize /
 * ChineseCangjieConverter.__call__ (chatterbox mtl_tts tokenizer);
 * hiragana_normalize is japanese.c. */
#include "mtl_text.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <utf8proc.h>

#include "text/cangjie.h"
#include "text/japanese.h"

struct range { int32_t lo, hi; };

static bool in_ranges(int32_t c, const struct range *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (c >= r[i].lo && c <= r[i].hi) return true;
    return false;
}

/* Cased (DerivedCoreProperties): Lu, Ll, Lt and Other_Lowercase /
 * Other_Uppercase, the latter as Python 3.11 (Unicode 14) has them. */
static const struct range other_cased[] = {
    {0xaa, 0xaa},       {0xba, 0xba},       {0x2b0, 0x2b8},     {0x2c0, 0x2c1},     {0x2e0, 0x2e4},
    {0x345, 0x345},     {0x37a, 0x37a},     {0x1d2c, 0x1d6a},   {0x1d78, 0x1d78},   {0x1d9b, 0x1dbf},
    {0x2071, 0x2071},   {0x207f, 0x207f},   {0x2090, 0x209c},   {0x2160, 0x217f},   {0x24b6, 0x24e9},
    {0x2c7c, 0x2c7d},   {0xa69c, 0xa69d},   {0xa770, 0xa770},   {0xa7f8, 0xa7f9},   {0xab5c, 0xab5f},
    {0x10780, 0x10780}, {0x10783, 0x10785}, {0x10787, 0x107b0}, {0x107b2, 0x107ba}, {0x1f130, 0x1f149},
    {0x1f150, 0x1f169}, {0x1f170, 0x1f189},
};

/* Case_Ignorable: Mn, Me, Cf, Lm, Sk and Word_Break MidLetter, MidNumLet,
 * Single_Quote. */
static const struct range other_ignorable[] = {
    {0x27, 0x27},     {0x2e, 0x2e},     {0x3a, 0x3a},     {0xb7, 0xb7},     {0x387, 0x387},   {0x55f, 0x55f},
    {0x5f4, 0x5f4},   {0x2018, 0x2019}, {0x2024, 0x2024}, {0x2027, 0x2027}, {0xfe13, 0xfe13}, {0xfe52, 0xfe52},
    {0xfe55, 0xfe55}, {0xff07, 0xff07}, {0xff0e, 0xff0e}, {0xff1a, 0xff1a},
};

int mtl_text_is_cased(int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
           in_ranges(c, other_cased, sizeof other_cased / sizeof other_cased[0]);
}

int mtl_text_is_case_ignorable(int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_ME || k == UTF8PROC_CATEGORY_CF ||
           k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_SK ||
           in_ranges(c, other_ignorable, sizeof other_ignorable / sizeof other_ignorable[0]);
}

/* Python str.isspace() (as punc_norm.c) */
static bool py_isspace(int32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

/* A growing array of code points. */
struct cps { int32_t *p; size_t n, cap; bool oom; };

static void cp_put(struct cps *a, int32_t c)
{
    if (a->oom) return;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *p = realloc(a->p, cap * sizeof *p);
        if (!p) { a->oom = true; return; }
        a->p = p;
        a->cap = cap;
    }
    a->p[a->n++] = c;
}

static cbx_status decode(const char *text, size_t len, struct cps *a, char *err)
{
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(len - i), &c);
        if (k <= 0) return err_setf(err, CBX_ERR_INVALID_ARG, "text is not valid UTF-8 (byte %zu)", i);
        cp_put(a, c);
        i += (size_t)k;
    }
    return a->oom ? err_setf(err, CBX_ERR_NOMEM, "multilingual text: out of memory") : CBX_OK;
}

/* UTF-8 of a[0..n), with every ASCII space as "[SPACE]" when `spaces` and
 * `prefix` in front. */
static char *encode_utf8(const int32_t *a, size_t n, const char *prefix, bool spaces)
{
    size_t plen = prefix ? strlen(prefix) : 0, cap = plen + 1;
    for (size_t i = 0; i < n; i++) cap += spaces && a[i] == ' ' ? 7 : 4;
    char *o = malloc(cap), *p = o;
    if (!o) return NULL;
    if (plen) memcpy(p, prefix, plen), p += plen;
    for (size_t i = 0; i < n; i++) {
        if (spaces && a[i] == ' ') memcpy(p, "[SPACE]", 7), p += 7;
        else p += utf8proc_encode_char(a[i], (utf8proc_uint8_t *)p);
    }
    *p = 0;
    return o;
}

/* Python's lower(): U+0130 -> "i\u0307" (SpecialCasing), U+03A3 -> final
 * sigma when preceded by a cased letter and not followed by one (skipping
 * case-ignorables both ways), else the simple mapping. */
static void lower_cps(const int32_t *in, size_t n, struct cps *out)
{
    for (size_t i = 0; i < n; i++) {
        int32_t c = in[i];
        if (c == 0x130) {
            cp_put(out, 'i');
            cp_put(out, 0x307);
        } else if (c == 0x3a3) {
            size_t j = i;
            while (j > 0 && mtl_text_is_case_ignorable(in[j - 1])) j--;
            bool fin = j > 0 && mtl_text_is_cased(in[j - 1]);
            if (fin) {
                size_t k = i + 1;
                while (k < n && mtl_text_is_case_ignorable(in[k])) k++;
                fin = k == n || !mtl_text_is_cased(in[k]);
            }
            cp_put(out, fin ? 0x3c2 : 0x3c3);
        } else {
            cp_put(out, utf8proc_tolower(c));
        }
    }
}

cbx_status mtl_text_lower(const char *text, size_t len, char **out, char *err)
{
    *out = NULL;
    struct cps a = {0}, b = {0};
    cbx_status rc = decode(text, len, &a, err);
    if (rc == CBX_OK) {
        lower_cps(a.p, a.n, &b);
        *out = b.oom ? NULL : encode_utf8(b.p, b.n, NULL, false);
        if (!*out) rc = err_setf(err, CBX_ERR_NOMEM, "multilingual text: out of memory");
    }
    free(a.p);
    free(b.p);
    return rc;
}

/* mtl_tts.py SUPPORTED_LANGUAGES */
static const char *const languages[] = {"ar", "da", "de", "el", "en", "es", "fi", "fr", "he", "hi", "it", "ja",
                                        "ko", "ms", "nl", "no", "pl", "pt", "ru", "sv", "sw", "tr", "zh"};

/* ChineseCangjieConverter.__call__ without a segmenter: a Lo character
 * with a code -> "[cj_x]" per character x of code + index, "[cj_.]". */
static cbx_status cangjie_step(const struct cangjie *cj, const struct cps *in, struct cps *out, char *err)
{
    for (size_t i = 0; i < in->n; i++) {
        int32_t c = in->p[i];
        size_t n = 0;
        int index = 0;
        const char *code = utf8proc_category(c) == UTF8PROC_CATEGORY_LO ? cangjie_code(cj, c, &n, &index) : NULL;
        if (!code) { cp_put(out, c); continue; }
        char num[16] = "";
        if (index > 0) snprintf(num, sizeof num, "%d", index);
        struct cps s = {0};
        cbx_status rc = decode(code, n, &s, err); /* valid: cangjie_load_mem checked it */
        for (size_t k = 0; num[k] && rc == CBX_OK; k++) cp_put(&s, num[k]);
        for (size_t k = 0; k < s.n && rc == CBX_OK && !s.oom; k++) {
            for (const char *p = "[cj_"; *p; p++) cp_put(out, *p);
            cp_put(out, s.p[k]);
            cp_put(out, ']');
        }
        free(s.p);
        if (rc != CBX_OK) return rc;
        if (s.oom) return err_setf(err, CBX_ERR_NOMEM, "multilingual text: out of memory");
        for (const char *p = "[cj_.]"; *p; p++) cp_put(out, *p);
    }
    return out->oom ? err_setf(err, CBX_ERR_NOMEM, "multilingual text: out of memory") : CBX_OK;
}

/* NFKD of UTF-8 s into a (emptied first). */
static cbx_status nfkd_cps(const char *s, struct cps *a, char *err)
{
    utf8proc_uint8_t *d = NULL;
    utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s, 0, &d,
                                      UTF8PROC_NULLTERM | UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    if (k < 0)
        return err_setf(err, k == UTF8PROC_ERROR_NOMEM ? CBX_ERR_NOMEM : CBX_ERR_INVALID_ARG, "NFKD: %s",
                        utf8proc_errmsg(k));
    a->n = 0;
    cbx_status rc = decode((const char *)d, (size_t)k, a, err);
    free(d);
    return rc;
}

cbx_status mtl_text_prepare(const char *text, size_t len, const char *language, const struct cangjie *cj,
                            char **out, char *err)
{
    *out = NULL;
    char tag[8] = "";
    if (language) {
        size_t i = 0, n = sizeof languages / sizeof languages[0];
        while (i < n && strcasecmp(language, languages[i])) i++;
        if (i == n)
            return err_setf(err, CBX_ERR_INVALID_ARG,
                            "unsupported language \"%.32s\"; the multilingual model takes one of: ar, da, de, el, "
                            "en, es, fi, fr, he, hi, it, ja, ko, ms, nl, no, pl, pt, ru, sv, sw, tr, zh",
                            language);
        language = languages[i];
        if (!strcmp(language, "zh") && !cj)
            return err_setf(err, CBX_ERR_NOT_FOUND,
                            "language \"zh\": the Chinese step needs the Cangjie table Cangjie5_TC.json");
        tag[0] = '[';
        memcpy(tag + 1, language, 2);
        tag[3] = ']';
        tag[4] = 0;
    }
    struct cps a = {0}, b = {0};
    cbx_status rc = decode(text, len, &a, err);
    utf8proc_uint8_t *nfkd = NULL;
    char *lower = NULL;
    if (rc == CBX_OK) {
        /* 1. lower-case */
        lower_cps(a.p, a.n, &b);
        lower = b.oom ? NULL : encode_utf8(b.p, b.n, NULL, false);
        if (!lower) rc = err_setf(err, CBX_ERR_NOMEM, "multilingual text: out of memory");
    }
    if (rc == CBX_OK) {
        /* 2. NFKD */
        utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)lower, 0, &nfkd,
                                          UTF8PROC_NULLTERM | UTF8PROC_STABLE | UTF8PROC_DECOMPOSE |
                                              UTF8PROC_COMPAT);
        if (k < 0) rc = err_setf(err, k == UTF8PROC_ERROR_NOMEM ? CBX_ERR_NOMEM : CBX_ERR_INVALID_ARG,
                                 "NFKD: %s", utf8proc_errmsg(k));
    }
    if (rc == CBX_OK) {
        a.n = 0;
        rc = decode((const char *)nfkd, strlen((const char *)nfkd), &a, err);
    }
    if (rc == CBX_OK && language && !strcmp(language, "zh")) {
        /* 3. ChineseCangjieConverter */
        b.n = 0;
        rc = cangjie_step(cj, &a, &b, err);
        a.n = 0;
        for (size_t i = 0; i < b.n && rc == CBX_OK; i++) cp_put(&a, b.p[i]);
        if (rc == CBX_OK && a.oom) rc = err_setf(err, CBX_ERR_NOMEM, "multilingual text: out of memory");
    }
    if (rc == CBX_OK && language && !strcmp(language, "ja")) {
        /* 3. hiragana_normalize: kakasi, then NFKD again */
        char *s = encode_utf8(a.p, a.n, NULL, false), *h = NULL;
        if (!s) rc = err_setf(err, CBX_ERR_NOMEM, "multilingual text: out of memory");
        else rc = japanese_hiragana(s, strlen(s), &h, err);
        if (rc == CBX_OK) rc = nfkd_cps(h, &a, err);
        free(s);
        free(h);
    }
    if (rc == CBX_OK && language && !strcmp(language, "ko")) {
        /* 3. korean_normalize: syllables to jamo, then str.strip() */
        b.n = 0;
        for (size_t i = 0; i < a.n; i++) {
            int32_t c = a.p[i];
            if (c < 0xac00 || c > 0xd7af) { cp_put(&b, c); continue; }
            int32_t s = c - 0xac00;
            cp_put(&b, 0x1100 + s / 588);
            cp_put(&b, 0x1161 + (s % 588) / 28);
            if (s % 28) cp_put(&b, 0x11a7 + s % 28);
        }
        size_t lo = 0, hi = b.n;
        while (lo < hi && py_isspace(b.p[lo])) lo++;
        while (hi > lo && py_isspace(b.p[hi - 1])) hi--;
        a.n = 0;
        for (size_t i = lo; i < hi; i++) cp_put(&a, b.p[i]);
        if (a.oom || b.oom) rc = err_setf(err, CBX_ERR_NOMEM, "multilingual text: out of memory");
    }
    if (rc == CBX_OK) {
        /* 4 + 5: the language tag, [SPACE] */
        *out = encode_utf8(a.p, a.n, tag, true);
        if (!*out) rc = err_setf(err, CBX_ERR_NOMEM, "multilingual text: out of memory");
    }
    free(a.p);
    free(b.p);
    free(lower);
    free(nfkd);
    return rc;
}
