/* tokenizer.c - text front ends by kind (see tokenizer.h). Ports the text
 * path of tts_turbo.py (punc_norm + AutoTokenizer) and of tts.py
 * (punc_norm + EnTokenizer.text_to_tokens) and of mtl_tts.py (punc_norm +
 * MTLTokenizer.text_to_tokens, text/mtl_text.h), chatterbox 0.1.7. */
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/model_file.h"
#include "io/variant.h"
#include "text/cangjie.h"
#include "text/gpt2_bpe.h"
#include "text/grapheme_bpe.h"
#include "text/mtl_text.h"
#include "text/punc_norm.h"

struct text_tokenizer {
    enum text_tokenizer_kind kind;
    struct gpt2_bpe *gpt2;         /* TEXT_TOK_GPT2 */
    struct grapheme_bpe *grapheme; /* the grapheme kinds */
    struct cangjie *cangjie;       /* TEXT_TOK_GRAPHEME_MTL: Cangjie5_TC.json, or NULL */
    char *cangjie_where;           /* where it was looked for (the "zh" error names it) */
};

/* Per kind: punc_norm rules and files (required first; NULL-terminated). */
static const struct kind_info {
    const char *name;
    enum punc_variant punc;
    int n_required;
    const char *files[5];
} kinds[] = {
    [TEXT_TOK_GPT2] = {"gpt2-bpe", PUNC_TURBO, 2,
                       {"vocab.json", "merges.txt", "added_tokens.json", "tokenizer_config.json", NULL}},
    [TEXT_TOK_GRAPHEME] = {"grapheme-bpe", PUNC_ENGLISH, 1, {"tokenizer.json", NULL}},
    [TEXT_TOK_GRAPHEME_MTL] = {"grapheme-bpe-mtl", PUNC_MULTILINGUAL, 1,
                               {"grapheme_mtl_merged_expanded_v1.json", "Cangjie5_TC.json", NULL}},
};
#define N_KINDS (int)(sizeof kinds / sizeof kinds[0])

int text_tokenizer_kind_for(enum model_variant v)
{
    /* the variant's row: its tokenizer, and whether it takes languages */
    const struct variant *r = variant_get(v);
    if (!r) return -1;
    if (r->tokenizer == VARIANT_TOK_GPT2_BPE) return TEXT_TOK_GPT2;
    return r->languages ? TEXT_TOK_GRAPHEME_MTL : TEXT_TOK_GRAPHEME;
}

const char *text_tokenizer_kind_name(enum text_tokenizer_kind kind)
{
    return (int)kind >= 0 && (int)kind < N_KINDS ? kinds[kind].name : "?";
}

void text_tokenizer_free(struct text_tokenizer *t)
{
    if (!t) return;
    gpt2_bpe_free(t->gpt2);
    grapheme_bpe_free(t->grapheme);
    cangjie_free(t->cangjie);
    free(t->cangjie_where);
    free(t);
}

static cbx_status set_where(struct text_tokenizer *t, const char *where, char *err)
{
    if (!(t->cangjie_where = strdup(where))) return err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory");
    return CBX_OK;
}

/* EnTokenizer / MTLTokenizer assert both markers are in the vocabulary. */
static cbx_status check_markers(const struct grapheme_bpe *g, const char *where, char *err)
{
    static const char *const need[] = {"[START]", "[STOP]"};
    for (int i = 0; i < 2; i++)
        if (grapheme_bpe_token_id(g, need[i]) < 0)
            return err_setf(err, CBX_ERR_FORMAT, "%s: no %s token (the English and multilingual tokenizers need it)",
                            where, need[i]);
    return CBX_OK;
}

