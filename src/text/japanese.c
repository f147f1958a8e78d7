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
    char *euc = NULL, *r = NULL;
    cbx_status rc = convert(to_euc, s, n, &euc, err);
    if (rc != CBX_OK) return rc;
    r = kakasi_do(euc);
    if (!r) rc = err_setf(err, CBX_ERR_INTERNAL, "Japanese: kakasi_do failed");
    else rc = convert(from_euc, r, strlen(r), out, err);
    if (r) kakasi_free(r);
    free(euc);
    return rc;
}

static cbx_status options(bool wakati, char *err)
{
    static char a0[] = "kakasi", a1[] = "-ieuc", a2[] = "-oeuc", w[] = "-w", jh[] = "-JH";
    char *argv[] = {a0, a1, a2, wakati ? w : jh, NULL};
    if (kakasi_getopt_argv(4, argv) != 0)
        return err_setf(err, CBX_ERR_INTERNAL, "Japanese: kakasi rejected its options (%s)", argv[3]);
    return CBX_OK;
}

/* ---- segments ------------------------------------------------------------ */

/* A piece of the input [b, e): copied, or (kanji) replaced by reading. */
struct piece { size_t b, e; bool kanji; char *reading; };
struct pieces { struct piece *p; size_t n, cap; };

static bool put_piece(struct pieces *P, size_t b, size_t e, bool kanji)
{
    if (b == e) return true;
    if (P->n == P->cap) {
        size_t cap = P->cap ? P->cap * 2 : 32;
        struct piece *p = realloc(P->p, cap * sizeof *p);
        if (!p) return false;
        P->p = p;
        P->cap = cap;
    }
    P->p[P->n++] = (struct piece){b, e, kanji, NULL};
    return true;
}

/* A word [b, e) of the run; a kanji word is cut after each small "っ"
 * that does not end it: pykakasi's segments end there ("渡っ" "た"), and
 * kakasi drops the kanji of "作って" read whole (it reads "作っ" alone). */
static bool has_kanji(const char *s, size_t n);
static bool put_word(struct pieces *P, const char *s, size_t b, size_t e)
{
    bool k = has_kanji(s + b, e - b);
    for (size_t i = b; k && i + 3 < e; i++)
        if (!memcmp(s + i, "\xe3\x81\xa3", 3)) {
            if (!put_piece(P, b, i + 3, true)) return false;
            b = i + 3;
            k = has_kanji(s + b, e - b);
        }
    return put_piece(P, b, e, k);
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

/* Phase 1, under lock with -w: the runs, cut into kakasi's words. */
static cbx_status segment(const char *s, size_t n, struct pieces *P, char *err)
{
    size_t gap = 0, i = 0, k;
    cbx_status rc = CBX_OK;
    while (i < n && rc == CBX_OK) {
        int32_t c = cp_at(s, i, n, &k);
        if (c < 0) return err_setf(err, CBX_ERR_INVALID_ARG, "text is not valid UTF-8 (byte %zu)", i);
        if (!is_kanji(c) || !euc_ok(s + i, k)) { i += k; continue; }
        size_t e = run_end(s, i, n);
        if (!put_piece(P, gap, i, false)) return err_setf(err, CBX_ERR_NOMEM, "Japanese: out of memory");
        char *w = NULL;
        if ((rc = run_kakasi(s + i, e - i, &w, err)) != CBX_OK) return rc;
        /* the words, checked to spell the run; else the run is one word */
        size_t first = P->n, at = i;
        bool same = true;
        for (char *p = w; *p && same;) {
            while (*p == ' ') p++;
            size_t m = strcspn(p, " ");
            if (!m) break;
            same = at + m <= e && !memcmp(s + at, p, m);
            if (same && !put_word(P, s, at, at + m)) {
                free(w);
                return err_setf(err, CBX_ERR_NOMEM, "Japanese: out of memory");
            }
            at += m;
            p += m;
        }
        free(w);
        if (!same || at != e) {
            P->n = first;
            if (!put_piece(P, i, e, true)) return err_setf(err, CBX_ERR_NOMEM, "Japanese: out of memory");
        }
        gap = i = e;
    }
    if (rc == CBX_OK && !put_piece(P, gap, n, false)) rc = err_setf(err, CBX_ERR_NOMEM, "Japanese: out of memory");
    return rc;
}

/* Phases 1 and 2 under the lock. */
static cbx_status readings(const char *s, size_t n, struct pieces *P, char *err)
{
    if (pthread_mutex_lock(&lock) != 0) return err_setf(err, CBX_ERR_INTERNAL, "Japanese: cannot take the lock");
    cbx_status rc = ready(err);
    if (rc == CBX_OK) rc = options(true, err);
    if (rc == CBX_OK) rc = segment(s, n, P, err);
    bool any = false;
    for (size_t i = 0; i < P->n; i++) any |= P->p[i].kanji;
    if (rc == CBX_OK && any) rc = options(false, err);
    for (size_t i = 0; i < P->n && rc == CBX_OK; i++)
        if (P->p[i].kanji) rc = run_kakasi(s + P->p[i].b, P->p[i].e - P->p[i].b, &P->p[i].reading, err);
    pthread_mutex_unlock(&lock);
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
