/* api.c - the public C API (include/chatterbox.h) over the engine
 * (pipeline/engine.h) and voice conversion (pipeline/vc.h): handles,
 * parameter translation, per-context error messages. Nothing global: each
 * context keeps its own backend (over the process-wide pool of the
 * requested thread count, created on first use), its working memory
 * (engine_work) and message. Concurrent cbx_synthesize calls on contexts
 * of one model and thread count decode T3 in one batch (the engine's
 * scheduler, pipeline/scheduler.h), each getting the audio it gets alone.
 * A model is a speaking one (engine: Turbo, Nano, English); an English
 * one loads its voice-conversion part on the first cbx_convert_voice
 * (under the model's lock). A variant the engine refuses but voice
 * conversion would serve would load as a converting one only. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chatterbox.h"
#include "core/backend.h"
#include "core/tensor.h"
#include "io/model_file.h"
#include "pipeline/engine.h"
#include "pipeline/scheduler.h"
#include "pipeline/vc.h"

struct cbx_model {
    struct engine_model *m; /* NULL: a voice-conversion-only model */
    /* voice conversion: loaded with the model when the engine refuses the
     * variant, else on first use (under mu) */
    struct vc_model *vc;
    char *path;
    char *backend; /* cbx_model_params.backend (owned copy) or NULL */
    int wtype;
    pthread_mutex_t mu;
};

struct cbx_voice {
    struct conds c;
};

struct cbx_context {
    const struct cbx_model *model;
    struct backend *be;
    int be_threads;
    /* working memory kept between this context's calls (engine.h), tied
     * to be: made with it and freed with it */
    struct engine_work *work;
    char err[ERR_MAX];
};

/* Copy a message into an optional caller buffer. */
static void put_err(char *buf, size_t len, const char *msg)
{
    if (buf && len > 0) snprintf(buf, len, "%s", msg);
}

/* ---- model ---------------------------------------------------------------- */

cbx_model_params cbx_model_default_params(void)
{
    cbx_model_params p = {NULL, NULL, NULL, NULL};
    return p;
}

cbx_status cbx_model_load(const char *path, const cbx_model_params *params, cbx_model **model,
                          char *errbuf, size_t errlen)
{
    char err[ERR_MAX] = "";
    if (!model) {
        put_err(errbuf, errlen, "cbx_model_load: model is NULL");
        return CBX_ERR_INVALID_ARG;
    }
    *model = NULL;
    if (!path || !*path) {
        put_err(errbuf, errlen, "cbx_model_load: no model path given");
        return CBX_ERR_INVALID_ARG;
    }
    cbx_status brc = params ? backend_check_name(params->backend, err) : CBX_OK;
    if (brc != CBX_OK) {
        put_err(errbuf, errlen, err);
        return brc;
    }
    struct engine_load_params lp = engine_load_default_params();
    if (params && params->weight_type) {
        lp.wtype = dtype_from_name(params->weight_type);
        const struct dtype_traits *t = lp.wtype >= 0 ? dtype_traits(lp.wtype) : NULL;
        if (!t || lp.wtype == TYPE_I32 || lp.wtype == TYPE_I64 || lp.wtype == TYPE_I8 ||
            lp.wtype == TYPE_I16 || lp.wtype == TYPE_U8 || lp.wtype == TYPE_BOOL || lp.wtype == TYPE_F64) {
            snprintf(err, sizeof err, "cbx_model_load: unknown weight type '%s' (f32, f16, bf16, q8_0, q4_0, ...)",
                     params->weight_type);
            put_err(errbuf, errlen, err);
            return CBX_ERR_INVALID_ARG;
        }
    }
    if (params) {
        lp.prefix_dir = params->prefix_cache_dir;
        lp.t3_path = params->t3_path;
        lp.backend = params->backend;
    }
    cbx_model *h = calloc(1, sizeof *h);
    if (!h) {
        put_err(errbuf, errlen, "out of memory");
        return CBX_ERR_NOMEM;
    }
    h->wtype = lp.wtype;
    if (lp.backend && !(h->backend = strdup(lp.backend))) {
        free(h);
        put_err(errbuf, errlen, "out of memory");
        return CBX_ERR_NOMEM;
    }
    if (!(h->path = strdup(path))) {
        free(h->backend);
        free(h);
        put_err(errbuf, errlen, "out of memory");
        return CBX_ERR_NOMEM;
    }
    pthread_mutex_init(&h->mu, NULL);
    cbx_status rc = engine_model_load(path, &lp, &h->m, err);
    if (rc == CBX_ERR_UNSUPPORTED) {
        /* a variant only voice conversion serves (english); else the
         * engine's message stands */
        char vc_err[ERR_MAX] = "";
        cbx_status vrc = vc_model_load(path, lp.wtype, lp.backend, &h->vc, vc_err);
        if (vrc != CBX_ERR_UNSUPPORTED) { /* the variant VC serves: its result */
            rc = vrc;
            memcpy(err, vc_err, sizeof err);
        }
    }
    if (rc != CBX_OK) {
        put_err(errbuf, errlen, err);
        cbx_model_free(h);
        return rc;
    }
    *model = h;
    return CBX_OK;
}

