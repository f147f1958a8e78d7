/* japanese.c - hiragana_normalize on libkakasi (see japanese.h). */
#include "japanese.h"

#include <errno.h>
#include <iconv.h>
#include <libkakasi.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

/* upstream's is_kanji: 19968 <= ord(c) <= 40959 */
static bool is_kanji(int32_t c) { return c >= 0x4e00 && c <= 0x9fff; }
static bool is_hiragana(int32_t c) { return (c >= 0x3041 && c <= 0x3096) || c == 0x309d || c == 0x309e; }

/* ---- the kakasi side: one process-wide lock ------------------------------ */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool configured; /* kakasi's options are set (under lock) */
static bool broken;     /* kakasi failed to allocate: never called again (under lock) */
static iconv_t to_euc = (iconv_t)-1, from_euc = (iconv_t)-1; /* under lock */

static const char *dict_path(void)
{
    const char *p = getenv("KANWADICTPATH");
    return p && *p ? p : "/usr/share/kakasi/kanwadict";
}

/* Open the converters once (under lock). */
static cbx_status ready(char *err)
{
    if (to_euc != (iconv_t)-1 && from_euc != (iconv_t)-1) return CBX_OK;
    if (access(dict_path(), R_OK) != 0)
        return err_setf(err, CBX_ERR_NOT_FOUND,
                        "Japanese: kakasi's dictionary %s is not readable (install kakasi-dic, or set KANWADICTPATH)",
                        dict_path());
    if (to_euc == (iconv_t)-1) to_euc = iconv_open("EUC-JP", "UTF-8");
    if (from_euc == (iconv_t)-1) from_euc = iconv_open("UTF-8", "EUC-JP");
    if (to_euc == (iconv_t)-1 || from_euc == (iconv_t)-1)
        return err_setf(err, CBX_ERR_UNSUPPORTED, "Japanese: iconv has no UTF-8 <-> EUC-JP conversion");
    return CBX_OK;
}

/* in[0..n) through cd into a new NUL-terminated string (*out, free()).
 * CBX_ERR_INVALID_ARG when a character cannot be converted. */
static cbx_status convert(iconv_t cd, const char *in, size_t n, char **out, char *err)
{
    *out = NULL;
    size_t cap = 2 * n + 8;
    char *o = malloc(cap);
    if (!o) return err_setf(err, CBX_ERR_NOMEM, "Japanese: out of memory");
    iconv(cd, NULL, NULL, NULL, NULL);
    char *ip = (char *)in, *op = o;
    size_t il = n, ol = cap - 1;
    while (il > 0) {
        if (iconv(cd, &ip, &il, &op, &ol) != (size_t)-1) continue;
        if (errno != E2BIG) {
            free(o);
            return err_setf(err, CBX_ERR_INVALID_ARG, "Japanese: iconv: %s", strerror(errno));
        }
        size_t used = (size_t)(op - o);
        char *g = realloc(o, cap * 2);
        if (!g) { free(o); return err_setf(err, CBX_ERR_NOMEM, "Japanese: out of memory"); }
        o = g;
        cap *= 2;
        op = o + used;
        ol = cap - 1 - used;
    }
    *op = 0;
    *out = o;
    return CBX_OK;
}

/* kakasi with options argv on UTF-8 s[0..n): *out UTF-8 (free()). */
static cbx_status run_kakasi(const char *s, size_t n, char **out, char *err)
{
    *out = NULL;
    if (broken)
        return err_setf(err, CBX_ERR_INTERNAL,
                        "Japanese: libkakasi ran out of memory earlier in this process and cannot be used again");
    char *euc = NULL, *r = NULL;
    cbx_status rc = convert(to_euc, s, n, &euc, err);
    if (rc != CBX_OK) return rc;
    r = kakasi_do(euc);
    /* kakasi_do returns NULL only when its allocations fail; libkakasi
     * does not recover from that (later calls read nothing, setting it up
     * again crashes), so the step is off for the rest of the process */
    if (!r) {
        rc = err_setf(err, CBX_ERR_NOMEM, "Japanese: out of memory (kakasi_do)");
        broken = true;
    }
    else rc = convert(from_euc, r, strlen(r), out, err);
    if (r) kakasi_free(r);
    free(euc);
    return rc;
}

