/* grapheme_bpe.c - Hugging Face tokenizers BPE with the Whitespace
 * pre-tokenizer (see grapheme_bpe.h). Checked against tokenizers 0.23.3
 * (tests/text/test_grapheme.c, fixtures from tools/dev/grapheme_cases.py).
 * Limits: ids below 2^31 - 1, merges up to 2^31 - 1, added tokens up to
 * 65536; any text length. */
#include "grapheme_bpe.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/rng.h"
#include "core/u64map.h"
#include "text/utf8.h"

#define MAX_ADDED 65536

/* ---- token string -> id ------------------------------------------------ */

struct str_slot { char *s; size_t n; int32_t id; };
struct str_map { struct str_slot *slot; size_t cap, used; };

static size_t str_home(const struct str_map *m, const char *s, size_t n)
{
    return (size_t)rng_fnv1a64(s, n) & (m->cap - 1);
}

static const struct str_slot *str_find(const struct str_map *m, const char *s, size_t n)
{
    if (!m->cap) return NULL;
    for (size_t i = str_home(m, s, n);; i = (i + 1) & (m->cap - 1)) {
        const struct str_slot *e = &m->slot[i];
        if (!e->s) return NULL;
        if (e->n == n && !memcmp(e->s, s, n)) return e;
    }
}

static bool str_grow(struct str_map *m)
{
    struct str_map g = {NULL, m->cap ? m->cap * 2 : 256, m->used};
    if (!(g.slot = calloc(g.cap, sizeof *g.slot))) return false;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slot[i].s) continue;
        size_t j = str_home(&g, m->slot[i].s, m->slot[i].n);
        while (g.slot[j].s) j = (j + 1) & (g.cap - 1);
        g.slot[j] = m->slot[i];
    }
    free(m->slot);
    *m = g;
    return true;
}

/* Insert a copy of s[0..n) -> id. 1 inserted, 0 already present (left
 * as it was), -1 out of memory. */
static int str_put(struct str_map *m, const char *s, size_t n, int32_t id)
{
    if ((m->used + 1) * 2 > m->cap && !str_grow(m)) return -1;
    size_t i = str_home(m, s, n);
    for (; m->slot[i].s; i = (i + 1) & (m->cap - 1))
        if (m->slot[i].n == n && !memcmp(m->slot[i].s, s, n)) return 0;
    char *k = malloc(n + 1);
    if (!k) return -1;
    memcpy(k, s, n);
    k[n] = 0;
    m->slot[i] = (struct str_slot){k, n, id};
    m->used++;
    return 1;
}

static void str_free(struct str_map *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->slot[i].s);
    free(m->slot);
}

/* ---- (left id, right id) -> (rank, merged id) -------------------------- */

static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

/* a merge's value in the map: rank << 32 | merged id */
struct merge { int32_t rank, new_id; };

static bool merge_find(const struct u64map *m, int32_t a, int32_t b, struct merge *out)
{
    int64_t v;
    if (!u64map_get(m, pair_key(a, b), &v)) return false;
    *out = (struct merge){(int32_t)(v >> 32), (int32_t)(uint32_t)v};
    return true;
}

/* A repeated pair takes the later rank, as the library's HashMap collect. */
static bool merge_put(struct u64map *m, int32_t a, int32_t b, int32_t rank, int32_t new_id)
{
    return u64map_put(m, pair_key(a, b), (int64_t)((uint64_t)(uint32_t)rank << 32 | (uint32_t)new_id), true);
}

/* ---- tokenizer ---------------------------------------------------------- */

struct added { char *s; size_t n; int32_t id; };

/* Added tokens of one split pass, sorted by first byte, then longest first;
 * first[b] .. first[b + 1] are those starting with byte b. */
struct added_set { struct added *a; int n; int first[257]; };