void cbx_model_free(cbx_model *model)
{
    if (!model) return;
    vc_model_free(model->vc); /* may borrow from the engine */
    engine_model_free(model->m);
    pthread_mutex_destroy(&model->mu);
    free(model->path);
    free(model->backend);
    free(model);
}

/* The model's voice-conversion part, made on first use: over the text-to-
 * speech engine's S3Gen when there is one (one copy in memory), else
 * loaded. */
static cbx_status model_vc(const cbx_model *cm, struct vc_model **out, char *err)
{
    cbx_model *m = (cbx_model *)cm;
    cbx_status rc = CBX_OK;
    pthread_mutex_lock(&m->mu);
    if (!m->vc && m->m && engine_model_s3gen(m->m))
        rc = vc_model_borrow(engine_model_file(m->m), engine_model_s3gen(m->m), engine_model_backend(m->m), &m->vc,
                             err);
    else if (!m->vc)
        rc = vc_model_load(m->path, m->wtype, m->backend, &m->vc, err);
    *out = m->vc;
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* The error of a text-to-speech call on a voice-conversion-only model. */
static cbx_status no_engine(const cbx_model *m, char *err, const char *who)
{
    return err_setf(err, CBX_ERR_UNSUPPORTED, "%s: the %s model is loaded for voice conversion only "
                    "(cbx_convert_voice); text-to-speech supports turbo, nano and english", who,
                    model_variant_info(model_get_variant(vc_model_file(m->vc)))->name);
}

int cbx_model_sample_rate(const cbx_model *model)
{
    (void)model;
    return ENGINE_SAMPLE_RATE;
}

cbx_status cbx_model_get_stats(const cbx_model *model, cbx_model_stats *stats)
{
    if (!model || !stats) return CBX_ERR_INVALID_ARG;
    memset(stats, 0, sizeof *stats);
    if (!model->m) return CBX_OK;
    struct sched_stats st;
    engine_model_sched_stats(model->m, &st);
    stats->t3_steps = st.steps;
    stats->t3_rows = st.rows;
    stats->t3_max_rows = st.max_rows;
    return CBX_OK;
}

const char *cbx_model_variant(const cbx_model *model)
{
    const struct variant *vi = !model ? NULL
                               : model->m ? variant_get(engine_model_variant(model->m))
                                          : variant_get(model_get_variant(vc_model_file(model->vc)));
    return vi ? vi->name : "unknown";
}

const char *cbx_backends(char *buf, size_t len)
{
    if (buf && len) backend_describe(buf, len);
    return backend_auto_name();
}

const char *cbx_model_backend(const cbx_model *model)
{
    if (!model) return "unknown";
    const struct backend *be = model->m ? engine_model_backend(model->m) : vc_model_backend(model->vc);
    return be->host ? "cpu" : "cuda";
}

/* ---- voice ---------------------------------------------------------------- */

cbx_status cbx_voice_load(const cbx_model *model, const char *path, cbx_voice **voice,
                          char *errbuf, size_t errlen)
{
    char err[ERR_MAX] = "";
    if (!voice) {
        put_err(errbuf, errlen, "cbx_voice_load: voice is NULL");
        return CBX_ERR_INVALID_ARG;
    }
    *voice = NULL;
    if (!model || !path || !*path) {
        put_err(errbuf, errlen, !model ? "cbx_voice_load: model is NULL" : "cbx_voice_load: no voice path given");
        return CBX_ERR_INVALID_ARG;
    }
    cbx_voice *v = calloc(1, sizeof *v);
    if (!v) {
        put_err(errbuf, errlen, "out of memory");
        return CBX_ERR_NOMEM;
    }
    cbx_status rc = model->m ? engine_voice_load(model->m, NULL, path, &v->c, err)
                             : vc_voice_load(model->vc, NULL, path, &v->c, err);
    if (rc != CBX_OK) {
        put_err(errbuf, errlen, err);
        free(v);
        return rc;
    }
    *voice = v;
    return CBX_OK;
}

void cbx_voice_free(cbx_voice *voice)
{
    if (!voice) return;
    conds_free(&voice->c);
    free(voice);
}

/* ---- context -------------------------------------------------------------- */

cbx_status cbx_context_create(const cbx_model *model, cbx_context **ctx)
{
    if (!ctx) return CBX_ERR_INVALID_ARG;
    *ctx = NULL;
    if (!model) return CBX_ERR_INVALID_ARG;
    cbx_context *c = calloc(1, sizeof *c);
    if (!c) return CBX_ERR_NOMEM;
    c->model = model;
    c->be_threads = -1;
    *ctx = c;
    return CBX_OK;
}

void cbx_context_free(cbx_context *ctx)
{
    if (!ctx) return;
    engine_work_free(ctx->work);
    backend_free(ctx->be);
    free(ctx);
}

const char *cbx_context_errmsg(const cbx_context *ctx)
{
    return ctx ? ctx->err : "no context (NULL)";
}

/* ---- synthesis ------------------------------------------------------------ */

static cbx_synth_params from_engine(const struct engine_params *ep)
{
    const struct engine_params e = *ep;
    cbx_synth_params p;
    memset(&p, 0, sizeof p);
    p.temperature = e.s.temperature;
    p.top_k = e.s.top_k;
    p.top_p = e.s.top_p;
    p.repetition_penalty = e.s.repetition_penalty;
    p.max_tokens = e.max_tokens;
    p.seed = e.seed;
    p.cfm_steps = e.cfm_steps;
    p.n_threads = 0;
    p.split_text = e.split;
    p.max_segment_tokens = e.max_segment_tokens;
    p.pause_ms = e.pause_ms;
    p.max_retries = e.max_retries;
    p.stream = e.stream;
    p.stream_first_tokens = e.stream_first_tokens;
    p.stream_chunk_tokens = e.stream_chunk_tokens;
    p.stream_prompt_tokens = e.stream_prompt_tokens;
    p.stream_first_prompt_tokens = e.stream_first_prompt_tokens;
    p.stream_context_tokens = e.stream_context_tokens;
    p.precision = e.precision;
    p.min_p = e.s.min_p;
    p.cfg_weight = e.cfg_weight;
    p.exaggeration = e.exaggeration;
    p.language = NULL;
    p.alignment_guard = e.alignment_guard;
    return p;
}

cbx_synth_params cbx_synth_default_params(void)
{
    const struct engine_params e = engine_default_params();
    return from_engine(&e);
}

cbx_synth_params cbx_synth_default_params_for(const cbx_model *model)
{
    const struct engine_params e = model ? engine_model_default_params(model->m) : engine_default_params();
    return from_engine(&e);
}

void cbx_audio_free(cbx_audio *audio)
{
    if (!audio) return;
    free(audio->samples);
    memset(audio, 0, sizeof *audio);
}

/* The caller's callbacks behind the engine's (which share one user
 * pointer): the chunk callback, and cbx_synth_params.abort_callback as
 * the progress callback (at every T3 token and CFM step). */
struct relay {
    cbx_chunk_cb chunk;
    void *chunk_user;
    int (*abort)(void *user);
    void *abort_user;
};

static int relay_chunk(void *user, const float *pcm, int64_t n, int sample_rate)
{
    const struct relay *r = user;
    return r->chunk(r->chunk_user, pcm, (size_t)n, sample_rate);
}

static int relay_abort(void *user, const struct engine_progress *p)
{
    (void)p;
    const struct relay *r = user;
    return r->abort(r->abort_user) != 0;
}

/* ctx's backend with n threads (in [0, 1024], checked by the caller),
 * started on first use and restarted when n changes; its workers are the
 * process-wide pool of that count, shared with every other context. */
static cbx_status ctx_backend(cbx_context *ctx, int n, const char *who)
{
    if (ctx->be && ctx->be_threads == n) return CBX_OK;
    /* the memory of the old backend goes with it (a new backend may come
     * back at the same address) */
    engine_work_free(ctx->work);
    ctx->work = NULL;
    backend_free(ctx->be);
    ctx->be = NULL;
    ctx->be_threads = -1;
    const struct cbx_model *cm = ctx->model;
    const struct backend *wbe = cm->m ? engine_model_backend(cm->m) : vc_model_backend(cm->vc);
    char why[ERR_MAX];
    if (!(ctx->be = backend_create_like(wbe, n, true, why)))
        return err_setf(ctx->err, CBX_ERR_NOMEM, "%s: %s", who, why);
    if (!(ctx->work = engine_work_create()))
        return err_setf(ctx->err, CBX_ERR_NOMEM, "%s: out of memory", who);
    ctx->be_threads = n;
    return CBX_OK;
}

cbx_status cbx_prepare_voice(cbx_context *ctx, const cbx_voice *voice, int n_threads)
{
    if (!ctx) return CBX_ERR_INVALID_ARG;
    ctx->err[0] = 0;
    if (n_threads < 0 || n_threads > 1024)
        return err_setf(ctx->err, CBX_ERR_INVALID_ARG, "cbx_prepare_voice: n_threads %d outside [0, 1024]",
                        n_threads);
    if (!ctx->model->m) return no_engine(ctx->model, ctx->err, "cbx_prepare_voice");
    cbx_status rc = ctx_backend(ctx, n_threads, "cbx_prepare_voice");
    if (rc == CBX_OK) rc = engine_prepare_voice(ctx->model->m, ctx->be, voice ? &voice->c : NULL, ctx->err);
    return rc;
}

cbx_status cbx_synthesize(cbx_context *ctx, const cbx_voice *voice, const char *text,
                          const cbx_synth_params *params, cbx_chunk_cb chunk, void *user,
                          cbx_audio *audio)
{
    if (audio) memset(audio, 0, sizeof *audio);
    if (!ctx) return CBX_ERR_INVALID_ARG;
    ctx->err[0] = 0;
    if (!ctx->model->m) return no_engine(ctx->model, ctx->err, "cbx_synthesize");
    if (!text) return err_setf(ctx->err, CBX_ERR_INVALID_ARG, "cbx_synthesize: text is NULL");
    cbx_synth_params dp = cbx_synth_default_params();
    if (!params) params = &dp;
    if (params->n_threads < 0 || params->n_threads > 1024)
        return err_setf(ctx->err, CBX_ERR_INVALID_ARG, "cbx_synthesize: n_threads %d outside [0, 1024]",
                        params->n_threads);
    if (params->max_segment_tokens < 1)
        return err_setf(ctx->err, CBX_ERR_INVALID_ARG, "cbx_synthesize: max_segment_tokens %d < 1",
                        params->max_segment_tokens);
    if (params->cfm_steps < 0 || params->cfm_steps > 1000)
        return err_setf(ctx->err, CBX_ERR_INVALID_ARG, "cbx_synthesize: cfm_steps %d outside [0, 1000]",
                        params->cfm_steps);
    cbx_status rc = ctx_backend(ctx, params->n_threads, "cbx_synthesize");
    if (rc != CBX_OK) return rc;
    struct engine_params e = engine_model_default_params(ctx->model->m);
    e.s.temperature = params->temperature;
    e.s.min_p = params->min_p;
    e.cfg_weight = params->cfg_weight;
    e.exaggeration = params->exaggeration;
    e.language = params->language;
    e.s.top_k = params->top_k;
    e.s.top_p = params->top_p;
    e.s.repetition_penalty = params->repetition_penalty;
    e.max_tokens = params->max_tokens;
    e.seed = params->seed;
    e.cfm_steps = params->cfm_steps;
    e.split = params->split_text != 0;
    e.max_segment_tokens = params->max_segment_tokens;
    e.pause_ms = params->pause_ms;
    e.max_retries = params->max_retries;
    e.stream = params->stream != 0;
    e.stream_first_tokens = params->stream_first_tokens;
    e.stream_chunk_tokens = params->stream_chunk_tokens;
    e.stream_prompt_tokens = params->stream_prompt_tokens;
    e.stream_first_prompt_tokens = params->stream_first_prompt_tokens;
    e.stream_context_tokens = params->stream_context_tokens;
    e.precision = params->precision;
    e.alignment_guard = params->alignment_guard != 0;
    e.work = ctx->work;
    struct relay r = {chunk, user, params->abort_callback, params->abort_user};
    float *pcm = NULL;
    int64_t n = 0;
    rc = engine_synthesize(ctx->model->m, ctx->be, voice ? &voice->c : NULL, text, &e, chunk ? relay_chunk : NULL,
                           r.abort ? relay_abort : NULL, &r, audio ? &pcm : NULL, &n, NULL, ctx->err);
    if (rc != CBX_OK) return rc;
    if (audio) {
        audio->samples = pcm;
        audio->n = (size_t)n;
        audio->sample_rate = ENGINE_SAMPLE_RATE;
    }
    ctx->err[0] = 0;
    return CBX_OK;
}

/* ---- voice conversion ----------------------------------------------------- */

cbx_vc_params cbx_vc_default_params(void)
{
    cbx_vc_params p;
    memset(&p, 0, sizeof p);
    return p;
}

cbx_status cbx_convert_voice(cbx_context *ctx, const cbx_voice *target, const float *samples, size_t n,
                             int sample_rate, const cbx_vc_params *params, cbx_audio *audio)
{
    if (audio) memset(audio, 0, sizeof *audio);
    if (!ctx) return CBX_ERR_INVALID_ARG;
    ctx->err[0] = 0;
    if (!samples || n == 0) return err_setf(ctx->err, CBX_ERR_INVALID_ARG, "cbx_convert_voice: no source samples");
    if (sample_rate < 1000 || sample_rate > 768000)
        return err_setf(ctx->err, CBX_ERR_INVALID_ARG, "cbx_convert_voice: sample rate %d outside [1000, 768000]",
                        sample_rate);
    if (!audio) return err_setf(ctx->err, CBX_ERR_INVALID_ARG, "cbx_convert_voice: audio is NULL");
    cbx_vc_params dp = cbx_vc_default_params();
    if (!params) params = &dp;
    if (params->n_threads < 0 || params->n_threads > 1024)
        return err_setf(ctx->err, CBX_ERR_INVALID_ARG, "cbx_convert_voice: n_threads %d outside [0, 1024]",
                        params->n_threads);
    if (params->cfm_steps < 0 || params->cfm_steps > 1000)
        return err_setf(ctx->err, CBX_ERR_INVALID_ARG, "cbx_convert_voice: cfm_steps %d outside [0, 1000]",
                        params->cfm_steps);
    if (ctx->model->m && engine_model_variant(ctx->model->m) != MODEL_ENGLISH)
        return err_setf(ctx->err, CBX_ERR_UNSUPPORTED, "cbx_convert_voice: voice conversion needs the english "
                        "model; this is the %s model", cbx_model_variant(ctx->model));
    struct vc_model *vm = NULL;
    cbx_status rc = model_vc(ctx->model, &vm, ctx->err);
    if (rc != CBX_OK) return rc;
    if ((rc = ctx_backend(ctx, params->n_threads, "cbx_convert_voice")) != CBX_OK) return rc;
    struct vc_params p = vc_default_params(vm);
    p.seed = params->seed;
    p.n_cfm_steps = params->cfm_steps;
    const struct audio src = {(float *)samples, (int64_t)n, sample_rate, 1};
    float *pcm = NULL;
    int64_t n_pcm = 0;
    rc = vc_convert(vm, ctx->be, &src, "source", target ? &target->c : NULL, &p, &pcm, &n_pcm, NULL, NULL,
                    ctx->err);
    if (rc != CBX_OK) return rc;
    audio->samples = pcm;
    audio->n = (size_t)n_pcm;
    audio->sample_rate = VC_SAMPLE_RATE;
    ctx->err[0] = 0;
    return CBX_OK;
}
