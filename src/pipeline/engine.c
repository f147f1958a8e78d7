/* engine.c - text -> 24 kHz speech for every variant: ports the bodies of
 * ChatterboxTurboTTS.generate, ChatterboxTTS.generate and
 * ChatterboxMultilingualTTS.generate (chatterbox tts_turbo.py, tts.py,
 * mtl_tts.py, 0.1.7) on top of t3.h and s3gen.h, the differences read
 * from the variant's row (io/variant.h), plus long-text splitting,
 * pauses, retries, timings and progress (engine.h says what and why). */
#include "pipeline/engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <utf8proc.h>

#include "core/backend.h"
#include "core/tensor.h"
#include "core/threadpool.h"
#include "io/gguf.h"
#include "io/model_file.h"
#include "io/weights.h"
#include "pipeline/prefix_cache.h"
#include "pipeline/scheduler.h"
#include "pipeline/stream.h"
#include "s3gen/s3gen.h"
#include "t3/t3.h"
#include "text/splitter.h"
#include "text/tokenizer.h"
#include "voice/voice.h"

/* Working memory of one caller (engine.h, engine_work_create): T3's
 * workspace and S3Gen's arena, made on first use for the backend of the
 * call and made again when a call comes with another backend. */
struct engine_work {
    const struct backend *be;
    struct arena_pool *pool; /* blocks T3 and S3Gen take in turn */
    struct t3_workspace *t3;
    struct arena *s3;
};

struct engine_model {
    struct model *file;
    struct weights_file *t3_file; /* engine_load_params.t3_path, or NULL */
    const struct backend *wbe;    /* holds the weights (engine_load_params.be) */
    struct backend *own_be;       /* wbe when the model made it, else NULL */
    enum model_variant variant;
    struct text_tokenizer *tok;
    struct t3_model t3;
    struct s3gen s3;
    bool has_s3gen;
    struct conds builtin;
    bool has_builtin;
    char builtin_err[ERR_MAX]; /* why there is no built-in voice */
    double t_load;
    /* the voice prefix cache (engine.h), the one part calls share that
     * changes: its own object and locks (prefix_cache.h) */
    struct prefix_cache *pc;
    /* the T3 scheduler (scheduler.h): batched decoding of concurrent
     * calls; an object of its own, its thread started by the first call */
    struct sched *sched;
};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- model -------------------------------------------------------------- */

struct engine_load_params engine_load_default_params(void)
{
    struct engine_load_params p = {-1, 0, NULL, false, NULL, NULL, NULL};
    return p;
}

#define ENGINE_VOICE_CACHE_DEFAULT 2


/* A T3 loaded from another file (engine_load_params.t3_path) must fit the
 * rest of the model: the row's backbone, a text table of the tokenizer's
 * size, the row's speech table, the 256-value speaker embedding the voice
 * encoder makes. */
static cbx_status check_t3_fits(const struct engine_model *m, const char *path, char *err)
{
    const struct variant *vr = variant_get(m->variant);
    const struct t3_hparams *hp = &m->t3.hp;
    const bool llama = m->t3.order == T3_ORDER_CFG;
    const int64_t text = text_tokenizer_vocab_size(m->tok);
    if (llama != (vr->backbone == VARIANT_T3_LLAMA))
        return err_setf(err, CBX_ERR_FORMAT, "%s: a %s T3 does not fit the %s model (a %s T3)", path,
                        llama ? "Llama" : "GPT-2", vr->name, vr->backbone == VARIANT_T3_LLAMA ? "Llama" : "GPT-2");
    if (text > 0 && hp->text_vocab != text)
        return err_setf(err, CBX_ERR_FORMAT, "%s: a T3 with %lld text ids does not fit the %s model (its tokenizer has %lld)",
                        path, (long long)hp->text_vocab, vr->name, (long long)text);
    if (hp->speech_vocab != vr->speech_dict_size)
        return err_setf(err, CBX_ERR_FORMAT, "%s: a T3 with %lld speech ids does not fit the %s model (%d)", path,
                        (long long)hp->speech_vocab, vr->name, vr->speech_dict_size);
    if (hp->speaker_embed_size != 256)
        return err_setf(err, CBX_ERR_FORMAT, "%s: a T3 taking a %lld-value speaker embedding does not fit (the "
                        "voice encoder makes 256)", path, (long long)hp->speaker_embed_size);
    return CBX_OK;
}

cbx_status engine_model_load(const char *path, const struct engine_load_params *p,
                             struct engine_model **out, char *err)
{
    *out = NULL;
    struct engine_load_params dp = engine_load_default_params();
    if (!p) p = &dp;
    if (!path || !*path) return err_setf(err, CBX_ERR_INVALID_ARG, "no model path given");
    const double t0 = now();
    struct engine_model *m = calloc(1, sizeof *m);
    if (!m) return err_setf(err, CBX_ERR_NOMEM, "out of memory");
    /* the weights' backend: the caller's, else one named by p->backend
     * (placement only: calls compute on their own). cpu: a worker per
     * online CPU, so the decode weights' repacking and its first touch of
     * fresh memory run on every core (a one-shot `say` waits for them);
     * the workers sleep once the load is done. */
    if (!(m->wbe = p->be) && !(m->wbe = m->own_be = backend_create(p->backend, 0, false, err))) {
        engine_model_free(m);
        return CBX_ERR_UNSUPPORTED;
    }
    cbx_status rc = model_open(path, &m->file, err);
    if (rc != CBX_OK) goto fail;
    m->variant = model_get_variant(m->file);
    const int wtype = p->wtype >= 0 ? p->wtype : model_stored_wtype(m->file);
    if ((rc = text_tokenizer_load_model(m->file, &m->tok, err)) != CBX_OK) goto fail;
    if (p->t3_path && *p->t3_path) {
        if ((rc = weights_file_open(p->t3_path, &m->t3_file, err)) != CBX_OK) {
            char why[ERR_MAX];
            snprintf(why, sizeof why, "%s", err);
            rc = err_setf(err, rc, "%s (the T3 file must be .safetensors or .gguf)", why);
            goto fail;
        }
        struct weights w3 = weights_from_file(m->t3_file, "t3");
        const int t3type = p->wtype >= 0 ? p->wtype : weights_file_wtype(m->t3_file);
        if ((rc = t3_load(&m->t3, &w3, m->wbe, (enum dtype)t3type, err)) != CBX_OK) {
            char why[ERR_MAX];
            snprintf(why, sizeof why, "%s", err);
            rc = err_setf(err, rc, "%s: not a usable T3 file: %s", p->t3_path, why);
            goto fail;
        }
        if ((rc = check_t3_fits(m, p->t3_path, err)) != CBX_OK) goto fail;
    } else {
        struct weights w3 = model_weights(m->file, MODEL_T3);
        if ((rc = t3_load(&m->t3, &w3, m->wbe, (enum dtype)wtype, err)) != CBX_OK) goto fail;
    }
    struct weights ws = model_weights(m->file, MODEL_S3GEN);
    if (!p->t3_only && (rc = s3gen_load(&m->s3, &ws, m->wbe, (enum dtype)wtype, err)) != CBX_OK) goto fail;
    m->has_s3gen = !p->t3_only;
    /* a model without a usable built-in voice still speaks with others */
    if (conds_from_model(m->file, &m->builtin, m->builtin_err) == CBX_OK) m->has_builtin = true;
    const int n_prefix = p->voice_cache == 0 ? ENGINE_VOICE_CACHE_DEFAULT : p->voice_cache < 0 ? 0 : p->voice_cache;
    if (!(m->pc = prefix_cache_create(&m->t3, n_prefix, p->prefix_dir)) || !(m->sched = sched_create())) {
        rc = err_setf(err, CBX_ERR_NOMEM, "out of memory");
        goto fail;
    }
    m->t_load = now() - t0;
    *out = m;
    return CBX_OK;
fail:
    engine_model_free(m);
    return rc;
}

