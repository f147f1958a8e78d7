/* conds.c - voice conditioning tensors from conds.pt, .npy files or a
 * voice file (GGUF v3, layout in conds.h). */
#include "conds.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/gguf.h"
#include "io/model_dir.h"
#include "io/model_file.h"
#include "io/npy.h"

void conds_free(struct conds *c)
{
    if (!c) return;
    free(c->speaker_emb);
    free(c->cond_prompt_tokens);
    free(c->prompt_token);
    free(c->prompt_feat);
    free(c->embedding);
    memset(c, 0, sizeof *c);
}

/* Copy a float tensor (any float type) of `want` elements per trailing
 * size check; returns element count via *n. */
static cbx_status copy_f32(const struct tensor *t, const char *what, int64_t inner,
                           float **out, int64_t *n, char *err)
{
    int64_t k = tensor_nelements(t);
    if (t->type != TYPE_F32 || !tensor_is_contiguous(t) || (inner > 0 && (t->ndim == 0 || t->ne[t->ndim - 1] != inner)))
        return err_setf(err, CBX_ERR_FORMAT, "voice: %s must be contiguous float32%s%lld, got %s", what,
                        inner > 0 ? " with last dimension " : "", (long long)(inner > 0 ? inner : 0),
                        dtype_name(t->type));
    *out = malloc(sizeof(float) * (size_t)(k ? k : 1));
    if (!*out) return err_setf(err, CBX_ERR_NOMEM, "voice: out of memory");
    memcpy(*out, t->data, sizeof(float) * (size_t)k);
    *n = inner > 0 ? k / inner : k;
    return CBX_OK;
}

static cbx_status copy_ids(const struct tensor *t, const char *what, int32_t **out, int64_t *n,
                           char *err)
{
    int64_t k = tensor_nelements(t);
    if ((t->type != TYPE_I64 && t->type != TYPE_I32) || !tensor_is_contiguous(t))
        return err_setf(err, CBX_ERR_FORMAT, "voice: %s must be int32 or int64, got %s", what,
                        dtype_name(t->type));
    *out = malloc(sizeof(int32_t) * (size_t)(k ? k : 1));
    if (!*out) return err_setf(err, CBX_ERR_NOMEM, "voice: out of memory");
    for (int64_t i = 0; i < k; i++) {
        int64_t v = t->type == TYPE_I64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
        if (v < 0 || v > 1000000) {
            free(*out);
            *out = NULL;
            return err_setf(err, CBX_ERR_FORMAT, "voice: %s[%lld] = %lld is not a speech token", what,
                            (long long)i, (long long)v);
        }
        (*out)[i] = (int32_t)v;
    }
    *n = k;
    return CBX_OK;
}

/* A conds entry by dotted path ("t3.speaker_emb"), from either source. */
typedef const struct tensor *(*cond_fn)(const void *src, const char *path);

static const struct tensor *dir_cond(const void *md, const char *path) { return model_dir_cond(md, path, NULL); }
static const struct tensor *file_cond(const void *m, const char *path) { return model_cond(m, path, NULL); }

static cbx_status conds_from(cond_fn get, const void *src, struct conds *c, char *err)
{
    memset(c, 0, sizeof *c);
    cbx_status rc;
    const struct tensor *t = get(src, "t3.speaker_emb");
    if (!t) return err_setf(err, CBX_ERR_FORMAT, "conds.pt: t3.speaker_emb is missing");
    if ((rc = copy_f32(t, "t3.speaker_emb", 0, &c->speaker_emb, &c->n_speaker, err)) != CBX_OK) goto fail;
    t = get(src, "t3.cond_prompt_speech_tokens");
    if (t && (rc = copy_ids(t, "t3.cond_prompt_speech_tokens", &c->cond_prompt_tokens, &c->n_cond_prompt, err)) != CBX_OK)
        goto fail;
    t = get(src, "t3.emotion_adv");
    c->emotion_adv = 0.5f;
    if (t && t->type == TYPE_F32 && tensor_nelements(t) == 1) {
        c->emotion_adv = *(const float *)t->data;
        c->has_emotion_adv = true;
    }
    if ((t = get(src, "gen.prompt_token")) &&
        (rc = copy_ids(t, "gen.prompt_token", &c->prompt_token, &c->n_prompt_token, err)) != CBX_OK)
        goto fail;
    if ((t = get(src, "gen.prompt_feat")) &&
        (rc = copy_f32(t, "gen.prompt_feat", 80, &c->prompt_feat, &c->n_prompt_feat, err)) != CBX_OK)
        goto fail;
    if ((t = get(src, "gen.embedding")) &&
        (rc = copy_f32(t, "gen.embedding", 0, &c->embedding, &c->n_embedding, err)) != CBX_OK)
        goto fail;
    return CBX_OK;
fail:
    conds_free(c);
    return rc;
}

