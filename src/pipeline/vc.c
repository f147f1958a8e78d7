/* vc.c - voice conversion (ChatterboxVC of chatterbox vc.py, 0.1.7 at
 * 5de7a54): source audio -> 16 kHz -> S3Tokenizer -> S3Gen with a target
 * voice's reference dict. See vc.h for the order of operations. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/backend.h"
#include "io/model_file.h"
#include "pipeline/vc.h"
#include "s3gen/s3gen.h"
#include "voice/s3tokenizer.h"
#include "voice/voice.h"

struct vc_model {
    struct model *own_file;      /* vc_model_load: owned; vc_model_borrow: NULL */
    struct s3gen own_s3;
    const struct model *file;    /* own_file or borrowed */
    const struct s3gen *s3;      /* S3Gen() of from_local: flow + mel2wav */
    struct s3tokenizer *tok;     /* s3gen.tokenizer; borrows file's weights */
    struct conds builtin;        /* conds.pt "gen" (and "t3", unused) */
    bool has_builtin;
    char builtin_err[ERR_MAX];   /* why there is no built-in voice */
    const struct backend *wbe;   /* holds own_s3's and tok's weights */
    struct backend *own_be;      /* wbe when vc_model_load made it (cpu: one
                                  * thread, placement only) */
};

/* The variant check and the parts made over file and s3 (either call). */
static cbx_status vc_model_init(struct vc_model *vm, const char *name, char *err)
{
    enum model_variant v = model_get_variant(vm->file);
    if (v != MODEL_ENGLISH)
        return err_setf(err, CBX_ERR_UNSUPPORTED,
                        "%s: voice conversion needs the english model (ResembleAI/chatterbox, standard "
                        "S3Gen); this is the %s model", name, model_variant_info(v)->name);
    if (!vm->s3) return err_setf(err, CBX_ERR_INVALID_ARG, "%s: no S3Gen loaded", name);
    if (vm->s3->meanflow) /* an English file should never hold the meanflow estimator */
        return err_setf(err, CBX_ERR_FORMAT, "%s: the S3Gen weights are meanflow (Turbo/Nano), want the "
                        "standard english S3Gen", name);
    struct weights w = model_weights(vm->file, MODEL_S3GEN);
    cbx_status rc = s3tok_load(&vm->tok, &w, vm->wbe, err);
    if (rc != CBX_OK) return rc;
    /* a model without a built-in voice still converts to given voices */
    if (conds_from_model(vm->file, &vm->builtin, vm->builtin_err) == CBX_OK) {
        if (vc_check_target(&vm->builtin, "the built-in voice (conds.pt)", vm->builtin_err) == CBX_OK)
            vm->has_builtin = true;
        else
            conds_free(&vm->builtin);
    }
    return CBX_OK;
}

/* ChatterboxVC.from_local */
cbx_status vc_model_load(const char *path, int wtype, const char *backend, struct vc_model **out,
                         char *err)
{
    *out = NULL;
    if (!path || !*path) return err_setf(err, CBX_ERR_INVALID_ARG, "no model path given");
    struct vc_model *vm = calloc(1, sizeof *vm);
    if (!vm) return err_setf(err, CBX_ERR_NOMEM, "out of memory");
    cbx_status rc = model_open(path, &vm->own_file, err);
    if (rc != CBX_OK) goto fail;
    vm->file = vm->own_file;
    if (!(vm->wbe = vm->own_be = backend_create(backend, 1, false, err))) {
        rc = CBX_ERR_UNSUPPORTED;
        goto fail;
    }
    enum model_variant v = model_get_variant(vm->file);
    if (v != MODEL_ENGLISH) { /* refused before S3Gen is loaded */
        rc = vc_model_init(vm, path, err);
        goto fail;
    }
    struct weights w = model_weights(vm->file, MODEL_S3GEN);
    const int wt = wtype >= 0 ? wtype : model_stored_wtype(vm->file);
    if ((rc = s3gen_load(&vm->own_s3, &w, vm->wbe, (enum dtype)wt, err)) != CBX_OK) goto fail;
    vm->s3 = &vm->own_s3;
    if ((rc = vc_model_init(vm, path, err)) != CBX_OK) goto fail;
    *out = vm;
    return CBX_OK;
fail:
    vc_model_free(vm);
    return rc;
}