void engine_model_free(struct engine_model *m)
{
    if (!m) return;
    sched_free(m->sched);
    prefix_cache_free(m->pc);
    conds_free(&m->builtin);
    s3gen_free(&m->s3);
    t3_free(&m->t3);
    backend_free(m->own_be); /* after every weight placed on it */
    weights_file_close(m->t3_file);
    text_tokenizer_free(m->tok);
    model_close(m->file);
    free(m);
}

enum model_variant engine_model_variant(const struct engine_model *m) { return m->variant; }
const struct t3_model *engine_model_t3(const struct engine_model *m) { return &m->t3; }
const struct model *engine_model_file(const struct engine_model *m) { return m->file; }
const struct s3gen *engine_model_s3gen(const struct engine_model *m) { return m->has_s3gen ? &m->s3 : NULL; }
void engine_model_sched_stats(const struct engine_model *m, struct sched_stats *st)
{
    sched_get_stats(m->sched, st);
}

/* ---- working memory ------------------------------------------------------ */

struct engine_work *engine_work_create(void) { return calloc(1, sizeof(struct engine_work)); }

void engine_work_free(struct engine_work *w)
{
    if (!w) return;
    t3_workspace_free(w->t3);
    arena_free(w->s3);
    arena_pool_free(w->pool);
    free(w);
}

/* w's memory for backend be (dropped and made again for another backend);
 * false when w is NULL. */
static bool work_for(struct engine_work *w, const struct backend *be)
{
    if (!w) return false;
    if (w->be != be) {
        t3_workspace_free(w->t3);
        arena_free(w->s3);
        arena_pool_free(w->pool);
        w->t3 = NULL;
        w->s3 = NULL;
        w->pool = NULL;
        w->be = be;
    }
    /* without a pool each stage keeps its own blocks */
    if (!w->pool) w->pool = arena_pool_create(be);
    return true;
}

/* T3's workspace of w for be, or NULL (the call makes its own). */
static struct t3_workspace *work_t3(struct engine_work *w, const struct backend *be)
{
    if (!work_for(w, be)) return NULL;
    if (!w->t3 && (w->t3 = t3_workspace_create(be))) t3_workspace_set_pool(w->t3, w->pool);
    return w->t3;
}

/* S3Gen's arena of w for be, or NULL (the call makes its own). */
static struct arena *work_s3(struct engine_work *w, const struct backend *be)
{
    if (!work_for(w, be)) return NULL;
    if (!w->s3 && (w->s3 = arena_create(be, 0))) arena_set_pool(w->s3, w->pool);
    return w->s3;
}

/* S3Gen's products in BF16 for this call (engine_params.precision). */
static bool use_bf16(const struct engine_model *m, const struct engine_params *p)
{
    if (p->precision == ENGINE_PREC_AUTO) return s3gen_default_bf16(m->s3.wtype);
    return p->precision == ENGINE_PREC_BF16;
}
double engine_model_load_seconds(const struct engine_model *m) { return m->t_load; }
const struct backend *engine_model_backend(const struct engine_model *m) { return m->wbe; }

/* be can compute with m's weights (same memory and layout kind) */
static cbx_status check_backend(const struct engine_model *m, const struct backend *be, char *err)
{
    if (!m || !be) return err_setf(err, CBX_ERR_INVALID_ARG, "no model or backend");
    if (!backend_compatible(be, m->wbe))
        return err_setf(err, CBX_ERR_INVALID_ARG, "the model's weights are on backend %s; backend %s cannot use them",
                        m->wbe->name, be->name);
    return CBX_OK;
}
const struct text_tokenizer *engine_model_tokenizer(const struct engine_model *m) { return m->tok; }
const struct conds *engine_model_voice(const struct engine_model *m)
{
    return m->has_builtin ? &m->builtin : NULL;
}

/* ---- voice -------------------------------------------------------------- */

