/* splitter.c - long-text splitting (see splitter.h); moved from the
 * engine (pipeline/engine.c engine_split) and taught the sentence ends of
 * the multilingual model's scripts. */
#include "splitter.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <utf8proc.h>

#include "text/tokenizer.h"

bool text_split_has_word(const char *s)
{
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    utf8proc_ssize_t len = (utf8proc_ssize_t)strlen(s);
    while (len > 0) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate(p, len, &c);
        if (k <= 0) { p++; len--; continue; }
        utf8proc_category_t cat = utf8proc_category(c);
        if (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) return true;
        if (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO) return true;
        p += k;
        len -= k;
    }
    return false;
}

/* A piece of text [b, e) of the input and its token count. */
struct unit { const char *b, *e; int64_t tokens; bool hard; /* ends a line */ };

struct units { struct unit *u; int n, cap; };

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static cbx_status push_unit(struct units *U, const char *b, const char *e, bool hard, char *err)
{
    while (b < e && is_space(*b)) b++;
    while (e > b && is_space(e[-1])) e--;
    if (b == e) return CBX_OK;
    if (U->n == U->cap) {
        int cap = U->cap ? 2 * U->cap : 32;
        struct unit *u = realloc(U->u, sizeof *u * (size_t)cap);
        if (!u) return err_setf(err, CBX_ERR_NOMEM, "out of memory splitting the text");
        U->u = u;
        U->cap = cap;
    }
    U->u[U->n++] = (struct unit){b, e, 0, hard};
    return CBX_OK;
}

/* Code point at s (NUL-terminated or bounded by end), *k its bytes (1 for
 * an invalid byte, which is returned as -1). */
static int32_t cp_at(const char *s, const char *end, int *k)
{
    utf8proc_int32_t c;
    utf8proc_ssize_t r = utf8proc_iterate((const utf8proc_uint8_t *)s, end ? (utf8proc_ssize_t)(end - s) : -1, &c);
    *k = r > 0 ? (int)r : 1;
    return r > 0 ? c : -1;
}

/* The code point before s (after text), or -1. */
static int32_t cp_before(const char *text, const char *s)
{
    const char *p = s;
    while (p > text && ((unsigned char)p[-1] & 0xC0) == 0x80) p--;
    if (p == text) return -1;
    p--;
    int k;
    int32_t c = cp_at(p, s, &k);
    return p + k == s ? c : -1;
}

static bool is_greek_letter(int32_t c) { return (c >= 0x370 && c <= 0x3ff) || (c >= 0x1f00 && c <= 0x1fff); }
static bool is_digit(int32_t c) { return (c >= '0' && c <= '9') || (c >= 0xff10 && c <= 0xff19); }

/* Bytes of a sentence ender at s (0 when none); *cjk: ends a sentence
 * without a following space. */
static int ender_len(const char *text, const char *s, bool *cjk)
{
    *cjk = false;
    if (*s == '.' || *s == '!' || *s == '?') return 1;
    int k;
    int32_t c = cp_at(s, NULL, &k);
    switch (c) {
    case ';': /* Greek's question mark typed as a semicolon */
        return is_greek_letter(cp_before(text, s)) ? 1 : 0;
    case 0x2026: /* … */
    case 0x203c: case 0x2047: case 0x2048: case 0x2049: /* ‼ ⁇ ⁈ ⁉ */
    case 0x0964: case 0x0965:                           /* । ॥ */
    case 0x061f: case 0x06d4:                           /* ؟ ۔ */
    case 0x037e:                                        /* Greek question mark */
        return k;
    case 0x3002: case 0xff01: case 0xff1f: case 0xff61: /* 。！？｡ */
        *cjk = true;
        return k;
    case 0xff0e: { /* ．, not in ３．１４ */
        int k2;
        *cjk = !is_digit(cp_at(s + k, NULL, &k2));
        return *cjk ? k : 0;
    }
    default:
        return 0;
    }
}

/* Bytes of a closing quote/bracket at s that stays with its sentence. */
static int closer_len(const char *s)
{
    if (*s == '"' || *s == '\'' || *s == ')' || *s == ']') return 1;
    int k;
    switch (cp_at(s, NULL, &k)) {
    case 0x201d: case 0x2019: case 0x00bb: case 0x203a: /* ” ’ » › */
    case 0x300d: case 0x300f: case 0xff09: case 0x3011: /* 」 』 ） 】 */
    case 0x300b: case 0x3009:                           /* 》 〉 */
        return k;
    default:
        return 0;
    }
}

/* A '.' at dot that does not end a sentence: after a single letter
 * ("J. Smith", "e.g.") or a common title/abbreviation. */