struct grapheme_bpe {
    struct str_map vocab;   /* model.vocab */
    struct str_map added;   /* added token content -> id */
    struct u64map merges;
    struct added_set pass[2]; /* 0: "normalized": false, 1: true */
    int32_t unk_id;         /* -1: no unk_token (unknown characters dropped) */
    bool fuse_unk, ignore_merges;
    int64_t n_ids;
};

void grapheme_bpe_free(struct grapheme_bpe *t)
{
    if (!t) return;
    str_free(&t->vocab);
    str_free(&t->added);
    u64map_free(&t->merges);
    for (int p = 0; p < 2; p++) {
        for (int i = 0; i < t->pass[p].n; i++) free(t->pass[p].a[i].s);
        free(t->pass[p].a);
    }
    free(t);
}

int64_t grapheme_bpe_vocab_size(const struct grapheme_bpe *t) { return t->n_ids; }

int32_t grapheme_bpe_token_id(const struct grapheme_bpe *t, const char *s)
{
    const struct str_slot *e = str_find(&t->added, s, strlen(s));
    if (!e) e = str_find(&t->vocab, s, strlen(s));
    return e ? e->id : -1;
}

/* Oniguruma's Unicode \w (what tokenizers' Whitespace regex \w+|[^\w\s]+
 * runs on): Alphabetic | Mark | Decimal_Number | Connector_Punctuation |
 * Join_Control. Alphabetic is the letters, Nl and Other_Alphabetic; the
 * Other_Alphabetic characters outside the mark categories are the circled
 * and squared Latin letters below (category So). */
bool grapheme_bpe_is_word_char(int32_t c)
{
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        break;
    }
    return c == 0x200c || c == 0x200d || (c >= 0x24b6 && c <= 0x24e9) ||
           (c >= 0x1f130 && c <= 0x1f149) || (c >= 0x1f150 && c <= 0x1f169) ||
           (c >= 0x1f170 && c <= 0x1f189);
}

/* White_Space (Oniguruma's \s). */
bool grapheme_bpe_is_space_char(int32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

/* ---- loading ------------------------------------------------------------ */

static bool is_null(const cJSON *j) { return !j || cJSON_IsNull(j); }


/* j is a non-negative integer below 2^31 - 1. */
static bool json_id(const cJSON *j, int32_t *out)
{
    if (!cJSON_IsNumber(j) || !(j->valuedouble >= 0 && j->valuedouble < 2147483647.0) ||
        j->valuedouble != (double)(int32_t)j->valuedouble)
        return false;
    *out = (int32_t)j->valuedouble;
    return true;
}

/* Field `name` of obj must be absent or null. */
static cbx_status want_null(const cJSON *obj, const char *name, const char *prefix,
                            const char *where, char *err)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (is_null(j)) return CBX_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    return err_setf(err, CBX_ERR_UNSUPPORTED, "%s: %s%s is set%s%s%s; only null is supported",
                    where, prefix, name, cJSON_IsString(type) ? " (type \"" : "",
                    cJSON_IsString(type) ? type->valuestring : "", cJSON_IsString(type) ? "\")" : "");
}

/* Boolean field of obj: absent -> dflt; a non-boolean is an error. */
static cbx_status get_bool(const cJSON *obj, const char *name, bool dflt, bool *out,
                           const char *what, const char *where, char *err)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, name);
    *out = dflt;
    if (is_null(j)) return CBX_OK;
    if (!cJSON_IsBool(j)) return err_setf(err, CBX_ERR_FORMAT, "%s: %s%s is not a boolean", where, what, name);
    *out = cJSON_IsTrue(j);
    return CBX_OK;
}