/* What T3 and S3Gen need of a voice, checked before any work. */
static cbx_status check_voice(const struct engine_model *m, const struct conds *v, const char *name,
                              char *err)
{
    if (!v->speaker_emb || v->n_speaker != m->t3.hp.speaker_embed_size)
        return err_setf(err, CBX_ERR_FORMAT, "%s: speaker_emb has %lld values, the model needs %lld",
                        name, (long long)v->n_speaker, (long long)m->t3.hp.speaker_embed_size);
    for (int64_t i = 0; i < v->n_cond_prompt; i++)
        if (v->cond_prompt_tokens[i] < 0 || v->cond_prompt_tokens[i] >= m->t3.hp.speech_vocab)
            return err_setf(err, CBX_ERR_FORMAT, "%s: cond_prompt_speech_tokens[%lld] = %d is outside [0, %lld)",
                            name, (long long)i, v->cond_prompt_tokens[i],
                            (long long)m->t3.hp.speech_vocab);
    if (!m->has_s3gen) return CBX_OK; /* T3 alone (engine_tokens) */
    if (!v->embedding || v->n_embedding != 192)
        return err_setf(err, CBX_ERR_FORMAT,
                        "%s: the S3Gen x-vector (embedding) has %lld values, need 192", name,
                        (long long)v->n_embedding);
    if ((v->n_prompt_token > 0) != (v->n_prompt_feat > 0))
        return err_setf(err, CBX_ERR_FORMAT, "%s: %lld prompt tokens but %lld prompt mel frames", name,
                        (long long)v->n_prompt_token, (long long)v->n_prompt_feat);
    for (int64_t i = 0; i < v->n_prompt_token; i++)
        if (v->prompt_token[i] < 0 || v->prompt_token[i] >= CONDS_SPEECH_VOCAB)
            return err_setf(err, CBX_ERR_FORMAT, "%s: prompt_token[%lld] = %d is outside [0, %d)", name,
                            (long long)i, v->prompt_token[i], CONDS_SPEECH_VOCAB);
    return CBX_OK;
}

cbx_status engine_voice_load(const struct engine_model *m, const struct backend *be,
                             const char *path, struct conds *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (!path || !*path) return err_setf(err, CBX_ERR_INVALID_ARG, "no voice path given");
    struct stat st;
    if (stat(path, &st) != 0)
        return err_setf(err, CBX_ERR_NOT_FOUND, "%s: no such voice file, directory or audio file", path);
    if (S_ISREG(st.st_mode) && !conds_is_gguf(path) && model_is_gguf(m->file))
        return err_setf(err, CBX_ERR_UNSUPPORTED,
                        "%s: a voice from audio needs the model directory (the voice networks are "
                        "not in a converted .gguf); make a .voice file with 'chatterbox voice create'",
                        path);
    cbx_status rc = conds_load_any(path, model_get_dir(m->file), be, NULL, out, err);
    if (rc == CBX_OK && (rc = check_voice(m, out, path, err)) != CBX_OK) conds_free(out);
    return rc;
}

/* ---- voice prefix cache -------------------------------------------------- */

/* The T3 conditioning of a voice. */
static struct t3_cond voice_cond(const struct conds *v)
{
    const struct t3_cond c = {v->speaker_emb, v->cond_prompt_tokens, v->n_cond_prompt, v->emotion_adv};
    return c;
}

/* The voice's prefix from the model's cache (prefix_cache.h); *src:
 * ENGINE_PREFIX_*. */
static cbx_status prefix_acquire(const struct engine_model *m, const struct backend *be,
                                 const struct conds *voice, struct prefix_cache_ent **out, int *src,
                                 double *t, char *note, char *err)
{
    const struct t3_cond c = voice_cond(voice);
    int s = PREFIX_CACHE_MEMORY;
    cbx_status rc = prefix_cache_acquire(m->pc, be, &c, out, &s, t, note, err);
    *src = s == PREFIX_CACHE_BUILT ? ENGINE_PREFIX_BUILT : s == PREFIX_CACHE_DISK ? ENGINE_PREFIX_DISK
                                                                                 : ENGINE_PREFIX_MEMORY;
    return rc;
}

void engine_voice_cache_clear(const struct engine_model *m) { prefix_cache_clear(m->pc); }

void engine_batch_stats(const struct engine_model *m, int64_t *steps, int64_t *rows, int64_t *max_rows)
{
    struct sched_stats s;
    sched_get_stats(m->sched, &s);
    *steps = s.steps;
    *rows = s.rows;
    *max_rows = s.max_rows;
}

/* *voice, or the built-in voice when it is NULL, checked against m. */
static cbx_status resolve_voice(const struct engine_model *m, const struct conds **voice, char *err)
{
    if (*voice) return check_voice(m, *voice, "voice", err);
    if (!m->has_builtin)
        return err_setf(err, CBX_ERR_NOT_FOUND, "the model has no usable built-in voice (%s); give a voice",
                        m->builtin_err);
    *voice = &m->builtin;
    return check_voice(m, *voice, "built-in voice", err);
}

cbx_status engine_prepare_voice(const struct engine_model *m, const struct backend *be,
                                const struct conds *voice, char *err)
{
    cbx_status rc = check_backend(m, be, err);
    if (rc == CBX_OK) rc = resolve_voice(m, &voice, err);
    if (rc != CBX_OK || prefix_cache_capacity(m->pc) == 0) return rc;
    struct prefix_cache_ent *e = NULL;
    double t = 0;
    int src;
    char note[ERR_MAX];
    rc = prefix_acquire(m, be, voice, &e, &src, &t, note, err);
    /* CFG models: the unconditional row over a whole segment's text too
     * (start and stop tokens included), so the first call's prefill runs
     * the conditional row alone (t3.h, t3_prefix_extend) */
    if (rc == CBX_OK)
        rc = t3_prefix_extend(prefix_cache_prefix(e), be, variant_get(m->variant)->segment.max_tokens + 2, err);
    if (rc == CBX_OK) prefix_cache_persist(m->pc, e, note);
    prefix_cache_release(m->pc, e);
    return rc;
}

/* ---- parameters --------------------------------------------------------- */

struct engine_params engine_default_params(void)
{
    struct engine_params p;
    memset(&p, 0, sizeof p);
    /* tts_turbo.py generate() defaults (overview.md §4): the Turbo row's */
    const struct variant_sampling *d = &variant_get(MODEL_TURBO)->sampling;
    p.s.temperature = d->temperature;
    p.s.top_k = d->top_k;
    p.s.top_p = d->top_p;
    p.s.min_p = d->min_p;
    p.s.repetition_penalty = d->repetition_penalty;
    p.max_tokens = d->max_tokens; /* max_gen_len = 1000 */
    p.seed = 0;
    p.cfm_steps = 0;
    p.stream_first_prompt_tokens = 25;
    p.stream_context_tokens = 32;
    p.stream_prompt_tokens = 50;
    p.split = true;
    p.max_segment_tokens = variant_get(MODEL_TURBO)->segment.max_tokens;
    p.pause_ms = 100;
    p.max_retries = 2;
    p.min_speech_per_text = variant_get(MODEL_TURBO)->segment.min_speech_per_text;
    p.stream = false;
    p.stream_first_tokens = stream_default_params().first_tokens;
    p.stream_chunk_tokens = stream_default_params().chunk_tokens;
    p.cfg_weight = 0.5;
    p.exaggeration = -1;
    return p;
}