cbx_status conds_from_model_dir(const struct model_dir *md, struct conds *c, char *err)
{
    return conds_from(dir_cond, md, c, err);
}

cbx_status conds_from_model(const struct model *m, struct conds *c, char *err)
{
    return conds_from(file_cond, m, c, err);
}

/* Read dir/name.npy; *found false when the file does not exist. */
static cbx_status read_npy(const char *dir, const char *name, bool required, struct npy *n,
                           bool *found, char *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    FILE *f = fopen(path, "rb");
    *found = f != NULL;
    if (!f) {
        memset(n, 0, sizeof *n);
        return required ? err_setf(err, CBX_ERR_NOT_FOUND, "voice: %s is missing", path) : CBX_OK;
    }
    fclose(f);
    return io_npy_read(path, n, err);
}

cbx_status conds_from_npy_dir(const char *dir, struct conds *c, char *err)
{
    memset(c, 0, sizeof *c);
    static const char *const names[] = {"speaker_emb", "cond_prompt_speech_tokens", "emotion_adv",
                                        "prompt_token", "prompt_feat", "embedding"};
    struct npy n[6];
    bool found[6] = {0};
    memset(n, 0, sizeof n);
    cbx_status rc = CBX_OK;
    for (int i = 0; i < 6 && rc == CBX_OK; i++) rc = read_npy(dir, names[i], i < 2, &n[i], &found[i], err);
    if (rc != CBX_OK) goto done;
    struct tensor t = io_npy_tensor(&n[0]);
    if (tensor_nelements(&t) != 256) {
        rc = err_setf(err, CBX_ERR_FORMAT, "voice: %s/speaker_emb.npy has %lld values, need 256", dir,
                      (long long)tensor_nelements(&t));
        goto done;
    }
    if ((rc = copy_f32(&t, "speaker_emb.npy", 0, &c->speaker_emb, &c->n_speaker, err)) != CBX_OK) goto done;
    t = io_npy_tensor(&n[1]);
    if ((rc = copy_ids(&t, "cond_prompt_speech_tokens.npy", &c->cond_prompt_tokens, &c->n_cond_prompt, err)) != CBX_OK)
        goto done;
    c->emotion_adv = 0.5f;
    if (found[2]) {
        t = io_npy_tensor(&n[2]);
        if (t.type != TYPE_F32 || tensor_nelements(&t) != 1) {
            rc = err_setf(err, CBX_ERR_FORMAT, "voice: emotion_adv.npy must hold one float32");
            goto done;
        }
        c->emotion_adv = *(const float *)t.data;
        c->has_emotion_adv = true;
    }
    if (found[3] && (t = io_npy_tensor(&n[3]),
                     rc = copy_ids(&t, "prompt_token.npy", &c->prompt_token, &c->n_prompt_token, err)) != CBX_OK)
        goto done;
    if (found[4] && (t = io_npy_tensor(&n[4]),
                     rc = copy_f32(&t, "prompt_feat.npy", 80, &c->prompt_feat, &c->n_prompt_feat, err)) != CBX_OK)
        goto done;
    if (found[5] && (t = io_npy_tensor(&n[5]),
                     rc = copy_f32(&t, "embedding.npy", 0, &c->embedding, &c->n_embedding, err)) != CBX_OK)
        goto done;
done:
    for (int i = 0; i < 6; i++) io_npy_free(&n[i]);
    if (rc != CBX_OK) conds_free(c);
    return rc;
}