static bool is_abbreviation(const char *text, const char *dot)
{
    static const char *const abbr[] = {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs",
                                       "mt", "no", "fig", "approx", "dept", "e.g", "i.e", "etc."};
    const char *w = dot;
    while (w > text && !is_space(w[-1]) && w[-1] != '(' && w[-1] != '"') w--;
    size_t n = (size_t)(dot - w);
    if (n == 0) return false;
    if (n == 1 && ((*w >= 'A' && *w <= 'Z') || (*w >= 'a' && *w <= 'z'))) return true;
    for (size_t i = 0; i < sizeof abbr / sizeof abbr[0]; i++)
        if (strlen(abbr[i]) == n && !strncasecmp(w, abbr[i], n)) return true;
    return false;
}

static bool unit_has_word(const struct unit *u)
{
    char buf[64];
    size_t n = (size_t)(u->e - u->b);
    if (n >= sizeof buf) return true; /* long pieces are checked per segment */
    memcpy(buf, u->b, n);
    buf[n] = 0;
    return text_split_has_word(buf);
}

/* Step 1: sentences (and lines). */
static cbx_status split_sentences(const char *text, struct units *U, char *err)
{
    const char *b = text, *s = text;
    cbx_status rc = CBX_OK;
    while (*s && rc == CBX_OK) {
        if (*s == '\n') {
            rc = push_unit(U, b, s, true, err);
            b = ++s;
            continue;
        }
        bool cjk;
        int k = ender_len(text, s, &cjk);
        if (!k) { s++; continue; }
        const char *e = s + k;
        for (;;) { /* runs of enders ("?!", "...") and closing quotes */
            bool c2;
            int k2 = ender_len(text, e, &c2);
            if (!k2) k2 = closer_len(e);
            if (!k2) break;
            e += k2;
        }
        if ((cjk || *e == 0 || is_space(*e)) && !(k == 1 && *s == '.' && e == s + 1 && is_abbreviation(text, s))) {
            rc = push_unit(U, b, e, false, err);
            b = e;
        }
        s = e;
    }
    if (rc == CBX_OK) rc = push_unit(U, b, s, false, err);
    return rc;
}

/* Scripts written without spaces between words. */
static bool unspaced(int32_t c)
{
    return (c >= 0x3040 && c <= 0x30ff) || (c >= 0x3400 && c <= 0x4dbf) || (c >= 0x4e00 && c <= 0x9fff) ||
           (c >= 0xf900 && c <= 0xfaff) || (c >= 0x20000 && c <= 0x3134f) || (c >= 0xff66 && c <= 0xff9f);
}

/* Bytes of a clause mark at s in [b, e) to cut after (0 when none); mode
 * 0. */
static int clause_len(const char *b, const char *s, const char *e)
{
    if ((*s == ',' || *s == ';' || *s == ':') && s + 1 < e && is_space(s[1])) return 1;
    if (*s == '-' && s > b && is_space(s[-1]) && s + 1 < e && is_space(s[1])) return 1;
    int k;
    switch (cp_at(s, e, &k)) {
    case 0x2014: case 0x2013: /* — – */
    case 0xff0c: case 0x3001: case 0xff1b: case 0xff1a: /* ，、；： */
        return k;
    case 0x060c: case 0x061b: /* ، ؛ */
        return s + k < e && is_space(s[k]) ? k : 0;
    default:
        return 0;
    }
}

/* Step 2: a piece over budget is cut at clause marks, then between words.
 * mode 0: clauses, 1: words (white space, and for the multilingual kind
 * grapheme boundaries between two characters of unspaced scripts; the
 * English-only kinds keep such a run whole, as they always did). */
static cbx_status split_long(const struct text_tokenizer *tok, const char *language, const struct unit *in,
                             int budget, int mode, struct units *U, char *err)
{
    struct units sub = {0};
    const char *b = in->b, *s = in->b;
    cbx_status rc = CBX_OK;
    utf8proc_int32_t state = 0;
    int32_t prev = -1;
    while (s < in->e && rc == CBX_OK) {
        int k;
        int32_t c = cp_at(s, in->e, &k);
        const char *e = s + k, *cut = NULL;
        /* one call per neighbouring pair keeps utf8proc's cluster state */
        bool brk = prev < 0 || c < 0 || utf8proc_grapheme_break_stateful(prev, c, &state);
        if (mode == 0) {
            int m = clause_len(in->b, s, in->e);
            if (m) cut = e = s + m;
        } else if (is_space(*s)) {
            cut = e;
        } else if (brk && prev >= 0 && c >= 0 && unspaced(prev) && unspaced(c) &&
                   text_tokenizer_kind(tok) == TEXT_TOK_GRAPHEME_MTL) {
            cut = s; /* before c */
        }
        if (cut) {
            rc = push_unit(&sub, b, cut, false, err);
            b = cut;
        }
        prev = c;
        s = e;
    }
    if (rc == CBX_OK) rc = push_unit(&sub, b, in->e, in->hard, err);
    for (int i = 0; i < sub.n && rc == CBX_OK; i++) {
        struct unit x = sub.u[i];
        if ((rc = text_tokenizer_count_lang(tok, x.b, (size_t)(x.e - x.b), language, &x.tokens, err)) != CBX_OK)
            break;
        if (x.tokens > budget && mode == 0) {
            rc = split_long(tok, language, &x, budget, 1, U, err);
        } else {
            if ((rc = push_unit(U, x.b, x.e, x.hard, err)) == CBX_OK) U->u[U->n - 1].tokens = x.tokens;
        }
    }
    free(sub.u);
    return rc;
}