struct engine_params engine_model_default_params(const struct engine_model *m)
{
    struct engine_params p = engine_default_params();
    if (!m) return p;
    /* the row's generate() defaults (overview.md §4) */
    const struct variant_sampling *d = &variant_get(m->variant)->sampling;
    p.s.temperature = d->temperature;
    p.s.top_k = d->top_k;
    p.s.top_p = d->top_p;
    p.s.min_p = d->min_p;
    p.s.repetition_penalty = d->repetition_penalty;
    p.max_tokens = d->max_tokens;
    if (variant_get(m->variant)->cfg) p.cfg_weight = d->cfg_weight;
    p.max_segment_tokens = variant_get(m->variant)->segment.max_tokens;
    p.min_speech_per_text = variant_get(m->variant)->segment.min_speech_per_text;
    return p;
}

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t engine_seed(uint64_t seed, int i, int j)
{
    if (i == 0 && j == 0) return seed;
    return splitmix64(seed ^ splitmix64(((uint64_t)(uint32_t)i << 32) | (uint32_t)j));
}

/* ---- long text (text/splitter.c) ---------------------------------------- */

bool engine_has_word(const char *s) { return text_split_has_word(s); }

cbx_status engine_split(const struct text_tokenizer *tok, const char *text, const char *language, int budget,
                        struct engine_segments *out, char *err)
{
    memset(out, 0, sizeof *out);
    return text_split(tok, text, language, budget, &out->text, &out->n, err);
}

void engine_segments_free(struct engine_segments *s)
{
    if (!s) return;
    text_split_free(s->text, s->n);
    memset(s, 0, sizeof *s);
}

/* ---- synthesis ---------------------------------------------------------- */

struct run {
    engine_progress_fn progress;
    void *user;
    struct engine_progress pr;
    int64_t steps; /* T3 decode steps, all attempts */
    struct stream *stream;  /* streaming: T3's speech tokens go here */
    int64_t n_pushed;       /* tokens pushed to it */
    cbx_status stream_rc;
    char stream_err[ERR_MAX];
};

static int on_t3_step(void *user, int step, int32_t token, const float *logits, int n_rows, int64_t V)
{
    (void)n_rows;
    (void)token; (void)logits; (void)n_rows; (void)V;
    struct run *r = user;
    r->steps++;
    r->pr.tokens = step + 1;
    if (r->progress && r->progress(r->user, &r->pr)) return 1;
    /* streaming: each speech token (ids < 6561, as tts_turbo.py keeps) on
     * to S3Gen at once (after the token's progress report); a failure
     * stops T3 */
    if (r->stream && token >= 0 && token < S3GEN_SPEECH_VOCAB) {
        if ((r->stream_rc = stream_push(r->stream, &token, 1, r->stream_err)) != CBX_OK) return 1;
        r->n_pushed++;
    }
    return 0;
}

static int on_cfm_step(void *user, int step, float t, float rr, const struct tensor *x,
                       const struct tensor *v)
{
    (void)step; (void)t; (void)rr; (void)x; (void)v;
    struct run *r = user;
    return r->progress ? r->progress(r->user, &r->pr) : 0;
}

/* Append n samples (zeros when src is NULL) to *buf. */
static cbx_status append(float **buf, int64_t *n, int64_t *cap, const float *src, int64_t k, char *err)
{
    if (*n + k > *cap) {
        int64_t c = *cap ? *cap : 24000;
        while (c < *n + k) c *= 2;
        float *b = realloc(*buf, sizeof(float) * (size_t)c);
        if (!b) return err_setf(err, CBX_ERR_NOMEM, "out of memory for %lld samples", (long long)c);
        *buf = b;
        *cap = c;
    }
    if (src) memcpy(*buf + *n, src, sizeof(float) * (size_t)k);
    else memset(*buf + *n, 0, sizeof(float) * (size_t)k);
    *n += k;
    return CBX_OK;
}

/* mtl_tts.py: wav[:, :max(1, n - 1) * 960], n the speech tokens S3Gen
 * was given (the last token's audio, ~40 ms of noise before the stop,
 * dropped; overview.md §7); -1: the row keeps everything. */
static int64_t trim_samples(const struct variant *vr, int64_t n_tokens)
{
    if (!vr->trim_last_token) return -1;
    return (n_tokens > 1 ? n_tokens - 1 : 1) * ENGINE_SAMPLES_PER_TOKEN;
}

/* The text ids of a segment as T3 takes them: the caller's ids
 * (p->text_ids) or the tokenised text, wrapped in the start/stop text
 * tokens on the Llama T3 (generate() pads them on). *ids owned by the
 * caller. */
static cbx_status text_tokens(const struct engine_model *m, const char *seg, const struct engine_params *p,
                              int32_t **ids, int64_t *n_ids, char *err)
{
    int32_t *raw = NULL;
    int64_t n = 0;
    cbx_status rc = CBX_OK;
    *ids = NULL;
    *n_ids = 0;
    if (p->text_ids) {
        n = p->n_text_ids;
        if (!(raw = malloc(sizeof *raw * (size_t)(n > 0 ? n : 1)))) return err_setf(err, CBX_ERR_NOMEM, "out of memory");
        memcpy(raw, p->text_ids, sizeof *raw * (size_t)n);
    } else {
        /* the variant's front end: punc_norm, its own steps, the BPE */
        if ((rc = text_tokenizer_encode_lang(m->tok, seg, p->language, &raw, &n, err)) != CBX_OK) return rc;
        /* Turbo: tokenizer(..., truncation=True) cuts at model_max_length */
        const int64_t maxlen = text_tokenizer_max_length(m->tok);
        if (maxlen > 0 && n > maxlen) n = maxlen;
    }
    const int wrap = m->t3.hp.start_text >= 0 ? 2 : 0;
    int32_t *out = malloc(sizeof *out * (size_t)(n + wrap + 1));
    if (!out) {
        free(raw);
        return err_setf(err, CBX_ERR_NOMEM, "out of memory");
    }
    if (wrap) out[0] = m->t3.hp.start_text;
    memcpy(out + (wrap ? 1 : 0), raw, sizeof *out * (size_t)n);
    if (wrap) out[n + 1] = m->t3.hp.stop_text;
    free(raw);
    *ids = out;
    *n_ids = n + wrap;
    return CBX_OK;
}