/* ---- voice files (format in conds.h) ------------------------------------ */

#define KEY_PREFIX "chatterbox.voice."

/* The six tensors of a voice file, in file order. */
enum { V_SPEAKER, V_COND_TOKENS, V_EMOTION, V_PROMPT_TOKEN, V_PROMPT_FEAT, V_EMBEDDING, V_N };
static const char *const voice_names[V_N] = {
    "t3.speaker_emb", "t3.cond_prompt_speech_tokens", "t3.emotion_adv",
    "gen.prompt_token", "gen.prompt_feat", "gen.embedding",
};

static bool all_finite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

cbx_status conds_write_voice(const char *path, const struct conds *c, const struct conds_meta *m,
                             char *err)
{
    if (!c->speaker_emb || c->n_speaker != 256 || !c->embedding || c->n_embedding != 192 ||
        !c->cond_prompt_tokens || c->n_cond_prompt < 1 || c->n_cond_prompt > CONDS_MAX_PROMPT_TOKENS ||
        !c->prompt_token || c->n_prompt_token < 1 || c->n_prompt_token > CONDS_MAX_PROMPT_TOKENS ||
        !c->prompt_feat || c->n_prompt_feat < 1 || c->n_prompt_feat > CONDS_MAX_PROMPT_FRAMES)
        return err_setf(err, CBX_ERR_INVALID_ARG,
                        "%s: incomplete voice (speaker_emb %lld, cond_prompt_speech_tokens %lld, "
                        "prompt_token %lld, prompt_feat %lld frames, embedding %lld)",
                        path, (long long)c->n_speaker, (long long)c->n_cond_prompt,
                        (long long)c->n_prompt_token, (long long)c->n_prompt_feat, (long long)c->n_embedding);
    float emotion = c->emotion_adv;
    const int64_t ne[V_N][3] = {
        {1, 256}, {1, c->n_cond_prompt}, {1, 1, 1}, {1, c->n_prompt_token}, {1, c->n_prompt_feat, 80}, {1, 192},
    };
    const int nd[V_N] = {2, 2, 3, 2, 3, 2};
    const enum dtype ty[V_N] = {TYPE_F32, TYPE_I32, TYPE_F32, TYPE_I32, TYPE_F32, TYPE_F32};
    const void *data[V_N] = {c->speaker_emb, c->cond_prompt_tokens, &emotion,
                             c->prompt_token, c->prompt_feat, c->embedding};
    struct io_gguf_writer *w = NULL;
    cbx_status rc = io_gguf_writer_create(&w, err);
    if (rc != CBX_OK) return rc;
    if ((rc = io_gguf_writer_set_str(w, "general.type", CONDS_VOICE_TYPE, err)) ||
        (rc = io_gguf_writer_set_u32(w, KEY_PREFIX "format_version", CONDS_VOICE_FORMAT_VERSION, err)) ||
        (rc = io_gguf_writer_set_str(w, KEY_PREFIX "variant", m->variant, err)) ||
        (rc = io_gguf_writer_set_str(w, KEY_PREFIX "source", m->source, err)) ||
        (rc = io_gguf_writer_set_u32(w, KEY_PREFIX "sample_rate", m->sample_rate, err)) ||
        (rc = io_gguf_writer_set_f64(w, KEY_PREFIX "duration", m->duration, err)) ||
        (rc = io_gguf_writer_set_bool(w, KEY_PREFIX "loudness_norm", m->loudness_norm, err)) ||
        (rc = io_gguf_writer_set_f64(w, KEY_PREFIX "loudness_lufs", m->loudness_lufs, err)) ||
        (rc = io_gguf_writer_set_f64(w, KEY_PREFIX "gain_db", m->gain_db, err)) ||
        (rc = io_gguf_writer_set_str(w, KEY_PREFIX "tool", m->tool, err)))
        goto cleanup;
    for (int i = 0; i < V_N; i++)
        if ((rc = io_gguf_writer_add_tensor(w, voice_names[i], ty[i], nd[i], ne[i], data[i], err)) != CBX_OK)
            goto cleanup;
    rc = io_gguf_writer_write(w, path, err);
cleanup:
    io_gguf_writer_free(w);
    return rc;
}

