/* conds.c - voice conditioning tensors from conds.pt or .npy files. */
#include "conds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/model_dir.h"
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

cbx_status conds_from_model_dir(const struct model_dir *md, struct conds *c, char *err)
{
    memset(c, 0, sizeof *c);
    cbx_status rc;
    const struct tensor *t = model_dir_cond(md, "t3.speaker_emb", NULL);
    if (!t) return err_setf(err, CBX_ERR_FORMAT, "conds.pt: t3.speaker_emb is missing");
    if ((rc = copy_f32(t, "t3.speaker_emb", 0, &c->speaker_emb, &c->n_speaker, err)) != CBX_OK) goto fail;
    t = model_dir_cond(md, "t3.cond_prompt_speech_tokens", NULL);
    if (t && (rc = copy_ids(t, "t3.cond_prompt_speech_tokens", &c->cond_prompt_tokens, &c->n_cond_prompt, err)) != CBX_OK)
        goto fail;
    t = model_dir_cond(md, "t3.emotion_adv", NULL);
    c->emotion_adv = 0.5f;
    if (t && t->type == TYPE_F32 && tensor_nelements(t) == 1) {
        c->emotion_adv = *(const float *)t->data;
        c->has_emotion_adv = true;
    }
    if ((t = model_dir_cond(md, "gen.prompt_token", NULL)) &&
        (rc = copy_ids(t, "gen.prompt_token", &c->prompt_token, &c->n_prompt_token, err)) != CBX_OK)
        goto fail;
    if ((t = model_dir_cond(md, "gen.prompt_feat", NULL)) &&
        (rc = copy_f32(t, "gen.prompt_feat", 80, &c->prompt_feat, &c->n_prompt_feat, err)) != CBX_OK)
        goto fail;
    if ((t = model_dir_cond(md, "gen.embedding", NULL)) &&
        (rc = copy_f32(t, "gen.embedding", 0, &c->embedding, &c->n_embedding, err)) != CBX_OK)
        goto fail;
    return CBX_OK;
fail:
    conds_free(c);
    return rc;
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