cbx_status text_tokenizer_load_mem(enum text_tokenizer_kind kind, const struct text_tokenizer_file *files,
                                   int n, struct text_tokenizer **out, char *err)
{
    *out = NULL;
    if ((int)kind < 0 || (int)kind >= N_KINDS)
        return err_setf(err, CBX_ERR_INVALID_ARG, "tokenizer: bad kind %d", (int)kind);
    const struct kind_info *ki = &kinds[kind];
    const char *text[4] = {NULL, NULL, NULL, NULL};
    for (int f = 0; ki->files[f]; f++) {
        for (int i = 0; i < n && !text[f]; i++)
            if (files[i].name && files[i].text && !strcmp(files[i].name, ki->files[f])) text[f] = files[i].text;
        if (!text[f] && f < ki->n_required)
            return err_setf(err, CBX_ERR_NOT_FOUND, "tokenizer (%s): no %s given", ki->name, ki->files[f]);
    }
    struct text_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory");
    t->kind = kind;
    cbx_status rc;
    if (kind == TEXT_TOK_GPT2) {
        rc = gpt2_bpe_load_mem(text[0], text[1], text[2], text[3], &t->gpt2, err);
    } else {
        rc = grapheme_bpe_load_mem(text[0], strlen(text[0]), ki->files[0], &t->grapheme, err);
        if (rc == CBX_OK) rc = check_markers(t->grapheme, ki->files[0], err);
        /* the Cangjie table is optional: without it only "zh" fails */
        if (rc == CBX_OK && kind == TEXT_TOK_GRAPHEME_MTL) rc = set_where(t, ki->files[1], err);
        if (rc == CBX_OK && kind == TEXT_TOK_GRAPHEME_MTL && text[1])
            rc = cangjie_load_mem(text[1], strlen(text[1]), ki->files[1], &t->cangjie, err);
    }
    if (rc != CBX_OK) {
        text_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return CBX_OK;
}

cbx_status text_tokenizer_load_dir(enum text_tokenizer_kind kind, const char *dir,
                                   struct text_tokenizer **out, char *err)
{
    *out = NULL;
    if ((int)kind < 0 || (int)kind >= N_KINDS)
        return err_setf(err, CBX_ERR_INVALID_ARG, "tokenizer: bad kind %d", (int)kind);
    struct text_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory");
    t->kind = kind;
    cbx_status rc;
    if (kind == TEXT_TOK_GPT2) {
        rc = gpt2_bpe_load_dir(dir, &t->gpt2, err);
    } else {
        char path[4096];
        int k = snprintf(path, sizeof path, "%s/%s", dir, kinds[kind].files[0]);
        if (k < 0 || (size_t)k >= sizeof path) rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: path too long", dir);
        else rc = grapheme_bpe_load_file(path, &t->grapheme, err);
        if (rc == CBX_OK) rc = check_markers(t->grapheme, path, err);
        if (rc == CBX_OK && kind == TEXT_TOK_GRAPHEME_MTL) {
            /* optional: without it only "zh" fails, naming the file */
            k = snprintf(path, sizeof path, "%s/%s", dir, kinds[kind].files[1]);
            if (k < 0 || (size_t)k >= sizeof path) rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: path too long", dir);
            if (rc == CBX_OK) rc = set_where(t, path, err);
            if (rc == CBX_OK) rc = cangjie_load_file(path, &t->cangjie, err);
            if (rc == CBX_ERR_NOT_FOUND) rc = CBX_OK;
        }
    }
    if (rc != CBX_OK) {
        text_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return CBX_OK;
}

cbx_status text_tokenizer_load_model(const struct model *m, struct text_tokenizer **out, char *err)
{
    *out = NULL;
    int kind = text_tokenizer_kind_for(model_get_variant(m));
    if (kind < 0) return err_setf(err, CBX_ERR_INVALID_ARG, "%s: no text front end for this variant", model_path(m));
    if (!model_is_gguf(m)) return text_tokenizer_load_dir((enum text_tokenizer_kind)kind, model_path(m), out, err);
    const struct kind_info *ki = &kinds[kind];
    struct text_tokenizer_file files[4] = {{NULL, NULL}};
    char *text[4] = {NULL, NULL, NULL, NULL};
    int n = 0;
    cbx_status rc = CBX_OK;
    for (int f = 0; ki->files[f] && rc == CBX_OK; f++) {
        rc = model_text_file(m, ki->files[f], &text[f], NULL, err);
        if (rc == CBX_ERR_NOT_FOUND && f >= ki->n_required) rc = CBX_OK; /* optional */
        else if (rc == CBX_OK) files[n++] = (struct text_tokenizer_file){ki->files[f], text[f]};
    }
    if (rc == CBX_OK) rc = text_tokenizer_load_mem((enum text_tokenizer_kind)kind, files, n, out, err);
    if (rc == CBX_OK && kind == TEXT_TOK_GRAPHEME_MTL) {
        /* name the GGUF's metadata key in the "zh" error */
        char where[4200];
        snprintf(where, sizeof where, "%s (metadata key tokenizer.Cangjie5_TC_json)", model_path(m));
        free((*out)->cangjie_where);
        (*out)->cangjie_where = NULL;
        if ((rc = set_where(*out, where, err)) != CBX_OK) {
            text_tokenizer_free(*out);
            *out = NULL;
        }
    }
    for (int f = 0; f < 4; f++) free(text[f]);
    return rc;
}

/* " " -> "[SPACE]" (EnTokenizer.text_to_tokens: text.replace(' ', SPACE)). */
static char *spaces_to_tokens(const char *s, size_t n)
{
    static const char SPACE[] = "[SPACE]";
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    char *o = malloc(n + spaces * (sizeof SPACE - 2) + 1), *p = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') { memcpy(p, SPACE, sizeof SPACE - 1); p += sizeof SPACE - 1; }
        else *p++ = s[i];
    }
    *p = 0;
    return o;
}

/* The tokenizer object alone on text[0..len): GPT-2 as given; English:
 * " " -> "[SPACE]"; multilingual: MTLTokenizer.encode's steps with
 * `language` (mtl_text.h). */
static cbx_status encode_raw_n(const struct text_tokenizer *t, const char *text, size_t len, const char *language,
                               int32_t **ids, int64_t *n, char *err)
{
    *ids = NULL;
    *n = 0;
    if (language && t->kind != TEXT_TOK_GRAPHEME_MTL)
        return err_setf(err, CBX_ERR_INVALID_ARG, "language \"%.32s\" given, but the %s text front end takes none",
                        language, kinds[t->kind].name);
    char *s = NULL;
    cbx_status rc = CBX_OK;
    if (t->kind == TEXT_TOK_GRAPHEME_MTL && language && !strcasecmp(language, "zh") && !t->cangjie)
        return err_setf(err, CBX_ERR_NOT_FOUND,
                        "language \"zh\": the Chinese step needs the Cangjie table %s, which is missing",
                        t->cangjie_where);
    if (t->kind == TEXT_TOK_GRAPHEME_MTL) {
        rc = mtl_text_prepare(text, len, language, t->cangjie, &s, err);
        if (rc != CBX_OK) return rc;
    } else {
        s = t->kind == TEXT_TOK_GPT2 ? malloc(len + 1) : spaces_to_tokens(text, len);
        if (!s) return err_setf(err, CBX_ERR_NOMEM, "tokenizer: out of memory for %zu bytes of text", len);
    }
    if (t->kind == TEXT_TOK_GPT2) {
        memcpy(s, text, len);
        s[len] = 0;
        rc = gpt2_bpe_encode(t->gpt2, s, ids, n, err);
    } else {
        rc = grapheme_bpe_encode(t->grapheme, s, ids, n, err);
    }
    free(s);
    return rc;
}

cbx_status text_tokenizer_encode_raw(const struct text_tokenizer *t, const char *text, int32_t **ids,
                                     int64_t *n, char *err)
{
    return encode_raw_n(t, text, strlen(text), NULL, ids, n, err);
}

cbx_status text_tokenizer_encode_raw_lang(const struct text_tokenizer *t, const char *text, const char *language,
                                          int32_t **ids, int64_t *n, char *err)
{
    return encode_raw_n(t, text, strlen(text), language, ids, n, err);
}

cbx_status text_tokenizer_encode_lang(const struct text_tokenizer *t, const char *text, const char *language,
                                      int32_t **ids, int64_t *n, char *err)
{
    *ids = NULL;
    *n = 0;
    if (language && t->kind != TEXT_TOK_GRAPHEME_MTL) /* before punc_norm: the error names the language */
        return encode_raw_n(t, "", 0, language, ids, n, err);
    char *norm = NULL;
    cbx_status rc = punc_norm(text, kinds[t->kind].punc, &norm, err);
    if (rc != CBX_OK) return rc;
    rc = encode_raw_n(t, norm, strlen(norm), language, ids, n, err);
    free(norm);
    return rc;
}

cbx_status text_tokenizer_encode(const struct text_tokenizer *t, const char *text, int32_t **ids,
                                 int64_t *n, char *err)
{
    return text_tokenizer_encode_lang(t, text, NULL, ids, n, err);
}

cbx_status text_tokenizer_count(const struct text_tokenizer *t, const char *text, size_t len,
                                int64_t *n, char *err)
{
    int32_t *ids = NULL;
    cbx_status rc = encode_raw_n(t, text, len, NULL, &ids, n, err);
    free(ids);
    return rc;
}

cbx_status text_tokenizer_count_lang(const struct text_tokenizer *t, const char *text, size_t len,
                                     const char *language, int64_t *n, char *err)
{
    int32_t *ids = NULL;
    cbx_status rc = encode_raw_n(t, text, len, language, &ids, n, err);
    free(ids);
    return rc;
}

enum text_tokenizer_kind text_tokenizer_kind(const struct text_tokenizer *t) { return t->kind; }

int64_t text_tokenizer_vocab_size(const struct text_tokenizer *t)
{
    return t->gpt2 ? gpt2_bpe_vocab_size(t->gpt2) : grapheme_bpe_vocab_size(t->grapheme);
}

int64_t text_tokenizer_max_length(const struct text_tokenizer *t)
{
    return t->gpt2 ? gpt2_bpe_max_length(t->gpt2) : 0;
}

const struct gpt2_bpe *text_tokenizer_gpt2(const struct text_tokenizer *t) { return t->gpt2; }
const struct grapheme_bpe *text_tokenizer_grapheme(const struct text_tokenizer *t) { return t->grapheme; }