/* Tensor `name` of g, type f32 (or i32/i64 when ids), with shape
 * [1, ..., inner] of ndim dims whose middle dim (the count) is in
 * [1, max]; returns the count through *count. */
static const struct tensor *voice_tensor(const struct io_gguf *g, const char *file, int idx, bool ids,
                                         int ndim, int64_t inner, int64_t max, int64_t *count,
                                         cbx_status *rc, char *err)
{
    const char *name = voice_names[idx];
    const struct tensor *t = io_gguf_find_tensor(g, name);
    if (!t) {
        *rc = err_setf(err, CBX_ERR_FORMAT, "%s: voice file has no tensor '%s'", file, name);
        return NULL;
    }
    bool type_ok = ids ? (t->type == TYPE_I32 || t->type == TYPE_I64) : t->type == TYPE_F32;
    if (!type_ok) {
        *rc = err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s' is %s, need %s", file, name,
                       dtype_name(t->type), ids ? "i32 or i64" : "f32");
        return NULL;
    }
    /* shape: [1, count] (ndim 2, inner 0), [1, count, inner] (ndim 3) or
     * fixed [1, inner] / [1, 1, 1] (max 0) */
    bool shape_ok = t->ndim == ndim && t->ne[0] == 1;
    int64_t n = 0;
    if (shape_ok) {
        if (max == 0) {
            for (int d = 1; d < ndim; d++) shape_ok = shape_ok && t->ne[d] == (d == ndim - 1 ? inner : 1);
        } else {
            n = t->ne[1];
            shape_ok = n >= 1 && n <= max && (ndim == 2 || t->ne[2] == inner);
        }
    }
    if (!shape_ok) {
        char got[96];
        int k = snprintf(got, sizeof got, "[");
        for (int d = 0; d < t->ndim && k < (int)sizeof got - 24; d++)
            k += snprintf(got + k, sizeof got - (size_t)k, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
        snprintf(got + k, sizeof got - (size_t)k, "]");
        const char *want = idx == V_SPEAKER     ? "[1, 256]"
                           : idx == V_EMOTION   ? "[1, 1, 1]"
                           : idx == V_EMBEDDING ? "[1, 192]"
                           : idx == V_PROMPT_FEAT ? "[1, T, 80] with 1 <= T <= 8192"
                                                  : "[1, N] with 1 <= N <= 4096";
        *rc = err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s' has shape %s, need %s", file, name, got, want);
        return NULL;
    }
    *count = max == 0 ? tensor_nelements(t) : n;
    *rc = CBX_OK;
    return t;
}

static cbx_status meta_str(const struct io_gguf *g, const char *file, const char *key, char *dst,
                           size_t cap, char *err)
{
    const char *s = NULL;
    uint64_t len = 0;
    cbx_status rc = io_gguf_get_str(g, key, &s, &len, err);
    if (rc != CBX_OK)
        return err_setf(err, CBX_ERR_FORMAT, "%s: voice file metadata '%s' is missing or not a string", file, key);
    if (len >= cap || memchr(s, 0, (size_t)len))
        return err_setf(err, CBX_ERR_FORMAT, "%s: voice file metadata '%s' is longer than %zu bytes or holds NUL",
                        file, key, cap - 1);
    memcpy(dst, s, (size_t)len);
    dst[len] = 0;
    return CBX_OK;
}