/* t3_inference_prefixed through the model's scheduler (scheduler.h): the
 * prefill here, the decode steps batched with those of concurrent calls
 * in the scheduler's thread, each token handed to on_t3_step here (so its
 * progress, streaming and S3Gen work run in this thread). Same tokens as
 * t3_inference_prefixed. */
static cbx_status t3_scheduled(const struct engine_model *m, const struct backend *be, const struct t3_prefix *pfx,
                               const int32_t *ids, int64_t n_ids, const struct t3_gen_params *gp, struct run *r,
                               int32_t **tokens, int64_t *n_tokens, char *err)
{
    *tokens = NULL;
    *n_tokens = 0;
    struct t3_seq *seq = NULL;
    struct sched_req *req = NULL;
    cbx_status rc = t3_seq_start(&m->t3, be, NULL, pfx, ids, n_ids, gp, NULL, NULL, &seq, err);
    /* a scheduler that took another thread count meanwhile refuses it:
     * the sequence is then decoded here, as without the scheduler */
    char why[ERR_MAX];
    if (rc == CBX_OK && sched_submit(m->sched, seq, (int64_t)gp->max_gen_len + 2, &req, why) != CBX_OK) req = NULL;
    int step = 0;
    int32_t tok;
    while (rc == CBX_OK) {
        if (req) rc = sched_next(req, &tok, err);
        else if (t3_seq_done(seq)) break;
        else rc = t3_seq_step(seq, &tok, err);
        if (rc != CBX_OK || (req && tok < 0)) break;
        if (tok >= 0 && on_t3_step(r, step++, tok, NULL, t3_seq_rows(seq), m->t3.hp.speech_vocab)) {
            if (req) sched_cancel(req);
            rc = err_setf(err, CBX_ERR_CANCELLED, "T3: cancelled");
        }
    }
    sched_finish(req);
    if (rc == CBX_OK) rc = t3_seq_tokens(seq, tokens, n_tokens, err);
    t3_seq_free(seq);
    return rc;
}

/* One segment: normalise, tokenise, T3 (with retries). *speech owned by
 * the caller; it has room for the row's silence tail. */
static cbx_status segment_tokens(const struct engine_model *m, const struct backend *be,
                                 const struct t3_prefix *pfx, const char *seg, int i,
                                 const struct engine_params *p, struct run *r,
                                 struct engine_stats *st, int32_t **speech, int64_t *n_speech,
                                 uint64_t *seed_used, char *err)
{
    int32_t *ids = NULL, *best = NULL;
    int64_t n_ids = 0, n_best = -1;
    *speech = NULL;
    *n_speech = 0;
    double t0 = now();
    cbx_status rc = text_tokens(m, seg, p, &ids, &n_ids, err);
    if (rc != CBX_OK) goto cleanup;
    st->n_text_tokens += n_ids;
    st->t_text += now() - t0;

    struct t3_gen_params gp = t3_gen_default_params(&m->t3);
    gp.s = p->s;
    /* max_tokens counts every sample: Turbo's max_gen_len is one less,
     * the Llama's max_new_tokens is the count itself */
    gp.max_gen_len = m->t3.order == T3_ORDER_CFG ? p->max_tokens : p->max_tokens - 1;
    gp.cfg_weight = p->cfg_weight;
    gp.alignment_guard = p->alignment_guard;
    const bool greedy = p->s.top_k == 1;
    for (int j = 0; j <= p->max_retries; j++) {
        int32_t *tok = NULL;
        int64_t n_tok = 0;
        gp.seed = engine_seed(p->seed, i, j);
        r->pr.stage = ENGINE_STAGE_T3;
        r->pr.attempt = j;
        r->pr.tokens = 0;
        t0 = now();
        gp.ws = work_t3(p->work, be);
        if (sched_accepts(m->sched, be))
            rc = t3_scheduled(m, be, pfx, ids, n_ids, &gp, r, &tok, &n_tok, err);
        else
            rc = t3_inference_prefixed(&m->t3, be, pfx, ids, n_ids, &gp, on_t3_step, r, &tok, &n_tok, err);
        st->t_t3 += now() - t0;
        if (rc != CBX_OK) goto cleanup;
        const bool capped = n_tok >= p->max_tokens;
        /* the row's post-filter (tts_turbo.py: speech_tokens[speech_tokens < 6561]) */
        n_tok = variant_filter_speech(variant_get(m->variant), tok, n_tok);
        if (n_tok > n_best) {
            free(best);
            best = tok;
            n_best = n_tok;
            *seed_used = gp.seed;
        } else {
            free(tok);
        }
        const bool early = !capped && (double)n_tok < p->min_speech_per_text * (double)n_ids;
        if (!early || greedy || j == p->max_retries) break;
        st->n_retries++;
    }
    /* room for the silence tokens */
    int32_t *grown = realloc(best, sizeof(int32_t) * (size_t)(n_best + ENGINE_N_SIL + 1));
    if (!grown) { rc = err_setf(err, CBX_ERR_NOMEM, "out of memory"); goto cleanup; }
    *speech = grown;
    *n_speech = n_best;
    best = NULL;
cleanup:
    free(best);
    free(ids);
    return rc;
}

/* ---- streaming (pipeline/stream.h) -------------------------------------- */

/* Where streamed audio goes: the caller's chunk callback, the whole-audio
 * buffer when one is wanted, the pause owed before a segment. */
