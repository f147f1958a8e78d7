/* gpt2_bpe.c - GPT-2 byte-level BPE (see gpt2_bpe.h).
 * Limits: vocabulary and merges up to 2^31 entries, added tokens up to 1024,
 * tokens at most 1 KiB. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "gpt2_bpe.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/rng.h"

/* ---- string -> int map (open addressing) ------------------------------ */

struct smap {
    char **keys;
    int32_t *vals;
    size_t cap, n;
};

static uint64_t hash_bytes(const char *s, size_t n) { return rng_fnv1a64(s, n); }

static int smap_find(const struct smap *m, const char *s, size_t n, int32_t *val)
{
    if (!m->cap) return 0;
    size_t i = (size_t)hash_bytes(s, n) & (m->cap - 1);
    for (; m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (strncmp(m->keys[i], s, n) == 0 && m->keys[i][n] == 0) {
            if (val) *val = m->vals[i];
            return 1;
        }
    return 0;
}

static bool smap_grow(struct smap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    char **keys = calloc(cap, sizeof *keys);
    int32_t *vals = calloc(cap, sizeof *vals);
    if (!keys || !vals) { free(keys); free(vals); return false; }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = (size_t)hash_bytes(m->keys[i], strlen(m->keys[i])) & (cap - 1);
        while (keys[j]) j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return true;
}

/* Insert a copy of s[0..n); an existing key keeps its first value. */
static bool smap_put(struct smap *m, const char *s, size_t n, int32_t val)
{
    if ((m->n + 1) * 2 > m->cap && !smap_grow(m)) return false;
    size_t i = (size_t)hash_bytes(s, n) & (m->cap - 1);
    for (; m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (strncmp(m->keys[i], s, n) == 0 && m->keys[i][n] == 0) return true;
    char *k = malloc(n + 1);
    if (!k) return false;
    memcpy(k, s, n);
    k[n] = 0;
    m->keys[i] = k;
    m->vals[i] = val;
    m->n++;
    return true;
}

static void smap_free(struct smap *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->vals);
}

/* ---- tokenizer --------------------------------------------------------- */

struct added { char *s; size_t n; int32_t id; };

struct gpt2_bpe {
    struct smap vocab;  /* token string (byte-mapped) -> id */
    struct smap ranks;  /* "left right" -> merge rank */
    struct added *added;
    int n_added;
    int64_t n_ids, max_length;
    pcre2_code *re;
    char byte_map[256][3]; /* byte -> UTF-8 of its printable code point */
};

/* GPT-2 bytes_to_unicode: printable bytes map to themselves, the other 68
 * to 256, 257, ... in increasing byte order. */
static void build_byte_map(struct gpt2_bpe *t)
{
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int cp = ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
                     ? b : next++;
        utf8proc_uint8_t u[4] = {0};
        utf8proc_ssize_t k = utf8proc_encode_char(cp, u);
        memset(t->byte_map[b], 0, 3);
        memcpy(t->byte_map[b], u, (size_t)k);
    }
}

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void gpt2_bpe_free(struct gpt2_bpe *t)
{
    if (!t) return;
    smap_free(&t->vocab);
    smap_free(&t->ranks);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].s);
    free(t->added);
    pcre2_code_free(t->re);
    free(t);
}

static cbx_status add_added(struct gpt2_bpe *t, const char *s, int32_t id, char *err)
{
    for (int i = 0; i < t->n_added; i++)
        if (!strcmp(t->added[i].s, s)) { t->added[i].id = id; return CBX_OK; }
    if (t->n_added >= 1024 || !*s)
        return err_setf(err, CBX_ERR_FORMAT, "tokenizer: too many or empty added tokens");
    struct added *a = realloc(t->added, (size_t)(t->n_added + 1) * sizeof *a);
    if (!a) return err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory");
    t->added = a;
    a[t->n_added].s = strdup(s);
    if (!a[t->n_added].s) return err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory");
    a[t->n_added].n = strlen(s);
    a[t->n_added].id = id;
    t->n_added++;
    if (id + 1 > t->n_ids) t->n_ids = id + 1;
    return CBX_OK;
}