static cbx_status load_model(struct grapheme_bpe *t, const cJSON *model, const char *where, char *err)
{
    cbx_status rc;
    if (!cJSON_IsObject(model)) return err_setf(err, CBX_ERR_FORMAT, "%s: model is missing or not an object", where);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE"))
        return err_setf(err, CBX_ERR_UNSUPPORTED, "%s: model.type is \"%.40s\"; only \"BPE\" is supported",
                        where, cJSON_IsString(type) ? type->valuestring : "(missing)");
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (!is_null(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0))
        return err_setf(err, CBX_ERR_UNSUPPORTED, "%s: model.dropout is set; only null is supported", where);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
        if (!is_null(j) && !(cJSON_IsString(j) && !*j->valuestring))
            return err_setf(err, CBX_ERR_UNSUPPORTED, "%s: model.%s is set; only null is supported", where,
                            affixes[i]);
    }
    bool byte_fallback;
    if ((rc = get_bool(model, "byte_fallback", false, &byte_fallback, "model.", where, err)) != CBX_OK ||
        (rc = get_bool(model, "fuse_unk", false, &t->fuse_unk, "model.", where, err)) != CBX_OK ||
        (rc = get_bool(model, "ignore_merges", false, &t->ignore_merges, "model.", where, err)) != CBX_OK)
        return rc;
    if (byte_fallback)
        return err_setf(err, CBX_ERR_UNSUPPORTED, "%s: model.byte_fallback is true; only false is supported", where);

    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) return err_setf(err, CBX_ERR_FORMAT, "%s: model.vocab is missing or not an object", where);
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id;
        if (!e->string || !json_id(e, &id))
            return err_setf(err, CBX_ERR_FORMAT, "%s: model.vocab[\"%.40s\"] is not an id (integer 0..2^31-2)",
                            where, e->string ? e->string : "");
        /* tokens are valid UTF-8 (the library's strings are), so an added
         * token can only match the text at character boundaries */
        if (!utf8_valid(e->string, strlen(e->string)))
            return err_setf(err, CBX_ERR_FORMAT, "%s: model.vocab has a token that is not valid UTF-8", where);
        int r = str_put(&t->vocab, e->string, strlen(e->string), id);
        if (r < 0) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", where);
        if (r == 0) return err_setf(err, CBX_ERR_FORMAT, "%s: model.vocab has \"%.40s\" twice", where, e->string);
        if (id + 1 > t->n_ids) t->n_ids = id + 1;
    }

    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    t->unk_id = -1;
    if (!is_null(unk)) {
        const struct str_slot *u = cJSON_IsString(unk) ? str_find(&t->vocab, unk->valuestring, strlen(unk->valuestring)) : NULL;
        if (!u)
            return err_setf(err, CBX_ERR_FORMAT, "%s: model.unk_token \"%.40s\" is not in model.vocab", where,
                            cJSON_IsString(unk) ? unk->valuestring : "(not a string)");
        t->unk_id = u->id;
    }

    /* merges: "a b" (exactly one space) or ["a", "b"]; a, b and a + b in
     * the vocabulary (tokenizers' MergeTokenOutOfVocabulary otherwise) */
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges)) return err_setf(err, CBX_ERR_FORMAT, "%s: model.merges is missing or not an array", where);
    int32_t rank = 0;
    char *cat = NULL;
    size_t cat_cap = 0;
    rc = CBX_OK;
    for (const cJSON *m = merges->child; m && rc == CBX_OK; m = m->next, rank++) {
        const char *a = NULL, *b = NULL;
        size_t an = 0, bn = 0;
        if (rank == INT32_MAX) { rc = err_setf(err, CBX_ERR_FORMAT, "%s: too many merges", where); break; }
        if (cJSON_IsString(m)) {
            a = m->valuestring;
            const char *sp = strchr(a, ' ');
            if (sp && !strchr(sp + 1, ' ')) { an = (size_t)(sp - a); b = sp + 1; bn = strlen(b); }
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            a = m->child->valuestring;
            an = strlen(a);
            b = m->child->next->valuestring;
            bn = strlen(b);
        }
        if (!b) {
            rc = err_setf(err, CBX_ERR_FORMAT, "%s: model.merges[%d] is not \"a b\" nor [\"a\", \"b\"]", where, (int)rank);
            break;
        }
        if (an + bn + 1 > cat_cap) {
            size_t c = (an + bn + 1) * 2;
            char *p = realloc(cat, c);
            if (!p) { rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", where); break; }
            cat = p;
            cat_cap = c;
        }
        memcpy(cat, a, an);
        memcpy(cat + an, b, bn);
        const struct str_slot *sa = str_find(&t->vocab, a, an), *sb = str_find(&t->vocab, b, bn);
        const struct str_slot *sc = str_find(&t->vocab, cat, an + bn);
        if (!sa || !sb || !sc) {
            const char *miss = !sa ? a : !sb ? b : cat;
            int mn = (int)(!sa ? an : !sb ? bn : an + bn);
            rc = err_setf(err, CBX_ERR_FORMAT, "%s: model.merges[%d]: \"%.*s\" is not in model.vocab", where,
                          (int)rank, mn > 40 ? 40 : mn, miss);
        } else if (!merge_put(&t->merges, sa->id, sb->id, rank, sc->id)) {
            rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", where);
        }
    }
    free(cat);
    return rc;
}