struct stream_out {
    engine_chunk_fn chunk;
    void *user;
    float **all;
    int64_t *n_all, *cap;
    bool keep;             /* the caller wants the whole audio */
    int64_t pause;         /* zeros owed before the segment's first samples */
    struct engine_stats *st;
    double t_start;
    cbx_status rc;         /* why a chunk was refused (CBX_OK: cancelled) */
    char err[ERR_MAX];
    /* the row's cut of the last token's audio (trim_samples): the last
     * `hold` samples are held back until the segment's end says whether
     * they are kept; `emitted` counts the segment's samples out */
    int64_t hold, n_tail, emitted;
    float tail[ENGINE_SAMPLES_PER_TOKEN];
};

static int out_samples(struct stream_out *o, const float *pcm, int64_t n)
{
    const int64_t start = *o->n_all;
    if ((o->keep || !pcm) && (o->rc = append(o->all, o->n_all, o->cap, pcm, n, o->err)) != CBX_OK) return 1;
    const float *x = o->keep || !pcm ? *o->all + start : pcm;
    o->st->n_samples += n;
    int stop = o->chunk && o->chunk(o->user, x, n, ENGINE_SAMPLE_RATE);
    if (!o->keep) *o->n_all = 0;
    return stop;
}

static int on_stream_audio(void *user, const float *pcm, int64_t n)
{
    struct stream_out *o = user;
    if (o->st->n_chunks++ == 0) {
        o->st->t_first_audio = now() - o->t_start;
        tp_set_urgent(false); /* the first audio is out (engine_synthesize) */
    }
    if (o->pause > 0) {
        int64_t k = o->pause;
        o->pause = 0;
        if (out_samples(o, NULL, k)) return 1;
    }
    if (o->hold == 0) return out_samples(o, pcm, n);
    /* out go the oldest samples beyond the last `hold`: the tail's, then
     * pcm's; the rest of pcm joins the tail */
    int64_t out = o->n_tail + n - o->hold;
    if (out > 0) {
        const int64_t from_tail = out < o->n_tail ? out : o->n_tail;
        if (from_tail > 0 && out_samples(o, o->tail, from_tail)) return 1;
        memmove(o->tail, o->tail + from_tail, sizeof(float) * (size_t)(o->n_tail - from_tail));
        o->n_tail -= from_tail;
        const int64_t from_pcm = out - from_tail;
        if (from_pcm > 0 && out_samples(o, pcm, from_pcm)) return 1;
        pcm += from_pcm;
        n -= from_pcm;
        o->emitted += out;
    }
    memcpy(o->tail + o->n_tail, pcm, sizeof(float) * (size_t)n);
    o->n_tail += n;
    return 0;
}

/* One segment streamed: T3 (no retries) pushes its tokens into a stream
 * through on_t3_step; the final chunk adds the 3 silence tokens. */
static cbx_status stream_segment(const struct engine_model *m, const struct backend *be,
                                 const struct conds *voice, const struct t3_prefix *pfx,
                                 const char *seg, int i,
                                 const struct engine_params *p, struct run *r,
                                 struct engine_stats *st, struct stream_out *o, char *err)
{
    struct engine_params q = *p;
    q.max_retries = 0;
    struct stream_params sp = stream_default_params();
    sp.first_tokens = p->stream_first_tokens;
    sp.chunk_tokens = p->stream_chunk_tokens;
    if (sp.max_chunk_tokens < sp.chunk_tokens) sp.max_chunk_tokens = sp.chunk_tokens;
    sp.noise_frames = 2 * (p->max_tokens + ENGINE_N_SIL); /* a bound known before T3 starts */
    sp.n_cfm_steps = p->cfm_steps > 0 ? p->cfm_steps : variant_get(m->variant)->cfm_steps;
    sp.seed = engine_seed(p->seed, i, 0); /* the seed T3 uses (no retries) */
    sp.bf16 = use_bf16(m, p);
    sp.first_prompt_tokens = p->stream_first_prompt_tokens;
    sp.context_tokens = p->stream_context_tokens;
    sp.ws = work_s3(p->work, be); /* not S3Gen's whole-utterance call's while streaming */
    struct s3gen_ref ref = {voice->prompt_token, voice->n_prompt_token, voice->prompt_feat, voice->n_prompt_feat,
                            voice->embedding};
    const int64_t k = p->stream_prompt_tokens;
    if (k > 0 && k < ref.n_prompt_token && ref.n_prompt_feat == 2 * ref.n_prompt_token) {
        /* the last k tokens of the reference, the speech right before ours */
        ref.prompt_token += ref.n_prompt_token - k;
        ref.prompt_feat += 2 * (ref.n_prompt_token - k) * S3GEN_MEL_CHANNELS;
        ref.n_prompt_token = k;
        ref.n_prompt_feat = 2 * k;
    }
    int32_t *speech = NULL;
    int64_t n_speech = 0;
    uint64_t seed = sp.seed;
    const struct variant *vr = variant_get(m->variant);
    o->hold = vr->trim_last_token ? ENGINE_SAMPLES_PER_TOKEN : 0;
    cbx_status rc = stream_create(&m->s3, be, &ref, &sp, on_stream_audio, o, &r->stream, err);
    if (rc != CBX_OK) return rc;
    r->stream_rc = CBX_OK;
    r->n_pushed = 0;
    rc = segment_tokens(m, be, pfx, seg, i, &q, r, st, &speech, &n_speech, &seed, err);
    const struct stream_stats *ss = stream_get_stats(r->stream);
    st->t_t3 -= ss->t_flow + ss->t_hift; /* S3Gen ran inside T3's callback */
    if (rc == CBX_ERR_CANCELLED && r->stream_rc != CBX_OK) {
        rc = r->stream_rc;
        err_setf(err, rc, "%s", o->rc != CBX_OK ? o->err : r->stream_err);
    }
    if (rc == CBX_OK) {
        st->n_speech_tokens += n_speech;
        r->pr.total_tokens = st->n_speech_tokens;
        r->pr.stage = ENGINE_STAGE_S3GEN;
        if (r->progress && r->progress(r->user, &r->pr)) rc = err_setf(err, CBX_ERR_CANCELLED, "cancelled");
    }
    if (rc == CBX_OK) {
        /* tts_turbo.py: torch.cat([speech_tokens, S3GEN_SIL x 3]), at the true end only */
        rc = stream_finish(r->stream, vr->silence, vr->n_silence, err);
        if (rc == CBX_ERR_CANCELLED && o->rc != CBX_OK) rc = err_setf(err, o->rc, "%s", o->err);
    }
    if (rc == CBX_OK && o->hold > 0) {
        /* the held tail, as far as the cut keeps it */
        int64_t keep = trim_samples(vr, r->n_pushed + vr->n_silence) - o->emitted;
        if (keep > o->n_tail) keep = o->n_tail;
        if (keep > 0 && out_samples(o, o->tail, keep))
            rc = o->rc != CBX_OK ? err_setf(err, o->rc, "%s", o->err) : err_setf(err, CBX_ERR_CANCELLED, "cancelled");
        o->n_tail = 0;
    }
    st->t_s3gen += ss->t_flow + ss->t_hift;
    stream_free(r->stream);
    r->stream = NULL;
    free(speech);
    return rc;
}