static cbx_status load_vocab_obj(struct gpt2_bpe *t, const cJSON *v, char *err)
{
    if (!cJSON_IsObject(v)) return err_setf(err, CBX_ERR_FORMAT, "tokenizer: vocab is not a JSON object");
    for (const cJSON *e = v->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 2147483647.0 ||
            !e->string || strlen(e->string) > 1024)
            return err_setf(err, CBX_ERR_FORMAT, "tokenizer: bad vocab entry \"%.40s\"",
                            e->string ? e->string : "");
        int32_t id = (int32_t)e->valuedouble;
        if (!smap_put(&t->vocab, e->string, strlen(e->string), id))
            return err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory");
        if (id + 1 > t->n_ids) t->n_ids = id + 1;
    }
    return CBX_OK;
}

static cbx_status add_merge(struct gpt2_bpe *t, const char *a, size_t an, const char *b,
                            size_t bn, int32_t rank, char *err)
{
    char key[2100];
    if (an + bn + 2 > sizeof key || an == 0 || bn == 0)
        return err_setf(err, CBX_ERR_FORMAT, "tokenizer: bad merge rule %d", (int)rank);
    memcpy(key, a, an);
    key[an] = ' ';
    memcpy(key + an + 1, b, bn);
    if (!smap_put(&t->ranks, key, an + bn + 1, rank))
        return err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory");
    return CBX_OK;
}

static cbx_status load_merges_txt(struct gpt2_bpe *t, const char *txt, char *err)
{
    int32_t rank = 0;
    const char *p = txt;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n && p[n - 1] == '\r') n--;
        if (n && !(p == txt && n >= 8 && !strncmp(p, "#version", 8))) {
            const char *sp = memchr(p, ' ', n);
            if (!sp) return err_setf(err, CBX_ERR_FORMAT, "merges.txt: line %d has no space", (int)rank + 1);
            cbx_status rc = add_merge(t, p, (size_t)(sp - p), sp + 1, n - (size_t)(sp - p) - 1, rank, err);
            if (rc != CBX_OK) return rc;
            rank++;
        }
        p += e ? (size_t)(e - p) + 1 : n;
        if (!e) break;
    }
    return CBX_OK;
}

static cbx_status finish(struct gpt2_bpe *t, char *err)
{
    int ec;
    PCRE2_SIZE eo;
    t->re = pcre2_compile((PCRE2_SPTR)GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &ec, &eo, NULL);
    if (!t->re) return err_setf(err, CBX_ERR_INTERNAL, "tokenizer: pattern compile error %d", ec);
    if (t->vocab.n == 0) return err_setf(err, CBX_ERR_FORMAT, "tokenizer: empty vocabulary");
    build_byte_map(t);
    /* leftmost-longest matching wants longer tokens tried first */
    for (int i = 1; i < t->n_added; i++)
        for (int j = i; j > 0 && t->added[j].n > t->added[j - 1].n; j--) {
            struct added tmp = t->added[j];
            t->added[j] = t->added[j - 1];
            t->added[j - 1] = tmp;
        }
    return CBX_OK;
}