static cbx_status read_voice(struct io_gguf *g, const char *file, struct conds *c, struct conds_meta *mo,
                             char *err)
{
    struct conds_meta m;
    memset(&m, 0, sizeof m);
    cbx_status rc;
    const char *type = NULL;
    if (io_gguf_get_str(g, "general.type", &type, NULL, NULL) != CBX_OK || strcmp(type, CONDS_VOICE_TYPE))
        return err_setf(err, CBX_ERR_FORMAT, "%s: not a voice file (GGUF general.type is %s%s%s, need \"%s\")",
                        file, type ? "\"" : "", type ? type : "missing", type ? "\"" : "", CONDS_VOICE_TYPE);
    if (io_gguf_get_u32(g, KEY_PREFIX "format_version", &m.format_version, NULL) != CBX_OK)
        return err_setf(err, CBX_ERR_FORMAT, "%s: voice file metadata '" KEY_PREFIX "format_version' is missing or not u32", file);
    if (m.format_version < 1 || m.format_version > CONDS_VOICE_FORMAT_VERSION)
        return err_setf(err, CBX_ERR_FORMAT,
                        "%s: voice file format version %u is not supported (this build reads 1 to %d; "
                        "re-create the voice or update chatterbox)",
                        file, m.format_version, CONDS_VOICE_FORMAT_VERSION);
    if ((rc = meta_str(g, file, KEY_PREFIX "variant", m.variant, sizeof m.variant, err)) ||
        (rc = meta_str(g, file, KEY_PREFIX "source", m.source, sizeof m.source, err)) ||
        (rc = meta_str(g, file, KEY_PREFIX "tool", m.tool, sizeof m.tool, err)))
        return rc;
    if (io_gguf_get_u32(g, KEY_PREFIX "sample_rate", &m.sample_rate, NULL) ||
        io_gguf_get_f64(g, KEY_PREFIX "duration", &m.duration, NULL) ||
        io_gguf_get_bool(g, KEY_PREFIX "loudness_norm", &m.loudness_norm, NULL) ||
        io_gguf_get_f64(g, KEY_PREFIX "loudness_lufs", &m.loudness_lufs, NULL) ||
        io_gguf_get_f64(g, KEY_PREFIX "gain_db", &m.gain_db, NULL))
        return err_setf(err, CBX_ERR_FORMAT,
                        "%s: voice file metadata (sample_rate u32, duration f64, loudness_norm bool, "
                        "loudness_lufs f64, gain_db f64) is missing or mistyped", file);

    const struct tensor *t[V_N];
    int64_t cnt[V_N];
    static const struct { bool ids; int ndim; int64_t inner, max; } spec[V_N] = {
        {false, 2, 256, 0}, {true, 2, 0, CONDS_MAX_PROMPT_TOKENS}, {false, 3, 1, 0},
        {true, 2, 0, CONDS_MAX_PROMPT_TOKENS}, {false, 3, 80, CONDS_MAX_PROMPT_FRAMES}, {false, 2, 192, 0},
    };
    for (int i = 0; i < V_N; i++)
        if (!(t[i] = voice_tensor(g, file, i, spec[i].ids, spec[i].ndim, spec[i].inner, spec[i].max, &cnt[i], &rc, err)))
            return rc;
    char what[160];
    for (int i = 0; i < V_N; i++) {
        snprintf(what, sizeof what, "%s: tensor '%s'", file, voice_names[i]);
        if (spec[i].ids) {
            int32_t **dst = i == V_COND_TOKENS ? &c->cond_prompt_tokens : &c->prompt_token;
            int64_t *n = i == V_COND_TOKENS ? &c->n_cond_prompt : &c->n_prompt_token;
            if ((rc = copy_ids(t[i], what, dst, n, err)) != CBX_OK) goto fail;
            for (int64_t k = 0; k < *n; k++)
                if ((*dst)[k] >= CONDS_SPEECH_VOCAB) {
                    rc = err_setf(err, CBX_ERR_FORMAT, "%s[%lld] = %d is not a speech token (0..%d)", what,
                                  (long long)k, (*dst)[k], CONDS_SPEECH_VOCAB - 1);
                    goto fail;
                }
            continue;
        }
        if (!all_finite(t[i]->data, tensor_nelements(t[i]))) {
            rc = err_setf(err, CBX_ERR_FORMAT, "%s holds a NaN or infinite value", what);
            goto fail;
        }
        if (i == V_EMOTION) {
            c->emotion_adv = *(const float *)t[i]->data;
            c->has_emotion_adv = true;
        } else if ((rc = copy_f32(t[i], what, i == V_PROMPT_FEAT ? 80 : 0,
                                  i == V_SPEAKER ? &c->speaker_emb : i == V_PROMPT_FEAT ? &c->prompt_feat : &c->embedding,
                                  i == V_SPEAKER ? &c->n_speaker : i == V_PROMPT_FEAT ? &c->n_prompt_feat : &c->n_embedding,
                                  err)) != CBX_OK)
            goto fail;
    }
    if (mo) *mo = m;
    return CBX_OK;
fail:
    conds_free(c);
    return rc;
}