cbx_status vc_model_borrow(const struct model *file, const struct s3gen *s3, const struct backend *be,
                           struct vc_model **out, char *err)
{
    *out = NULL;
    if (!file || !be) return err_setf(err, CBX_ERR_INVALID_ARG, "no model or backend given");
    struct vc_model *vm = calloc(1, sizeof *vm);
    if (!vm) return err_setf(err, CBX_ERR_NOMEM, "out of memory");
    vm->file = file;
    vm->s3 = s3;
    vm->wbe = be;
    cbx_status rc = vc_model_init(vm, "the model", err);
    if (rc != CBX_OK) {
        vc_model_free(vm);
        return rc;
    }
    *out = vm;
    return CBX_OK;
}

void vc_model_free(struct vc_model *vm)
{
    if (!vm) return;
    conds_free(&vm->builtin);
    s3tok_free(vm->tok);
    s3gen_free(&vm->own_s3);
    backend_free(vm->own_be); /* after every weight placed on it */
    model_close(vm->own_file);
    free(vm);
}

const struct model *vc_model_file(const struct vc_model *vm) { return vm->file; }
const struct backend *vc_model_backend(const struct vc_model *vm) { return vm->wbe; }

const struct conds *vc_model_voice(const struct vc_model *vm) { return vm->has_builtin ? &vm->builtin : NULL; }

const char *vc_model_no_voice_reason(const struct vc_model *vm)
{
    return vm->has_builtin ? "" : vm->builtin_err;
}

cbx_status vc_check_target(const struct conds *c, const char *name, char *err)
{
    if (!c->prompt_token || c->n_prompt_token < 1 || !c->prompt_feat || c->n_prompt_feat < 1 || !c->embedding)
        return err_setf(err, CBX_ERR_FORMAT, "%s: the voice has no S3Gen part (prompt_token, prompt_feat, "
                        "embedding), which voice conversion needs", name);
    if (c->n_embedding != S3GEN_XVEC_DIM)
        return err_setf(err, CBX_ERR_FORMAT, "%s: the S3Gen x-vector (embedding) has %lld values, need %d",
                        name, (long long)c->n_embedding, S3GEN_XVEC_DIM);
    for (int64_t i = 0; i < c->n_prompt_token; i++)
        if (c->prompt_token[i] < 0 || c->prompt_token[i] >= CONDS_SPEECH_VOCAB)
            return err_setf(err, CBX_ERR_FORMAT, "%s: prompt_token[%lld] = %d is outside [0, %d)", name,
                            (long long)i, c->prompt_token[i], CONDS_SPEECH_VOCAB);
    for (int64_t i = 0; i < c->n_prompt_feat * 80; i++)
        if (!isfinite(c->prompt_feat[i]))
            return err_setf(err, CBX_ERR_FORMAT, "%s: prompt_feat holds a non-finite value", name);
    for (int64_t i = 0; i < c->n_embedding; i++)
        if (!isfinite(c->embedding[i]))
            return err_setf(err, CBX_ERR_FORMAT, "%s: the x-vector holds a non-finite value", name);
    return CBX_OK;
}

/* ChatterboxVC.set_target_voice, or a stored voice */
cbx_status vc_voice_load(const struct vc_model *vm, const struct backend *be, const char *path,
                         struct conds *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (!path || !*path) return err_setf(err, CBX_ERR_INVALID_ARG, "no target voice given");
    struct stat st;
    if (stat(path, &st) != 0)
        return err_setf(err, CBX_ERR_NOT_FOUND, "%s: no such voice file, directory or audio file", path);
    struct voice_params p = voice_default_params();
    p.serial = true; /* only the S3Gen part is used: no second lane */
    cbx_status rc = conds_load_any_model(path, vm->file, be, &p, out, err);
    if (rc == CBX_OK && (rc = vc_check_target(out, path, err)) != CBX_OK) conds_free(out);
    return rc;
}