struct segs { char **text; int n; };

/* Units u[0..n) as one segment: a space where the text had white space
 * between two units, nothing where it had none. */
static cbx_status add_segment(struct segs *S, const struct unit *u, int n, char *err)
{
    size_t len = 0;
    for (int i = 0; i < n; i++) len += (size_t)(u[i].e - u[i].b) + 1;
    char *s = malloc(len + 1), *p = s;
    if (!s) return err_setf(err, CBX_ERR_NOMEM, "out of memory splitting the text");
    for (int i = 0; i < n; i++) {
        if (i && u[i].b != u[i - 1].e) *p++ = ' ';
        memcpy(p, u[i].b, (size_t)(u[i].e - u[i].b));
        p += u[i].e - u[i].b;
    }
    *p = 0;
    if (!text_split_has_word(s)) { free(s); return CBX_OK; }
    char **t = realloc(S->text, sizeof *t * (size_t)(S->n + 1));
    if (!t) { free(s); return err_setf(err, CBX_ERR_NOMEM, "out of memory splitting the text"); }
    S->text = t;
    S->text[S->n++] = s;
    return CBX_OK;
}

void text_split_free(char **segments, int n)
{
    for (int i = 0; segments && i < n; i++) free(segments[i]);
    free(segments);
}

cbx_status text_split(const struct text_tokenizer *tok, const char *text, const char *language, int budget,
                      char ***segments, int *n_out, char *err)
{
    *segments = NULL;
    *n_out = 0;
    if (budget < 1) budget = 1;
    struct units sent = {0}, U = {0};
    struct segs out = {0};
    cbx_status rc = split_sentences(text, &sent, err);
    for (int i = 0; i < sent.n && rc == CBX_OK; i++) {
        struct unit *x = &sent.u[i];
        if (!unit_has_word(x)) continue; /* a lone "..." or "!!!" */
        rc = text_tokenizer_count_lang(tok, x->b, (size_t)(x->e - x->b), language, &x->tokens, err);
        if (rc != CBX_OK) break;
        if (x->tokens > budget) rc = split_long(tok, language, x, budget, 0, &U, err);
        else if ((rc = push_unit(&U, x->b, x->e, x->hard, err)) == CBX_OK) U.u[U.n - 1].tokens = x->tokens;
    }
    /* Step 3: greedy packing; group g = units [start, i) */
    int start = 0;
    int64_t acc = 0;
    int *cut = calloc((size_t)U.n + 1, sizeof *cut), n_cut = 0; /* segment starts */
    if (!cut && rc == CBX_OK) rc = err_setf(err, CBX_ERR_NOMEM, "out of memory splitting the text");
    for (int i = 0; i < U.n && rc == CBX_OK; i++) {
        if (i > start && acc + U.u[i].tokens > budget) {
            cut[n_cut++] = start;
            start = i;
            acc = 0;
        }
        acc += U.u[i].tokens;
    }
    if (rc == CBX_OK && U.n > 0) {
        /* a tail under 1/8 of the budget joins the previous segment (up to
         * 1.5x the budget) */
        if (n_cut > 0 && acc * 8 < budget) {
            int64_t prev = 0;
            for (int i = cut[n_cut - 1]; i < start; i++) prev += U.u[i].tokens;
            if (prev + acc <= budget + budget / 2) start = cut[--n_cut];
        }
        cut[n_cut++] = start;
        cut[n_cut] = U.n;
        for (int g = 0; g < n_cut && rc == CBX_OK; g++)
            rc = add_segment(&out, &U.u[cut[g]], cut[g + 1] - cut[g], err);
    }
    free(cut);
    free(sent.u);
    free(U.u);
    if (rc != CBX_OK) {
        text_split_free(out.text, out.n);
        return rc;
    }
    *segments = out.text;
    *n_out = out.n;
    return CBX_OK;
}