/* kakasi is set up once for the process: -JH (kanji to hiragana) with -f
 * ("furigana": each converted word comes out as orig[reading]), so one
 * call gives kakasi's segmentation and the readings together. */

static cbx_status configure(char *err)
{
    static char a0[] = "kakasi", a1[] = "-ieuc", a2[] = "-oeuc", a3[] = "-JH", a4[] = "-f";
    char *argv[] = {a0, a1, a2, a3, a4, NULL};
    if (configured) return CBX_OK;
    if (kakasi_getopt_argv(5, argv) != 0)
        return err_setf(err, CBX_ERR_INTERNAL, "Japanese: kakasi rejected its options (-JH -f)");
    configured = true;
    return CBX_OK;
}

/* ---- segments ------------------------------------------------------------ */

/* A piece of the input [b, e): copied, or (kanji) replaced by reading. */
struct piece { size_t b, e; bool kanji; char *reading; };
struct pieces { struct piece *p; size_t n, cap; };

/* Append [b, e); reading (owned from here on, freed on failure) makes it a
 * kanji word. */
static bool put_piece(struct pieces *P, size_t b, size_t e, char *reading)
{
    if (b == e && !reading) return true;
    if (P->n == P->cap) {
        size_t cap = P->cap ? P->cap * 2 : 32;
        struct piece *p = realloc(P->p, cap * sizeof *p);
        if (!p) { free(reading); return false; }
        P->p = p;
        P->cap = cap;
    }
    P->p[P->n++] = (struct piece){b, e, reading != NULL, reading};
    return true;
}

/* Code point at s[i..n) (n bytes left), *k its bytes; -1 when invalid. */
static int32_t cp_at(const char *s, size_t i, size_t n, size_t *k)
{
    utf8proc_int32_t c;
    utf8proc_ssize_t r = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
    *k = r > 0 ? (size_t)r : 0;
    return r > 0 ? c : -1;
}

static bool has_kanji(const char *s, size_t n)
{
    for (size_t i = 0, k; i < n; i += k)
        if (is_kanji(cp_at(s, i, n, &k))) return true;
    return false;
}

/* Whether EUC-JP holds the character s[0..k) (under lock). */
static bool euc_ok(const char *s, size_t k)
{
    char buf[16], *ip = (char *)s, *op = buf;
    size_t il = k, ol = sizeof buf;
    iconv(to_euc, NULL, NULL, NULL, NULL);
    return iconv(to_euc, &ip, &il, &op, &ol) != (size_t)-1 && il == 0;
}

/* End of the run that starts with the kanji at i. */
static size_t run_end(const char *s, size_t i, size_t n)
{
    size_t k;
    while (i < n) {
        int32_t c = cp_at(s, i, n, &k);
        bool in = is_kanji(c) || c == 0x3005 || is_hiragana(c);
        if (c == 0x30f5 || c == 0x30f6) { /* ヵ ヶ between kanji (一ヶ月) */
            size_t k2;
            in = i + k < n && is_kanji(cp_at(s, i + k, n, &k2));
        }
        if (!in || !euc_ok(s + i, k)) break;
        i += k;
    }
    return i;
}

static char *dup_n(const char *s, size_t n)
{
    char *o = malloc(n + 1);
    if (o) memcpy(o, s, n), o[n] = 0;
    return o;
}

/* Parse kakasi -f output o for the run s[b, e) into pieces: plain text
 * (hiragana, copied) and "orig[reading]" words, orig starting at the
 * first character that is not hiragana. 1: parsed, 0: o does not spell
 * the run (the caller falls back), -1: out of memory. */