static int cmp_added(const void *x, const void *y)
{
    const struct added *a = x, *b = y;
    unsigned char ca = (unsigned char)a->s[0], cb = (unsigned char)b->s[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (a->n != b->n) return a->n > b->n ? -1 : 1;
    return 0;
}

/* added_tokens, given the ids the library assigns on load: a content
 * already added or in the vocabulary keeps that id, any other gets the next
 * free one (AddedVocabulary::add_tokens); the file's id must agree. */
static cbx_status load_added(struct grapheme_bpe *t, const cJSON *list, const char *where, char *err)
{
    if (is_null(list)) return CBX_OK;
    if (!cJSON_IsArray(list)) return err_setf(err, CBX_ERR_FORMAT, "%s: added_tokens is not an array", where);
    int64_t max_added = -1;
    int i = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        int32_t id;
        if (!cJSON_IsObject(e) || !cJSON_IsString(content) || !*content->valuestring ||
            !utf8_valid(content->valuestring, strlen(content->valuestring)) ||
            !json_id(cJSON_GetObjectItemCaseSensitive(e, "id"), &id))
            return err_setf(err, CBX_ERR_FORMAT, "%s: added_tokens[%d] needs an id and a non-empty UTF-8 content",
                            where, i);
        static const char *const unsupported[] = {"single_word", "lstrip", "rstrip"};
        bool flag, special, normalized;
        cbx_status rc;
        for (int k = 0; k < 3; k++) {
            if ((rc = get_bool(e, unsupported[k], false, &flag, "added_tokens[].", where, err)) != CBX_OK) return rc;
            if (flag)
                return err_setf(err, CBX_ERR_UNSUPPORTED, "%s: added_tokens[%d].%s is true (\"%.40s\"); only false is supported",
                                where, i, unsupported[k], content->valuestring);
        }
        if ((rc = get_bool(e, "special", false, &special, "added_tokens[].", where, err)) != CBX_OK ||
            (rc = get_bool(e, "normalized", !special, &normalized, "added_tokens[].", where, err)) != CBX_OK)
            return rc;
        const char *s = content->valuestring;
        size_t n = strlen(s);
        if (str_find(&t->added, s, n)) continue; /* the library keeps the first */
        const struct str_slot *v = str_find(&t->vocab, s, n);
        int64_t lib_id = v ? v->id
                         : max_added < 0 ? (int64_t)t->vocab.used
                         : max_added >= (int64_t)t->vocab.used || t->vocab.used == 0 ? max_added + 1
                         : (int64_t)t->vocab.used;
        if (lib_id != id)
            return err_setf(err, CBX_ERR_FORMAT,
                            "%s: added_tokens[%d] \"%.40s\" has id %d, but the tokenizers library gives it id %lld",
                            where, i, s, (int)id, (long long)lib_id);
        struct added_set *ps = &t->pass[normalized ? 1 : 0];
        if (t->pass[0].n + t->pass[1].n >= MAX_ADDED)
            return err_setf(err, CBX_ERR_FORMAT, "%s: more than %d added tokens", where, MAX_ADDED);
        struct added *a = realloc(ps->a, (size_t)(ps->n + 1) * sizeof *a);
        if (!a) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", where);
        ps->a = a;
        if (!(a[ps->n].s = malloc(n + 1))) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", where);
        memcpy(a[ps->n].s, s, n + 1);
        a[ps->n].n = n;
        a[ps->n].id = id;
        ps->n++;
        if (str_put(&t->added, s, n, id) < 0) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", where);
        if (id > max_added) max_added = id;
        if (id + 1 > t->n_ids) t->n_ids = id + 1;
    }
    for (int p = 0; p < 2; p++) {
        struct added_set *ps = &t->pass[p];
        if (ps->n) qsort(ps->a, (size_t)ps->n, sizeof *ps->a, cmp_added);
        int k = 0;
        for (int b = 0; b <= 256; b++) {
            while (k < ps->n && (unsigned char)ps->a[k].s[0] < b) k++;
            ps->first[b] = k;
        }
    }
    return CBX_OK;
}