static cbx_status load_added_json(struct gpt2_bpe *t, const char *added_json,
                                  const char *config_json, char *err)
{
    cbx_status rc = CBX_OK;
    if (config_json) {
        cJSON *c = cJSON_Parse(config_json);
        if (!c) return err_setf(err, CBX_ERR_FORMAT, "tokenizer_config.json: invalid JSON");
        const cJSON *ml = cJSON_GetObjectItemCaseSensitive(c, "model_max_length");
        if (cJSON_IsNumber(ml) && ml->valuedouble > 0 && ml->valuedouble < 1e15)
            t->max_length = (int64_t)ml->valuedouble;
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(c, "added_tokens_decoder");
        for (const cJSON *e = cJSON_IsObject(d) ? d->child : NULL; e && rc == CBX_OK; e = e->next) {
            const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
            char *end;
            long id = strtol(e->string, &end, 10);
            if (!cJSON_IsString(content) || *end || id < 0 || id > 2147483647L)
                rc = err_setf(err, CBX_ERR_FORMAT, "tokenizer_config.json: bad added token \"%.40s\"", e->string);
            else
                rc = add_added(t, content->valuestring, (int32_t)id, err);
        }
        cJSON_Delete(c);
        if (rc != CBX_OK) return rc;
    }
    if (added_json) {
        cJSON *a = cJSON_Parse(added_json);
        if (!cJSON_IsObject(a)) {
            cJSON_Delete(a);
            return err_setf(err, CBX_ERR_FORMAT, "added_tokens.json: not a JSON object");
        }
        for (const cJSON *e = a->child; e && rc == CBX_OK; e = e->next) {
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 2147483647.0)
                rc = err_setf(err, CBX_ERR_FORMAT, "added_tokens.json: bad id for \"%.40s\"", e->string);
            else
                rc = add_added(t, e->string, (int32_t)e->valuedouble, err);
        }
        cJSON_Delete(a);
    }
    return rc;
}

cbx_status gpt2_bpe_load_mem(const char *vocab_json, const char *merges_txt,
                             const char *added_tokens_json, const char *tokenizer_config_json,
                             struct gpt2_bpe **out, char *err)
{
    *out = NULL;
    struct gpt2_bpe *t = calloc(1, sizeof *t);
    if (!t) return err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory");
    cbx_status rc;
    cJSON *v = cJSON_Parse(vocab_json);
    if (!v) { rc = err_setf(err, CBX_ERR_FORMAT, "vocab.json: invalid JSON"); goto fail; }
    rc = load_vocab_obj(t, v, err);
    cJSON_Delete(v);
    if (rc != CBX_OK) goto fail;
    if ((rc = load_merges_txt(t, merges_txt, err)) != CBX_OK) goto fail;
    if ((rc = load_added_json(t, added_tokens_json, tokenizer_config_json, err)) != CBX_OK) goto fail;
    if ((rc = finish(t, err)) != CBX_OK) goto fail;
    *out = t;
    return CBX_OK;
fail:
    gpt2_bpe_free(t);
    return rc;
}

/* tokenizer.json (HF tokenizers): model.vocab, model.merges ("a b" or
 * ["a", "b"]), added_tokens[{id, content}]. */
static cbx_status load_tokenizer_json(const char *json, struct gpt2_bpe **out, char *err)
{
    *out = NULL;
    struct gpt2_bpe *t = calloc(1, sizeof *t);
    cJSON *root = cJSON_Parse(json);
    cbx_status rc = CBX_OK;
    if (!t) { rc = err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
    if (!root) { rc = err_setf(err, CBX_ERR_FORMAT, "tokenizer.json: invalid JSON"); goto done; }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE")) {
        rc = err_setf(err, CBX_ERR_FORMAT, "tokenizer.json: model.type is not \"BPE\"");
        goto done;
    }
    if ((rc = load_vocab_obj(t, cJSON_GetObjectItemCaseSensitive(model, "vocab"), err)) != CBX_OK) goto done;
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    int32_t rank = 0;
    for (const cJSON *m = cJSON_IsArray(merges) ? merges->child : NULL; m && rc == CBX_OK; m = m->next, rank++) {
        if (cJSON_IsString(m)) {
            const char *s = m->valuestring, *sp = strchr(s, ' ');
            if (!sp) rc = err_setf(err, CBX_ERR_FORMAT, "tokenizer.json: merge %d has no space", (int)rank);
            else rc = add_merge(t, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), rank, err);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
            rc = add_merge(t, m->child->valuestring, strlen(m->child->valuestring),
                           m->child->next->valuestring, strlen(m->child->next->valuestring), rank, err);
        } else {
            rc = err_setf(err, CBX_ERR_FORMAT, "tokenizer.json: bad merge %d", (int)rank);
        }
    }
    if (rc != CBX_OK) goto done;
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    for (const cJSON *a = cJSON_IsArray(added) ? added->child : NULL; a && rc == CBX_OK; a = a->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content) || id->valuedouble < 0 ||
            id->valuedouble > 2147483647.0)
            rc = err_setf(err, CBX_ERR_FORMAT, "tokenizer.json: bad added token");
        else
            rc = add_added(t, content->valuestring, (int32_t)id->valuedouble, err);
    }
    if (rc == CBX_OK) rc = finish(t, err);