static int parse_f(const char *s, size_t b, size_t e, const char *o, struct pieces *P)
{
    size_t at = b;
    while (*o) {
        const char *lb = strchr(o, '['), *rb = lb ? strchr(lb, ']') : NULL;
        size_t m = lb ? (size_t)(lb - o) : strlen(o);
        if ((lb && !rb) || at + m > e || memcmp(s + at, o, m)) return 0;
        size_t w = 0, k; /* orig starts at the first non-hiragana */
        while (w < m && is_hiragana(cp_at(o, w, m, &k))) w += k;
        if (!lb) {
            if (!put_piece(P, at, at + m, NULL)) return -1;
            at += m;
            break;
        }
        if (w == m) return 0; /* a reading with no word in front */
        if (!put_piece(P, at, at + w, NULL)) return -1;
        char *r = dup_n(lb + 1, (size_t)(rb - lb - 1));
        if (!r || !put_piece(P, at + w, at + m, r)) return -1; /* put_piece frees r on failure */
        at += m;
        o = rb + 1;
    }
    return at == e ? 1 : 0;
}

/* A kanji word with a small "っ" before its end is read in parts cut
 * after each such "っ": pykakasi's segments end there ("渡っ" "た"), and
 * kakasi drops the kanji of "作って" read whole (it reads "作っ" alone). */
static cbx_status recut(const char *s, struct pieces *P, size_t first, char *err)
{
    for (size_t i = first; i < P->n; i++) {
        struct piece x = P->p[i];
        if (!x.kanji) continue;
        size_t cut = 0;
        for (size_t j = x.b; j + 3 < x.e && !cut; j++)
            if (!memcmp(s + j, "\xe3\x81\xa3", 3)) cut = j + 3;
        if (!cut) continue;
        struct pieces Q = {0};
        char *o1 = NULL, *o2 = NULL;
        cbx_status rc = run_kakasi(s + x.b, cut - x.b, &o1, err);
        if (rc == CBX_OK) rc = run_kakasi(s + cut, x.e - cut, &o2, err);
        int ok = 1;
        if (rc == CBX_OK) ok = parse_f(s, x.b, cut, o1, &Q);
        if (rc == CBX_OK && ok == 1) ok = parse_f(s, cut, x.e, o2, &Q);
        if (ok < 0) rc = err_setf(err, CBX_ERR_NOMEM, "Japanese: out of memory");
        if (rc == CBX_OK && ok == 1 && Q.n > 1) {
            /* replace piece i by Q's pieces */
            struct piece *p = P->n - 1 + Q.n > P->cap ? realloc(P->p, (P->n - 1 + Q.n) * sizeof *p) : P->p;
            if (!p) {
                rc = err_setf(err, CBX_ERR_NOMEM, "Japanese: out of memory");
            } else {
                P->p = p;
                if (P->n - 1 + Q.n > P->cap) P->cap = P->n - 1 + Q.n;
                free(x.reading);
                memmove(P->p + i + Q.n, P->p + i + 1, (P->n - i - 1) * sizeof *p);
                memcpy(P->p + i, Q.p, Q.n * sizeof *p);
                P->n += Q.n - 1;
                i += Q.n - 1;
                Q.n = 0;
            }
        }
        for (size_t q = 0; q < Q.n; q++) free(Q.p[q].reading);
        free(Q.p);
        free(o1);
        free(o2);
        if (rc != CBX_OK) return rc;
    }
    return CBX_OK;
}