/* The voice with p->exaggeration as its emotion_adv (T3's conditioning,
 * and so its prefix, change; upstream rebuilds T3Cond likewise), in *tmp;
 * or the voice itself. */
static const struct conds *with_exaggeration(const struct engine_model *m, const struct conds *voice,
                                             const struct engine_params *p, struct conds *tmp)
{
    if (!(p->exaggeration >= 0) || !t3_has_emotion(&m->t3)) return voice;
    *tmp = *voice; /* borrowed arrays, not owned */
    tmp->emotion_adv = (float)p->exaggeration;
    return tmp;
}

cbx_status engine_tokens(const struct engine_model *m, const struct backend *be,
                         const struct conds *voice, const char *text, const struct engine_params *p,
                         engine_progress_fn progress, void *user, int32_t **tokens, int64_t *n,
                         char *err)
{
    *tokens = NULL;
    *n = 0;
    if (!p) return err_setf(err, CBX_ERR_INVALID_ARG, "no parameters");
    if (!text && !p->text_ids) return err_setf(err, CBX_ERR_INVALID_ARG, "no text given");
    cbx_status rc = check_backend(m, be, err);
    if (rc == CBX_OK) rc = resolve_voice(m, &voice, err);
    if (rc != CBX_OK) return rc;
    struct conds tmp;
    voice = with_exaggeration(m, voice, p, &tmp);
    struct engine_stats st;
    memset(&st, 0, sizeof st);
    struct prefix_cache_ent *pe = NULL;
    rc = prefix_acquire(m, be, voice, &pe, &st.prefix_source, &st.t_t3_prefix, st.prefix_note, err);
    if (rc != CBX_OK) return rc;
    struct engine_params q = *p;
    q.max_retries = 0;
    struct run r = {progress, user, {ENGINE_STAGE_T3, 0, 1, 0, 0, p->max_tokens, 0}, 0, NULL, 0, CBX_OK, ""};
    uint64_t seed = p->seed;
    rc = segment_tokens(m, be, prefix_cache_prefix(pe), text ? text : "", 0, &q, &r, &st, tokens, n, &seed, err);
    if (rc == CBX_OK) prefix_cache_persist(m->pc, pe, st.prefix_note);
    prefix_cache_release(m->pc, pe);
    return rc;
}

cbx_status engine_synthesize(const struct engine_model *m, const struct backend *be,
                             const struct conds *voice, const char *text,
                             const struct engine_params *p, engine_chunk_fn chunk,
                             engine_progress_fn progress, void *user, float **pcm, int64_t *n,
                             struct engine_stats *st, char *err)
{
    struct engine_stats st_local;
    if (!st) st = &st_local;
    memset(st, 0, sizeof *st);
    if (pcm) *pcm = NULL;
    if (n) *n = 0;
    cbx_status brc = check_backend(m, be, err);
    if (brc != CBX_OK) return brc;
    if (!m->has_s3gen) return err_setf(err, CBX_ERR_INVALID_ARG, "the model was loaded without S3Gen (t3_only)");
    struct engine_params dp = engine_model_default_params(m);
    if (!p) p = &dp;
    st->s3gen_bf16 = use_bf16(m, p);
    if (!text && !p->text_ids) return err_setf(err, CBX_ERR_INVALID_ARG, "no text given");
    if (p->text_ids && p->n_text_ids < 1) return err_setf(err, CBX_ERR_INVALID_ARG, "no text ids given");
    if (p->language && !variant_get(m->variant)->languages)
        return err_setf(err, CBX_ERR_INVALID_ARG, "the %s model speaks one language (language '%s' given)",
                        variant_get(m->variant)->name, p->language);
    if (!(p->cfg_weight >= 0 && p->cfg_weight <= 100) || !(p->exaggeration <= 100) || !(p->s.min_p >= 0 && p->s.min_p <= 1))
        return err_setf(err, CBX_ERR_INVALID_ARG, "bad parameters (cfg_weight 0..100, exaggeration <= 100, min_p in [0, 1])");
    if (p->max_tokens < 1 || p->max_tokens > 100000 || p->pause_ms < 0 || p->pause_ms > 60000 ||
        p->max_retries < 0 || p->max_retries > 16 || p->stream_prompt_tokens < 0 ||
        p->stream_first_prompt_tokens < 0 || p->stream_context_tokens < 0 ||
        p->precision < ENGINE_PREC_AUTO || p->precision > ENGINE_PREC_BF16 ||
        !(p->s.top_p >= 0 && p->s.top_p <= 1) || !(p->s.temperature >= 0) || p->s.top_k < 0 ||
        !(p->s.repetition_penalty > 0))
        return err_setf(err, CBX_ERR_INVALID_ARG,
                        "bad parameters (max_tokens 1..100000, pause_ms 0..60000, max_retries 0..16, "
                        "stream_prompt_tokens >= 0, stream_first_prompt_tokens >= 0, stream_context_tokens >= 0, precision 0..2, top_p in [0, 1], temperature >= 0, top_k >= 0, "
                        "repetition_penalty > 0)");
    cbx_status rc = resolve_voice(m, &voice, err);
    if (rc != CBX_OK) return rc;
    struct conds tmp;
    voice = with_exaggeration(m, voice, p, &tmp);
    /* without the caller's working memory, one for this call: its
     * segments and stages then share their blocks (engine_work) */
    struct engine_params own_p;
    struct engine_work *own_work = NULL;
    if (!p->work && (own_work = engine_work_create())) {
        own_p = *p;
        own_p.work = own_work;
        p = &own_p;
    }