cbx_status conds_read_voice(const char *path, struct conds *c, struct conds_meta *m, char *err)
{
    memset(c, 0, sizeof *c);
    struct io_gguf *g = NULL;
    cbx_status rc = io_gguf_open(path, &g, err);
    if (rc != CBX_OK) return rc;
    rc = read_voice(g, path, c, m, err);
    io_gguf_close(g);
    return rc;
}

cbx_status conds_read_voice_mem(const void *buf, size_t n, const char *name, struct conds *c,
                                struct conds_meta *m, char *err)
{
    memset(c, 0, sizeof *c);
    struct io_gguf *g = NULL;
    cbx_status rc = io_gguf_open_memory(buf, n, &g, err);
    if (rc != CBX_OK) return rc;
    rc = read_voice(g, name ? name : "<memory>", c, m, err);
    io_gguf_close(g);
    return rc;
}

bool conds_is_gguf(const char *path)
{
    char magic[4];
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    bool yes = fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    fclose(f);
    return yes;
}

cbx_status conds_write_npy_dir(const char *dir, const struct conds *c, char *err)
{
    if (!c->speaker_emb || !c->cond_prompt_tokens)
        return err_setf(err, CBX_ERR_INVALID_ARG, "voice: nothing to write to %s (no T3 conditioning)", dir);
    bool made = mkdir(dir, 0777) == 0;
    if (!made && errno != EEXIST)
        return err_setf(err, CBX_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
    float emotion = c->emotion_adv;
    struct { const char *name; enum dtype type; int ndim; int64_t ne[3]; const void *data; } f[6] = {
        {"speaker_emb", TYPE_F32, 2, {1, c->n_speaker}, c->speaker_emb},
        {"cond_prompt_speech_tokens", TYPE_I32, 2, {1, c->n_cond_prompt}, c->cond_prompt_tokens},
        {"emotion_adv", TYPE_F32, 3, {1, 1, 1}, &emotion},
        {"prompt_token", TYPE_I32, 2, {1, c->n_prompt_token}, c->prompt_token},
        {"prompt_feat", TYPE_F32, 3, {1, c->n_prompt_feat, 80}, c->prompt_feat},
        {"embedding", TYPE_F32, 2, {1, c->n_embedding}, c->embedding},
    };
    char path[4096];
    cbx_status rc = CBX_OK;
    int i;
    for (i = 0; i < 6 && rc == CBX_OK; i++) {
        if (!f[i].data) continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s.npy", dir, f[i].name) >= sizeof path)
            rc = err_setf(err, CBX_ERR_INVALID_ARG, "voice: directory name too long: %s", dir);
        else
            rc = io_npy_write(path, f[i].type, f[i].ndim, f[i].ne, f[i].data, err);
    }
    if (rc != CBX_OK) { /* leave nothing half-written: the files so far, the directory if new */
        for (int k = 0; k < i; k++)
            if (f[k].data && (size_t)snprintf(path, sizeof path, "%s/%s.npy", dir, f[k].name) < sizeof path)
                remove(path);
        if (made) rmdir(dir);
    }
    return rc;
}