/* The runs, through kakasi (under lock). */
static cbx_status segment(const char *s, size_t n, struct pieces *P, char *err)
{
    size_t gap = 0, i = 0, k;
    while (i < n) {
        int32_t c = cp_at(s, i, n, &k);
        if (c < 0) return err_setf(err, CBX_ERR_INVALID_ARG, "text is not valid UTF-8 (byte %zu)", i);
        if (!is_kanji(c) || !euc_ok(s + i, k)) { i += k; continue; }
        size_t e = run_end(s, i, n);
        if (!put_piece(P, gap, i, NULL)) return err_setf(err, CBX_ERR_NOMEM, "Japanese: out of memory");
        char *o = NULL;
        cbx_status rc = run_kakasi(s + i, e - i, &o, err);
        if (rc != CBX_OK) return rc;
        size_t first = P->n;
        int ok = parse_f(s, i, e, o, P);
        if (ok == 0) {
            /* unexpected output: the run is one word, read as kakasi -JH
             * would (its output without the orig[ ] frames) */
            for (size_t q = first; q < P->n; q++) free(P->p[q].reading);
            P->n = first;
            char *r = malloc(strlen(o) + 1), *w = r;
            for (const char *p = o; r && *p;) {
                const char *lb = strchr(p, '['), *rb = lb ? strchr(lb, ']') : NULL;
                if (!lb || !rb) { strcpy(w, p); w += strlen(p); break; }
                size_t m = (size_t)(lb - p), h = 0, kk;
                while (h < m && is_hiragana(cp_at(p, h, m, &kk))) h += kk;
                memcpy(w, p, h), w += h;
                memcpy(w, lb + 1, (size_t)(rb - lb - 1)), w += rb - lb - 1;
                p = rb + 1;
            }
            if (r) *w = 0;
            ok = r && put_piece(P, i, e, r) ? 1 : -1;
        }
        free(o);
        if (ok < 0) return err_setf(err, CBX_ERR_NOMEM, "Japanese: out of memory");
        if ((rc = recut(s, P, first, err)) != CBX_OK) return rc;
        gap = i = e;
    }
    if (!put_piece(P, gap, n, NULL)) return err_setf(err, CBX_ERR_NOMEM, "Japanese: out of memory");
    return CBX_OK;
}

/* Everything that touches kakasi, under the lock. A word whose original
 * holds no kanji (U+4E00..U+9FFF; "々" alone) is copied, as upstream's
 * rule looks at the original only. */
static cbx_status readings(const char *s, size_t n, struct pieces *P, char *err)
{
    if (pthread_mutex_lock(&lock) != 0) return err_setf(err, CBX_ERR_INTERNAL, "Japanese: cannot take the lock");
    cbx_status rc = ready(err);
    if (rc == CBX_OK) rc = configure(err);
    if (rc == CBX_OK) rc = segment(s, n, P, err);
    pthread_mutex_unlock(&lock);
    for (size_t i = 0; i < P->n && rc == CBX_OK; i++)
        if (P->p[i].kanji && !has_kanji(s + P->p[i].b, P->p[i].e - P->p[i].b)) {
            free(P->p[i].reading);
            P->p[i].reading = NULL;
            P->p[i].kanji = false;
        }
    return rc;
}

cbx_status japanese_hiragana(const char *text, size_t len, char **out, char *err)
{
    *out = NULL;
    struct pieces P = {0};
    cbx_status rc = readings(text, len, &P, err);
    size_t cap = 1;
    for (size_t i = 0; i < P.n && rc == CBX_OK; i++)
        cap += P.p[i].kanji ? 1 + strlen(P.p[i].reading) : P.p[i].e - P.p[i].b;
    char *o = rc == CBX_OK ? malloc(cap) : NULL, *p = o;
    if (rc == CBX_OK && !o) rc = err_setf(err, CBX_ERR_NOMEM, "Japanese: out of memory");
    for (size_t i = 0; i < P.n && rc == CBX_OK; i++) {
        const struct piece *x = &P.p[i];
        if (!x->kanji) {
            memcpy(p, text + x->b, x->e - x->b);
            p += x->e - x->b;
            continue;
        }
        /* hira[0] in ["は", "へ"]: one space in front */
        if (!strncmp(x->reading, "\xe3\x81\xaf", 3) || !strncmp(x->reading, "\xe3\x81\xb8", 3)) *p++ = ' ';
        size_t m = strlen(x->reading);
        memcpy(p, x->reading, m);
        p += m;
    }
    if (rc == CBX_OK) {
        *p = 0;
        *out = o;
    } else {
        free(o);
    }
    for (size_t i = 0; i < P.n; i++) free(P.p[i].reading);
    free(P.p);
    return rc;
}