struct vc_params vc_default_params(const struct vc_model *vm)
{
    struct vc_params p = {0, 0, false};
    if (vm) p.bf16 = s3gen_default_bf16(vm->s3->wtype);
    return p;
}

/* librosa.load(audio, sr=S3_SR) then s3gen.tokenizer(audio_16) */
cbx_status vc_source_tokens(const struct vc_model *vm, const struct backend *be, const struct audio *src,
                            const char *name, int32_t **tokens, int64_t *n_tokens, char *err)
{
    *tokens = NULL;
    *n_tokens = 0;
    if (!name) name = "source";
    if (!src || !src->pcm || src->n < 1 || src->sample_rate < 1)
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: no source audio", name);
    const double secs = (double)src->n / src->sample_rate;
    if (secs < VC_MIN_SOURCE_SECONDS)
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: the source is %.3f s long, voice conversion needs "
                        "at least %.1f s of speech", name, secs, VC_MIN_SOURCE_SECONDS);
    for (int64_t i = 0; i < src->n; i++)
        if (!isfinite(src->pcm[i]))
            return err_setf(err, CBX_ERR_INVALID_ARG, "%s: sample %lld is not finite", name, (long long)i);
    float *x16 = NULL;
    int64_t n16 = 0;
    cbx_status rc = voice_resample(src->pcm, src->n, src->sample_rate, VC_SOURCE_RATE, &x16, &n16, err);
    if (rc != CBX_OK) return rc;
    rc = s3tok_tokenize(vm->tok, be, x16, n16, 0, tokens, n_tokens, err);
    free(x16);
    if (rc == CBX_OK && *n_tokens < 1) {
        free(*tokens);
        *tokens = NULL;
        *n_tokens = 0;
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: the source gives no speech tokens", name);
    }
    return rc;
}

/* ChatterboxVC.generate (without the watermark) */
cbx_status vc_convert(const struct vc_model *vm, const struct backend *be, const struct audio *src,
                      const char *name, const struct conds *target, const struct vc_params *p,
                      float **pcm, int64_t *n_pcm, int32_t **tokens, int64_t *n_tokens, char *err)
{
    *pcm = NULL;
    *n_pcm = 0;
    if (tokens) *tokens = NULL;
    if (n_tokens) *n_tokens = 0;
    if (!target) {
        if (!vm->has_builtin)
            return err_setf(err, CBX_ERR_NOT_FOUND, "no target voice given and the model has no built-in "
                            "voice (%s)", vm->builtin_err);
        target = &vm->builtin;
    }
    if (!backend_compatible(be, vm->wbe))
        return err_setf(err, CBX_ERR_INVALID_ARG, "the model's weights are on backend %s; backend %s cannot use them",
                        vm->wbe->name, be ? be->name : "(none)");
    cbx_status rc = vc_check_target(target, "target voice", err);
    if (rc != CBX_OK) return rc;
    struct vc_params dp = vc_default_params(vm);
    if (!p) p = &dp;
    int32_t *ids = NULL;
    int64_t n = 0;
    if ((rc = vc_source_tokens(vm, be, src, name, &ids, &n, err)) != CBX_OK) return rc;
    struct s3gen_params sp = s3gen_default_params();
    sp.seed = p->seed;
    sp.n_cfm_steps = p->n_cfm_steps;
    sp.bf16 = p->bf16;
    rc = s3gen_vocode(vm->s3, be, ids, n, target, &sp, pcm, n_pcm, err);
    if (rc == CBX_OK && tokens) {
        *tokens = ids;
        if (n_tokens) *n_tokens = n;
        ids = NULL;
    }
    free(ids);
    return rc;
}