done:
    cJSON_Delete(root);
    if (rc == CBX_OK) *out = t;
    else gpt2_bpe_free(t);
    return rc;
}

static char *slurp(const char *dir, const char *name, bool required, cbx_status *rc, char *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (required) *rc = err_setf(err, CBX_ERR_IO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    long n;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n < (1L << 30) && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) buf[n] = 0;
        else { free(buf); buf = NULL; }
    }
    fclose(f);
    if (!buf) *rc = err_setf(err, CBX_ERR_IO, "%s: read failed", path);
    return buf;
}

cbx_status gpt2_bpe_load_dir(const char *dir, struct gpt2_bpe **out, char *err)
{
    cbx_status rc = CBX_OK;
    *out = NULL;
    char *tj = slurp(dir, "tokenizer.json", false, &rc, err);
    if (rc != CBX_OK) return rc;
    if (tj) {
        rc = load_tokenizer_json(tj, out, err);
        free(tj);
        return rc;
    }
    char *vocab = slurp(dir, "vocab.json", true, &rc, err);
    char *merges = vocab ? slurp(dir, "merges.txt", true, &rc, err) : NULL;
    char *added = merges ? slurp(dir, "added_tokens.json", false, &rc, err) : NULL;
    char *config = merges && rc == CBX_OK ? slurp(dir, "tokenizer_config.json", false, &rc, err) : NULL;
    if (rc == CBX_OK) rc = gpt2_bpe_load_mem(vocab, merges, added, config, out, err);
    free(vocab);
    free(merges);
    free(added);
    free(config);
    return rc;
}

int64_t gpt2_bpe_vocab_size(const struct gpt2_bpe *t) { return t->n_ids; }
int64_t gpt2_bpe_max_length(const struct gpt2_bpe *t) { return t->max_length; }

/* ---- encoding ---------------------------------------------------------- */

struct ids { int32_t *v; int64_t n, cap; bool oom; };