cbx_status grapheme_bpe_load_mem(const char *json, size_t len, const char *where,
                                 struct grapheme_bpe **out, char *err)
{
    *out = NULL;
    if (!where) where = "tokenizer.json";
    cbx_status rc = CBX_OK;
    struct grapheme_bpe *t = calloc(1, sizeof *t);
    cJSON *root = NULL;
    if (!t) { rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", where); goto cleanup; }
    root = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsObject(root)) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: not a JSON object (invalid JSON or out of memory)", where);
        goto cleanup;
    }
    static const char *const null_fields[] = {"normalizer", "post_processor", "truncation", "padding"};
    for (int i = 0; i < 4; i++)
        if ((rc = want_null(root, null_fields[i], "", where, err)) != CBX_OK) goto cleanup;
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *pre_type = cJSON_GetObjectItemCaseSensitive(pre, "type");
    if (!cJSON_IsString(pre_type) || strcmp(pre_type->valuestring, "Whitespace")) {
        rc = err_setf(err, CBX_ERR_UNSUPPORTED, "%s: pre_tokenizer is %s%.40s%s; only {\"type\": \"Whitespace\"} is supported",
                      where, cJSON_IsString(pre_type) ? "\"" : "",
                      cJSON_IsString(pre_type) ? pre_type->valuestring : is_null(pre) ? "null" : "not a typed object",
                      cJSON_IsString(pre_type) ? "\"" : "");
        goto cleanup;
    }
    if ((rc = load_model(t, cJSON_GetObjectItemCaseSensitive(root, "model"), where, err)) != CBX_OK) goto cleanup;
    if ((rc = load_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), where, err)) != CBX_OK)
        goto cleanup;
    if (t->n_ids == 0) rc = err_setf(err, CBX_ERR_FORMAT, "%s: empty vocabulary", where);
cleanup:
    cJSON_Delete(root);
    if (rc == CBX_OK) *out = t;
    else grapheme_bpe_free(t);
    /* messages quote tokens from the file: keep them on one line */
    for (char *c = rc != CBX_OK ? err : NULL; c && *c; c++)
        if ((unsigned char)*c < 0x20) *c = '?';
    return rc;
}