    /* A streamed call's work is urgent on the pool until its first audio
     * (threadpool.h, tp_set_urgent): with several calls on one pool (a
     * server's requests), one that has nothing to play yet goes ahead of
     * the others' later chunks instead of sharing the cores op by op with
     * them. CBX_URGENT_FIRST=0 in the environment turns this off (to
     * measure). */
    const bool was_urgent = tp_urgent();
    const char *uv = getenv("CBX_URGENT_FIRST");
    if (p->stream && !(uv && strcmp(uv, "0") == 0)) tp_set_urgent(true);
    const double t_start = now();
    struct engine_segments S = {0};
    float *all = NULL;
    int64_t n_all = 0, cap = 0;
    int32_t *speech = NULL;
    float *wav = NULL;
    struct prefix_cache_ent *pe = NULL; /* the voice's T3 prefix, shared by the segments */
    if (!p->text_ids && !engine_has_word(text)) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG, text[strspn(text, " \t\r\n")] ? "the text has nothing to speak (no letters or digits)" : "the text is empty");
        goto cleanup;
    }
    double t0 = now();
    if (p->split && !p->text_ids) {
        rc = engine_split(m->tok, text, p->language, p->max_segment_tokens, &S, err);
    } else {
        if ((S.text = malloc(sizeof *S.text)) && (S.text[0] = strdup(p->text_ids ? "" : text))) S.n = 1;
        else rc = err_setf(err, CBX_ERR_NOMEM, "out of memory");
    }
    st->t_text += now() - t0;
    if (rc != CBX_OK) goto cleanup;
    if (S.n == 0) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "the text has nothing to speak (no letters or digits)");
        goto cleanup;
    }
    st->n_segments = S.n;
    rc = prefix_acquire(m, be, voice, &pe, &st->prefix_source, &st->t_t3_prefix, st->prefix_note, err);
    if (rc != CBX_OK) goto cleanup;
    st->prefix_cached = st->prefix_source == ENGINE_PREFIX_MEMORY;
    st->t_t3 += st->t_t3_prefix;
    struct run r = {progress, user, {ENGINE_STAGE_T3, 0, S.n, 0, 0, p->max_tokens, 0}, 0, NULL, 0, CBX_OK, ""};
    const int64_t pause = (int64_t)p->pause_ms * ENGINE_SAMPLE_RATE / 1000;
    for (int i = 0; i < S.n; i++) {
        r.pr.segment = i;
        if (p->stream) { /* pipeline/stream.h */
            struct stream_out o = {chunk, user, &all, &n_all, &cap, pcm != NULL, i > 0 ? pause : 0,
                                   st, t_start, CBX_OK, "", 0, 0, 0, {0}};
            if ((rc = stream_segment(m, be, voice, prefix_cache_prefix(pe), S.text[i], i, p, &r, st, &o, err)) != CBX_OK)
                goto cleanup;
            continue;
        }
        int64_t n_speech = 0, n_wav = 0;
        uint64_t seed = p->seed;
        rc = segment_tokens(m, be, prefix_cache_prefix(pe), S.text[i], i, p, &r, st, &speech, &n_speech, &seed, err);
        if (rc != CBX_OK) goto cleanup;
        st->n_speech_tokens += n_speech;
        r.pr.total_tokens = st->n_speech_tokens;
        /* tts_turbo.py: torch.cat([speech_tokens, S3GEN_SIL x 3]) */
        const struct variant *vr = variant_get(m->variant);
        for (int k = 0; k < vr->n_silence; k++) speech[n_speech + k] = vr->silence[k];
        r.pr.stage = ENGINE_STAGE_S3GEN;
        if (progress && progress(user, &r.pr)) {
            rc = err_setf(err, CBX_ERR_CANCELLED, "cancelled");
            goto cleanup;
        }
        struct s3gen_params sp = s3gen_default_params();
        sp.n_cfm_steps = p->cfm_steps > 0 ? p->cfm_steps : vr->cfm_steps;
        sp.seed = seed;
        sp.bf16 = use_bf16(m, p);
        sp.cb = on_cfm_step;
        sp.user = &r;
        t0 = now();
        sp.ws = work_s3(p->work, be);
        rc = s3gen_vocode(&m->s3, be, speech, n_speech + vr->n_silence, voice, &sp, &wav, &n_wav, err);
        st->t_s3gen += now() - t0;
        free(speech);
        speech = NULL;
        if (rc != CBX_OK) {
            if (rc == CBX_ERR_CANCELLED) err_setf(err, rc, "cancelled");
            goto cleanup;
        }
        const int64_t keep = trim_samples(vr, n_speech + vr->n_silence);
        if (keep >= 0 && n_wav > keep) n_wav = keep;
        /* the chunk: pause (between segments) + this segment's audio */
        const int64_t start = n_all;
        if (i > 0 && (rc = append(&all, &n_all, &cap, NULL, pause, err)) != CBX_OK) goto cleanup;
        if ((rc = append(&all, &n_all, &cap, wav, n_wav, err)) != CBX_OK) goto cleanup;
        st->n_samples += n_all - start;
        free(wav);
        wav = NULL;
        if (chunk && chunk(user, all + start, n_all - start, ENGINE_SAMPLE_RATE)) {
            rc = err_setf(err, CBX_ERR_CANCELLED, "cancelled");
            goto cleanup;
        }
        /* without a whole-audio result, keep only the current chunk */
        if (!pcm) n_all = 0;
    }
    r.pr.stage = ENGINE_STAGE_DONE;
    if (progress) progress(user, &r.pr);
    st->n_t3_steps = r.steps;
    if (pcm) {
        *pcm = all;
        all = NULL;
        if (n) *n = n_all;
    }
cleanup:
    st->t_total = now() - t_start;
    st->audio_seconds = (double)st->n_samples / ENGINE_SAMPLE_RATE;
    free(wav);
    free(speech);
    free(all);
    if (rc == CBX_OK) st->prefix_saved = prefix_cache_persist(m->pc, pe, st->prefix_note);
    prefix_cache_release(m->pc, pe);
    engine_segments_free(&S);
    engine_work_free(own_work);
    tp_set_urgent(was_urgent);
    return rc;
}