static void ids_push(struct ids *o, int32_t id)
{
    if (o->oom) return;
    if (o->n == o->cap) {
        int64_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *v = realloc(o->v, (size_t)cap * sizeof *v);
        if (!v) { o->oom = true; return; }
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
}

static int32_t pair_rank(const struct gpt2_bpe *t, const char *m, const size_t *st,
                         const size_t *en, size_t i, char *key)
{
    size_t a = en[i] - st[i], b = en[i + 1] - st[i + 1];
    int32_t r;
    memcpy(key, m + st[i], a);
    key[a] = ' ';
    memcpy(key + a + 1, m + st[i + 1], b);
    return smap_find(&t->ranks, key, a + b + 1, &r) ? r : -1;
}

/* BPE of one pre-tokenised piece: map bytes, then repeatedly merge the
 * adjacent pair of lowest rank (leftmost on ties) until none is ranked. */
static cbx_status bpe_piece(const struct gpt2_bpe *t, const char *s, size_t n, struct ids *o, char *err)
{
    /* symbols as [start, end) into the mapped string */
    size_t cap = n * 2 + 1;
    char *m = malloc(cap);
    size_t *st = malloc((n + 1) * sizeof *st), *en = malloc((n + 1) * sizeof *en);
    int32_t *rank = malloc((n + 1) * sizeof *rank);
    char *key = NULL;
    cbx_status rc = CBX_OK;
    if (!m || !st || !en || !rank) { rc = err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
    size_t ml = 0, ns = 0;
    for (size_t i = 0; i < n; i++) {
        const char *u = t->byte_map[(unsigned char)s[i]];
        size_t ul = u[1] ? (u[2] ? 3 : 2) : 1;
        st[ns] = ml;
        memcpy(m + ml, u, ul);
        ml += ul;
        en[ns++] = ml;
    }
    key = malloc(ml + 2);
    if (!key) { rc = err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
    /* rank[i] = rank of pair (i, i+1), -1 when unranked */
    for (size_t i = 0; i + 1 < ns; i++) rank[i] = pair_rank(t, m, st, en, i, key);
    while (ns > 1) {
        size_t best = ns;
        for (size_t i = 0; i + 1 < ns; i++)
            if (rank[i] >= 0 && (best == ns || rank[i] < rank[best])) best = i;
        if (best == ns) break;
        /* merge symbols best and best+1 (adjacent in m), drop best+1 */
        en[best] = en[best + 1];
        memmove(st + best + 1, st + best + 2, (ns - best - 2) * sizeof *st);
        memmove(en + best + 1, en + best + 2, (ns - best - 2) * sizeof *en);
        if (ns >= best + 3)
            memmove(rank + best + 1, rank + best + 2, (ns - best - 3) * sizeof *rank);
        ns--;
        if (best > 0) rank[best - 1] = pair_rank(t, m, st, en, best - 1, key);
        if (best + 1 < ns) rank[best] = pair_rank(t, m, st, en, best, key);
    }
    for (size_t i = 0; i < ns; i++) {
        int32_t id;
        if (!smap_find(&t->vocab, m + st[i], en[i] - st[i], &id)) {
            rc = err_setf(err, CBX_ERR_FORMAT, "tokenizer: symbol \"%.*s\" not in the vocabulary",
                          (int)(en[i] - st[i] > 40 ? 40 : en[i] - st[i]), m + st[i]);
            goto done;
        }
        ids_push(o, id);
    }
done:
    free(m); free(st); free(en); free(rank); free(key);
    return rc;
}

static cbx_status encode_plain(const struct gpt2_bpe *t, const char *s, size_t n, struct ids *o,
                               pcre2_match_data *md, char *err)
{
    size_t off = 0;
    while (off < n) {
        int r = pcre2_match(t->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, md, NULL);
        if (r < 0) {
            if (r == PCRE2_ERROR_NOMATCH) break;
            return err_setf(err, CBX_ERR_INTERNAL, "tokenizer: regex error %d", r);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] <= ov[0]) return err_setf(err, CBX_ERR_INTERNAL, "tokenizer: empty regex match");
        cbx_status rc = bpe_piece(t, s + ov[0], ov[1] - ov[0], o, err);
        if (rc != CBX_OK) return rc;
        off = ov[1];
    }
    return CBX_OK;
}

cbx_status gpt2_bpe_encode(const struct gpt2_bpe *t, const char *text, int32_t **ids,
                           int64_t *n_ids, char *err)
{
    *ids = NULL;
    *n_ids = 0;
    size_t n = strlen(text);
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + i,
                                              (utf8proc_ssize_t)(n - i), &c);
        if (k <= 0) return err_setf(err, CBX_ERR_INVALID_ARG, "text is not valid UTF-8 (byte %zu)", i);
        i += (size_t)k;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!md) return err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory");
    struct ids o = {0};
    cbx_status rc = CBX_OK;
    size_t start = 0;
    /* added tokens first: leftmost, then longest (list sorted by length) */
    for (size_t i = 0; i < n && rc == CBX_OK;) {
        int hit = -1;
        for (int a = 0; a < t->n_added; a++)
            if (t->added[a].n <= n - i && !memcmp(text + i, t->added[a].s, t->added[a].n)) { hit = a; break; }
        if (hit < 0) { i++; continue; }
        rc = encode_plain(t, text + start, i - start, &o, md, err);
        ids_push(&o, t->added[hit].id);
        i += t->added[hit].n;
        start = i;
    }
    if (rc == CBX_OK) rc = encode_plain(t, text + start, n - start, &o, md, err);
    pcre2_match_data_free(md);
    if (rc == CBX_OK && o.oom) rc = err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory");
    if (rc != CBX_OK) { free(o.v); return rc; }
    *ids = o.v;
    *n_ids = o.n;
    return CBX_OK;
}