cbx_status grapheme_bpe_load_file(const char *path, struct grapheme_bpe **out, char *err)
{
    *out = NULL;
    cbx_status rc = CBX_OK;
    char *buf = NULL;
    long n = -1;
    FILE *f = fopen(path, "rb");
    if (!f) return err_setf(err, errno == ENOENT ? CBX_ERR_NOT_FOUND : CBX_ERR_IO, "%s: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) rc = err_setf(err, CBX_ERR_IO, "%s: cannot determine its size", path);
    else if (!(buf = malloc((size_t)n + 1))) rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory for %ld bytes", path, n);
    else if (fread(buf, 1, (size_t)n, f) != (size_t)n) rc = err_setf(err, CBX_ERR_IO, "%s: read failed", path);
    fclose(f);
    if (rc == CBX_OK) rc = grapheme_bpe_load_mem(buf, (size_t)n, path, out, err);
    free(buf);
    return rc;
}

/* ---- encoding ----------------------------------------------------------- */

/* A BPE symbol (tokenizers' word.rs Symbol): len 0 marks one merged away. */
struct sym { int32_t id, prev, next; uint32_t len; };
/* A queued merge; the queue pops the lowest rank, then the lowest pos. */
struct qmerge { int32_t rank, pos, new_id; };

struct enc {
    const struct grapheme_bpe *t;
    int32_t *ids;
    int64_t n, cap;
    struct sym *sym;   /* scratch sized for the longest word */
    struct qmerge *heap;
    bool oom;
};

static void push_id(struct enc *e, int32_t id)
{
    if (e->oom) return;
    if (e->n == e->cap) {
        int64_t cap = e->cap ? e->cap * 2 : 64;
        int32_t *p = realloc(e->ids, (size_t)cap * sizeof *p);
        if (!p) { e->oom = true; return; }
        e->ids = p;
        e->cap = cap;
    }
    e->ids[e->n++] = id;
}

static bool q_less(const struct qmerge *a, const struct qmerge *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void q_push(struct qmerge *h, int *n, struct qmerge m)
{
    int i = (*n)++;
    while (i > 0 && q_less(&m, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = m;
}

static struct qmerge q_pop(struct qmerge *h, int *n)
{
    struct qmerge top = h[0], last = h[--*n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && q_less(&h[c + 1], &h[c])) c++;
        if (!q_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

static void q_pair(const struct grapheme_bpe *t, struct qmerge *h, int *nh, const struct sym *s, int32_t pos)
{
    struct merge m;
    if (merge_find(&t->merges, s[pos].id, s[s[pos].next].id, &m)) q_push(h, nh, (struct qmerge){m.rank, pos, m.new_id});
}

/* BPE of one pre-tokenised word w[0..n) (BPE::tokenize: merge_word, then
 * Word::merge_all). */
static void bpe_word(struct enc *e, const char *w, size_t n)
{
    const struct grapheme_bpe *t = e->t;
    if (t->ignore_merges) {
        const struct str_slot *v = str_find(&t->vocab, w, n);
        if (v) { push_id(e, v->id); return; }
    }
    struct sym *s = e->sym;
    int32_t ns = 0;
    int32_t unk_len = 0; /* pending [UNK] symbol's bytes, 0 when none */
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t c;
        size_t k = (size_t)utf8proc_iterate((const utf8proc_uint8_t *)w + i, (utf8proc_ssize_t)(n - i), &c);
        const struct str_slot *v = str_find(&t->vocab, w + i, k);
        if (v) {
            if (unk_len) s[ns++] = (struct sym){t->unk_id, 0, 0, (uint32_t)unk_len};
            unk_len = 0;
            s[ns++] = (struct sym){v->id, 0, 0, (uint32_t)k};
        } else if (t->unk_id >= 0) {
            if (unk_len && !t->fuse_unk) {
                s[ns++] = (struct sym){t->unk_id, 0, 0, (uint32_t)unk_len};
                unk_len = 0;
            }
            unk_len += (int32_t)k;
        }
        i += k;
    }
    if (unk_len) s[ns++] = (struct sym){t->unk_id, 0, 0, (uint32_t)unk_len};
    for (int32_t i = 0; i < ns; i++) {
        s[i].prev = i - 1;
        s[i].next = i + 1 < ns ? i + 1 : -1;
    }
    int nh = 0;
    for (int32_t i = 0; i + 1 < ns; i++) q_pair(t, e->heap, &nh, s, i);
    while (nh > 0) {
        struct qmerge top = q_pop(e->heap, &nh);
        struct sym *cur = &s[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        int32_t right = cur->next;
        /* an entry whose pair changed since it was queued is stale (the
         * library compares only the merged id) */
        struct merge m;
        if (!merge_find(&t->merges, cur->id, s[right].id, &m) || m.new_id != top.new_id) continue;
        cur->id = top.new_id;
        cur->len += s[right].len;
        cur->next = s[right].next;
        s[right].len = 0;
        if (cur->next >= 0) s[cur->next].prev = top.pos;
        if (cur->prev >= 0) q_pair(t, e->heap, &nh, s, cur->prev);
        if (cur->next >= 0) q_pair(t, e->heap, &nh, s, top.pos);
    }
    for (int32_t i = 0; i < ns; i++)
        if (s[i].len) push_id(e, s[i].id);
}

/* Whitespace pre-tokenizer: maximal runs of \w or of [^\w\s]. */
static void pre_tokenize(struct enc *e, const char *p, size_t n)
{
    size_t i = 0, start = 0;
    int cls = -1; /* of the current run: 1 word, 0 other; -1 none */
    while (i < n) {
        utf8proc_int32_t c;
        size_t k = (size_t)utf8proc_iterate((const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)(n - i), &c);
        int ci = grapheme_bpe_is_space_char(c) ? -1 : grapheme_bpe_is_word_char(c) ? 1 : 0;
        if (ci != cls) {
            if (cls >= 0) bpe_word(e, p + start, i - start);
            start = i;
            cls = ci;
        }
        i += k;
    }
    if (cls >= 0) bpe_word(e, p + start, n - start);
}

/* Split p[0..n) on the added tokens of pass `pass` (leftmost-longest);
 * the pieces between go to the next pass, after the last to the
 * pre-tokenizer. */
static void split_added(struct enc *e, const char *p, size_t n, int pass)
{
    if (pass == 2) { pre_tokenize(e, p, n); return; }
    const struct added_set *as = &e->t->pass[pass];
    size_t start = 0;
    for (size_t i = 0; i < n && as->n;) {
        const unsigned char b = (unsigned char)p[i];
        const struct added *hit = NULL;
        for (int k = as->first[b]; k < as->first[b + 1] && !hit; k++)
            if (as->a[k].n <= n - i && !memcmp(p + i, as->a[k].s, as->a[k].n)) hit = &as->a[k];
        if (!hit) { i++; continue; }
        if (i > start) split_added(e, p + start, i - start, pass + 1);
        push_id(e, hit->id);
        i += hit->n;
        start = i;
    }
    if (n > start) split_added(e, p + start, n - start, pass + 1);
}

cbx_status grapheme_bpe_encode(const struct grapheme_bpe *t, const char *text, int32_t **ids,
                               int64_t *n_ids, char *err)
{
    *ids = NULL;
    *n_ids = 0;
    size_t n = strlen(text);
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(n - i), &c);
        if (k <= 0) return err_setf(err, CBX_ERR_INVALID_ARG, "text is not valid UTF-8 (byte %zu)", i);
        i += (size_t)k;
    }
    if (n == 0) return CBX_OK;
    if (n > (size_t)INT32_MAX / 4)
        return err_setf(err, CBX_ERR_INVALID_ARG, "text of %zu bytes is too long to tokenise", n);
    /* a word has at most n symbols; the queue holds its first pairs plus
     * two per merge */
    struct enc e = {.t = t};
    e.sym = malloc(n * sizeof *e.sym);
    e.heap = malloc(3 * n * sizeof *e.heap);
    if (!e.sym || !e.heap) e.oom = true;
    else split_added(&e, text, n, 0);
    free(e.sym);
    free(e.heap);
    if (e.oom) {
        free(e.ids);
        return err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory for %zu bytes of text", n);
    }
    *ids = e.ids;
    *n_ids = e.n;
    return CBX_OK;
}
