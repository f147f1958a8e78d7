/* cangjie.c - Cangjie5_TC.json as ChineseCangjieConverter reads it (see
 * cangjie.h). Two open-addressing tables keyed by 64-bit integers: glyph
 * -> code id (the last entry wins) and (glyph, code id) -> the first
 * position of the glyph in that code's list; codes are interned strings
 * with their list lengths. */
#include "cangjie.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/rng.h"
#include "core/u64map.h"
#include "text/utf8.h"

/* ---- uint64 -> int32 ----------------------------------------------------- */

/* ---- interned codes ------------------------------------------------------ */

struct code { char *s; size_t n; int32_t count; /* len(cj2word[code]) */ };

struct cangjie {
    struct code *codes;
    size_t n_codes, cap_codes;
    int32_t *code_slot; /* hash of code strings -> index + 1, 0 empty */
    size_t slot_cap;
    struct u64map glyph;  /* glyph -> code id */
    struct u64map first;  /* glyph << 32 | code id -> first position */
    size_t n_entries;
};

static size_t code_home(const struct cangjie *t, const char *s, size_t n)
{
    return (size_t)rng_fnv1a64(s, n) & (t->slot_cap - 1);
}

static bool code_rehash(struct cangjie *t)
{
    size_t cap = t->slot_cap ? t->slot_cap * 2 : 1024;
    int32_t *slot = calloc(cap, sizeof *slot);
    if (!slot) return false;
    free(t->code_slot);
    t->code_slot = slot;
    t->slot_cap = cap;
    for (size_t c = 0; c < t->n_codes; c++) {
        size_t i = code_home(t, t->codes[c].s, t->codes[c].n);
        while (slot[i]) i = (i + 1) & (cap - 1);
        slot[i] = (int32_t)c + 1;
    }
    return true;
}

/* Id of code s[0..n), added when new; -1 out of memory. */
static int32_t code_intern(struct cangjie *t, const char *s, size_t n)
{
    if ((t->n_codes + 1) * 2 > t->slot_cap && !code_rehash(t)) return -1;
    size_t i = code_home(t, s, n);
    for (; t->code_slot[i]; i = (i + 1) & (t->slot_cap - 1)) {
        const struct code *c = &t->codes[t->code_slot[i] - 1];
        if (c->n == n && !memcmp(c->s, s, n)) return t->code_slot[i] - 1;
    }
    if (t->n_codes == t->cap_codes) {
        size_t cap = t->cap_codes ? t->cap_codes * 2 : 1024;
        struct code *p = realloc(t->codes, cap * sizeof *p);
        if (!p) return -1;
        t->codes = p;
        t->cap_codes = cap;
    }
    char *k = malloc(n + 1);
    if (!k) return -1;
    memcpy(k, s, n);
    k[n] = 0;
    t->codes[t->n_codes] = (struct code){k, n, 0};
    t->code_slot[i] = (int32_t)++t->n_codes;
    return (int32_t)t->n_codes - 1;
}

void cangjie_free(struct cangjie *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->n_codes; i++) free(t->codes[i].s);
    free(t->codes);
    free(t->code_slot);
    u64map_free(&t->glyph);
    u64map_free(&t->first);
    free(t);
}

/* The one code point s[0..n) is, or -1 (none, several, invalid). */
static int32_t single_cp(const char *s, size_t n)
{
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &c);
    return k > 0 && (size_t)k == n ? c : -1;
}

cbx_status cangjie_load_mem(const char *json, size_t len, const char *where, struct cangjie **out, char *err)
{
    *out = NULL;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return err_setf(err, CBX_ERR_FORMAT, "%s: not valid JSON (or out of memory)", where);
    struct cangjie *t = NULL;
    cbx_status rc = CBX_OK;
    if (!cJSON_IsArray(root)) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: not a JSON list (a list of \"glyph\\tcode\" strings)", where);
        goto cleanup;
    }
    if (!(t = calloc(1, sizeof *t))) {
        rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", where);
        goto cleanup;
    }
    for (const cJSON *e = root->child; e; e = e->next, t->n_entries++) {
        if (!cJSON_IsString(e)) {
            rc = err_setf(err, CBX_ERR_FORMAT, "%s: entry %zu is not a string", where, t->n_entries);
            goto cleanup;
        }
        const char *s = e->valuestring, *tab = strchr(s, '\t');
        size_t n = strlen(s);
        if (!tab) {
            char shown[41]; /* the entry on one line: control characters as '?' */
            size_t k = 0;
            for (; s[k] && k < sizeof shown - 1; k++) shown[k] = (unsigned char)s[k] < 0x20 ? '?' : s[k];
            shown[k] = 0;
            rc = err_setf(err, CBX_ERR_FORMAT, "%s: entry %zu (\"%s\") has no tab between glyph and code", where,
                          t->n_entries, shown);
            goto cleanup;
        }
        if (!utf8_valid(s, n)) {
            rc = err_setf(err, CBX_ERR_FORMAT, "%s: entry %zu is not valid UTF-8", where, t->n_entries);
            goto cleanup;
        }
        /* entry.split("\t")[:2] */
        const char *code = tab + 1, *end = strchr(code, '\t');
        size_t code_n = end ? (size_t)(end - code) : strlen(code);
        int32_t id = code_intern(t, code, code_n);
        if (id < 0) {
            rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", where);
            goto cleanup;
        }
        if (t->codes[id].count == INT32_MAX) {
            rc = err_setf(err, CBX_ERR_FORMAT, "%s: too many glyphs for one code", where);
            goto cleanup;
        }
        int32_t pos = t->codes[id].count++;
        int32_t c = single_cp(s, (size_t)(tab - s));
        if (c < 0) continue; /* never looked up, but it holds position pos */
        if (!u64map_put(&t->glyph, (uint64_t)c, id, true) ||
            !u64map_put(&t->first, (uint64_t)c << 32 | (uint32_t)id, pos, false)) {
            rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", where);
            goto cleanup;
        }
    }
    *out = t;
    t = NULL;
cleanup:
    cangjie_free(t);
    cJSON_Delete(root);
    return rc;
}

cbx_status cangjie_load_file(const char *path, struct cangjie **out, char *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return err_setf(err, errno == ENOENT ? CBX_ERR_NOT_FOUND : CBX_ERR_IO, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    cbx_status rc = CBX_OK;
    for (;;) {
        if (n == cap) {
            size_t c2 = cap ? cap * 2 : 1 << 20;
            char *p = realloc(buf, c2);
            if (!p) { rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", path); break; }
            buf = p;
            cap = c2;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) {
            if (ferror(f)) rc = err_setf(err, CBX_ERR_IO, "%s: read failed", path);
            break;
        }
    }
    fclose(f);
    if (rc == CBX_OK) rc = cangjie_load_mem(buf, n, path, out, err);
    free(buf);
    return rc;
}

const char *cangjie_code(const struct cangjie *t, int32_t c, size_t *len, int *index)
{
    int64_t id, first = 0;
    if (c < 0 || !u64map_get(&t->glyph, (uint64_t)c, &id)) return NULL;
    /* always present: the glyph's own entry */
    if (!u64map_get(&t->first, (uint64_t)c << 32 | (uint32_t)id, &first)) first = 0;
    const struct code *k = &t->codes[id];
    *len = k->n;
    *index = (int)first;
    return k->s;
}

size_t cangjie_n_entries(const struct cangjie *t) { return t->n_entries; }
size_t cangjie_n_glyphs(const struct cangjie *t) { return t->glyph.used; }
