/* bench_e2e.c - a model end to end (any variant: the variant's
 * T3 policy, CFG pair included, text wrapping, post-filter and silence
 * tail from its row) for a fixed ~10 s utterance, per weight
 * type (F32, Q8_0, Q4_0): load time, T3 time, S3Gen time, generation
 * real-time factor and peak RSS, with Q8_0/Q4_0 as ratios to F32 from the
 * same run.
 *
 *   bench_e2e --model DIR|GGUF [--tokens N] [--threads N] [--reps N] [--filter q4_0]
 *             [--backend cpu|cuda]
 *
 * --backend: where weights and computation go (default cpu); a record's
 * type is then "<type>@<backend>" for any backend but cpu.
 *
 * A directory is loaded once per type with the linear weights converted to
 * that type at load (so its load time includes the conversion); a .gguf is
 * measured as stored (one type, the file's). The workload is fixed so that
 * synthetic weights give a stable one: T3 decodes greedily up to N speech
 * tokens (default 250 = 10 s at 25 tokens/s) after the prompt of the
 * built-in voice and a fixed sentence; should it stop early, its time is
 * scaled to N tokens (reported: the tokens T3 decoded, counted before the
 * variant's post-filter, which drops some of them: the time is that of the
 * decode steps run, whatever became of their tokens). S3Gen then
 * vocodes exactly N tokens (T3's, repeated) + the variant's silence tail
 * (Turbo: 3 tokens), as `say` does. One untimed warm-up (8 T3 tokens, N through S3Gen) precedes the
 * timed repetitions.
 *
 * T3 cold vs warm (pipeline/engine.h, "Voice prefix cache"): cold is
 * t3_inference_turbo, which computes the voice prefix (speaker + 375
 * prompt positions) before the text; warm is t3_inference_turbo_prefixed
 * with that prefix built once beforehand, as the engine does from the
 * second utterance in a voice on. Both are timed in every repetition, with
 * their prefill (call -> first token) separately; their tokens must be
 * identical (checked). e2e_rtf uses the cold T3 time, e2e_rtf_warm the warm
 * one. Peak RSS is the process high-water mark (VmHWM), reset per
 * type through /proc/self/clear_refs.
 *
 * T3 and S3Gen run in memory as the engine keeps it (engine_work: T3's
 * workspace and S3Gen's arena, taking blocks in turn from one pool, kept
 * across calls). S3Gen runs as the engine runs it, with BF16 products for quantised weights (s3gen_default_bf16); each
 * repetition also times it with the other precision (e2e_s3gen_other,
 * ratio to the default).
 *
 * Real-time factor = (T3 time + S3Gen time) / audio seconds (lower is
 * faster; < 1 is faster than real time). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "core/backend.h"
#include "io/model_file.h"
#include "pipeline/engine.h"
#include "s3gen/s3gen.h"
#include "t3/t3.h"
#include "text/tokenizer.h"
#include "text/punc_norm.h"
#include "voice/conds.h"

#define TEXT "The quick brown fox jumps over the lazy dog, and then, after a short rest in the warm " \
             "afternoon sun, it runs back across the green field to its den by the old river."

static double vm_hwm_mib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = atof(line + 6);
    if (f) fclose(f);
    return kb / 1024.0;
}

static void reset_hwm(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

static cbx_status load_tokens(const struct model *m, int32_t **ids, int64_t *n, char *err)
{
    struct text_tokenizer *tok = NULL;
    cbx_status rc = text_tokenizer_load_model(m, &tok, err);
    if (rc == CBX_OK) rc = text_tokenizer_encode(tok, TEXT, ids, n, err);
    text_tokenizer_free(tok);
    return rc;
}

struct result {
    double load, t3, t3_tokens, s3gen, rtf, rss, t3_warm, pre_cold, pre_warm, prefix, rtf_warm, s3gen_other;
    double audio_s; /* seconds of audio the RTFs divide by */
    bool bf16;
};

/* time of the first token (end of the prefill) */
struct first { double t0, t1; };
static int on_step(void *user, int step, int32_t token, const float *logits, int n_rows, int64_t V)
{
    (void)n_rows;
    (void)token; (void)logits; (void)n_rows; (void)V;
    struct first *f = user;
    if (step == 0) f->t1 = bench_now() - f->t0;
    return 0;
}

/* One type: load (timed through the engine, as `say` loads), then the
 * workload on directly loaded T3/S3Gen. */
static int run_type(const char *path, int wtype, int N, const struct bench_opts *o, struct backend *be,
                    struct result *res)
{
    char err[ERR_MAX] = "";
    double *tl = calloc((size_t)o->reps, sizeof(double)), *t3t = calloc((size_t)o->reps, sizeof(double)),
           *s3t = calloc((size_t)o->reps, sizeof(double)), *t3w = calloc((size_t)o->reps, sizeof(double)),
           *pc = calloc((size_t)o->reps, sizeof(double)), *pw = calloc((size_t)o->reps, sizeof(double)),
           *so = calloc((size_t)o->reps, sizeof(double));
    struct arena *s3ws = NULL;
    struct arena_pool *pool = NULL;
    struct t3_workspace *t3ws = NULL;
    struct t3_prefix *pfx = NULL;
    int32_t *tokw = NULL;
    struct model *m = NULL;
    struct t3_model t3 = {0};
    struct s3gen s3 = {0};
    struct conds voice = {0};
    int32_t *ids = NULL, *tok = NULL, *feed = NULL;
    int64_t n_ids = 0;
    float *pcm = NULL;
    int ok = 0;
    if (!tl || !t3t || !s3t || !t3w || !pc || !pw || !so) {
        snprintf(err, sizeof err, "out of memory");
        goto done;
    }
    reset_hwm();
    struct engine_load_params lp = engine_load_default_params();
    lp.wtype = wtype;
    lp.backend = be->host ? "cpu" : be->name;
    for (int r = 0; r < o->reps; r++) {
        struct engine_model *em = NULL;
        double t0 = bench_now();
        if (engine_model_load(path, &lp, &em, err) != CBX_OK) goto done;
        tl[r] = bench_now() - t0;
        engine_model_free(em);
    }
    if (model_open(path, &m, err) != CBX_OK) goto done;
    if (wtype < 0) wtype = model_stored_wtype(m); /* as the engine loads it */
    struct weights w3 = model_weights(m, MODEL_T3), ws = model_weights(m, MODEL_S3GEN);
    if (t3_load(&t3, &w3, be, (enum dtype)wtype, err) != CBX_OK) goto done;
    if (s3gen_load(&s3, &ws, be, (enum dtype)wtype, err) != CBX_OK) goto done;
    if (conds_from_model(m, &voice, err) != CBX_OK) goto done;
    if (load_tokens(m, &ids, &n_ids, err) != CBX_OK) goto done;
    struct t3_cond cond = {voice.speaker_emb, voice.cond_prompt_tokens, voice.n_cond_prompt, voice.emotion_adv};
    /* the variant's defaults (English: the CFG pair), greedy; its text
     * wrapping, post-filter and silence tail */
    const struct variant *vr = variant_get(model_get_variant(m));
    struct t3_gen_params gp = t3_gen_default_params(&t3);
    gp.s.top_k = 1;
    if (t3.hp.start_text >= 0) {
        int32_t *w = malloc(sizeof(int32_t) * (size_t)(n_ids + 2));
        if (!w) goto done;
        w[0] = t3.hp.start_text;
        memcpy(w + 1, ids, sizeof(int32_t) * (size_t)n_ids);
        w[n_ids + 1] = t3.hp.stop_text;
        free(ids);
        ids = w;
        n_ids += 2;
    }
    struct s3gen_params sp = s3gen_default_params();
    sp.bf16 = s3gen_default_bf16((enum dtype)wtype);
    res->bf16 = sp.bf16;
    /* memory as the engine keeps it (engine_work): T3's workspace and
     * S3Gen's arena take their blocks in turn from one pool */
    if (!(pool = arena_pool_create(be)) || !(s3ws = arena_create(be, 0)) || !(t3ws = t3_workspace_create(be)))
        goto done;
    arena_set_pool(s3ws, pool);
    t3_workspace_set_pool(t3ws, pool);
    sp.ws = s3ws;
    gp.ws = t3ws;
    feed = malloc(sizeof(int32_t) * (size_t)(N + ENGINE_N_SIL));
    if (!feed) goto done;
    double tp0 = bench_now();
    if (t3_prefix_build(&t3, be, &cond, &pfx, err) != CBX_OK) goto done;
    res->prefix = bench_now() - tp0;
    double n_dec = 0;
    for (int r = -1; r < o->reps; r++) {
        const int n_want = r < 0 ? 8 : N; /* warm-up: 8 tokens */
        gp.max_gen_len = t3.order == T3_ORDER_CFG ? n_want : n_want - 1;
        int64_t n = 0, nw = 0;
        struct first fc = {bench_now(), 0}, fw;
        if (t3_inference(&t3, be, &cond, ids, n_ids, &gp, on_step, &fc, &tok, &n, err) != CBX_OK) goto done;
        double tt = bench_now() - fc.t0;
        fw.t0 = bench_now();
        fw.t1 = 0;
        if (t3_inference_prefixed(&t3, be, pfx, ids, n_ids, &gp, on_step, &fw, &tokw, &nw, err) != CBX_OK)
            goto done;
        double tw = bench_now() - fw.t0;
        if (nw != n || memcmp(tok, tokw, sizeof(int32_t) * (size_t)n)) {
            snprintf(err, sizeof err, "T3 with the cached voice prefix gave other tokens (%lld vs %lld)",
                     (long long)nw, (long long)n);
            goto done;
        }
        free(tokw);
        tokw = NULL;
        const int64_t n_steps = n; /* decode steps run (the filter below drops some of their tokens) */
        n = variant_filter_speech(vr, tok, n);
        for (int i = 0; i < n_want; i++) feed[i] = n > 0 ? tok[i % n] : 4299; /* a silence token */
        for (int i = 0; i < vr->n_silence; i++) feed[n_want + i] = vr->silence[i];
        free(tok);
        tok = NULL;
        int64_t n_pcm = 0;
        double t0 = bench_now();
        /* the warm-up vocodes all N tokens too, so that the workspace has
         * its full size before any timed run */
        for (int i = n_want; i < N; i++) feed[i] = feed[i % n_want];
        for (int i = 0; i < vr->n_silence; i++) feed[N + i] = vr->silence[i];
        if (s3gen_vocode(&s3, be, feed, N + vr->n_silence, &voice, &sp, &pcm, &n_pcm, err) != CBX_OK) goto done;
        double ts = bench_now() - t0;
        free(pcm);
        pcm = NULL;
        if (r < 0) continue;
        sp.bf16 = !sp.bf16;
        t0 = bench_now();
        cbx_status rc = s3gen_vocode(&s3, be, feed, N + vr->n_silence, &voice, &sp, &pcm, &n_pcm, err);
        so[r] = bench_now() - t0;
        sp.bf16 = !sp.bf16;
        if (rc != CBX_OK) goto done;
        free(pcm);
        pcm = NULL;
        n_dec = (double)(n_steps > 0 ? n_steps : 1);
        t3t[r] = n_steps < n_want ? tt * n_want / n_dec : tt;
        t3w[r] = n_steps < n_want ? tw * n_want / n_dec : tw;
        pc[r] = fc.t1;
        pw[r] = fw.t1;
        s3t[r] = ts;
    }
    res->load = bench_stats(tl, o->reps).median;
    res->t3 = bench_stats(t3t, o->reps).median;
    res->t3_tokens = n_dec;
    res->s3gen = bench_stats(s3t, o->reps).median;
    res->s3gen_other = bench_stats(so, o->reps).median;
    /* the audio the row's post-processing keeps: N tokens, the silence
     * tail, less the last token's audio where the row cuts it */
    const int n_audio = N + vr->n_silence - (vr->trim_last_token && N + vr->n_silence > 1 ? 1 : 0);
    const double audio_s = (double)n_audio * 960.0 / ENGINE_SAMPLE_RATE;
    res->audio_s = audio_s;
    res->rtf = (res->t3 + res->s3gen) / audio_s;
    res->t3_warm = bench_stats(t3w, o->reps).median;
    res->pre_cold = bench_stats(pc, o->reps).median;
    res->pre_warm = bench_stats(pw, o->reps).median;
    res->rtf_warm = (res->t3_warm + res->s3gen) / audio_s;
    res->rss = vm_hwm_mib();
    ok = 1;
done:
    if (!ok) fprintf(stderr, "bench_e2e: %s\n", err);
    free(pcm);
    free(tok);
    free(tokw);
    t3_prefix_free(pfx);
    free(t3w);
    free(pc);
    free(pw);
    free(feed);
    free(ids);
    conds_free(&voice);
    s3gen_free(&s3);
    t3_free(&t3);
    model_close(m);
    free(tl);
    free(t3t);
    free(s3t);
    free(so);
    arena_free(s3ws);
    t3_workspace_free(t3ws);
    arena_pool_free(pool);
    return ok;
}

int main(int argc, char **argv)
{
    const char *model = bench_take_model(&argc, argv), *v;
    const char *bname = bench_take_opt(&argc, argv, "--backend");
    int N = (v = bench_take_opt(&argc, argv, "--tokens")) ? atoi(v) : 250;
    struct bench_opts opt;
    if (!bench_parse(argc, argv, &opt, 1)) return 2;
    if (!model || N < 8 || N > 4000) {
        fprintf(stderr, "bench_e2e: needs --model DIR|GGUF (or CHATTERBOX_MODEL) and --tokens in [8, 4000]\n");
        return 2;
    }
    const int gguf = bench_model_is_gguf("bench_e2e", model);
    struct backend *be = gguf < 0 ? NULL : bench_backend("bench_e2e", bname, opt.threads);
    if (!be) return 1;
    struct result f32 = {0};
    int have_f32 = 0, wt;
    const char *tname;
    for (size_t it = 0; bench_next_type(&opt, gguf, &it, &wt, &tname);) {
        char name[64];
        bench_type_on(be, tname, name, sizeof name);
        struct result r = {0};
        if (!run_type(model, wt, N, &opt, be, &r)) return 1;
        if (wt == TYPE_F32) { f32 = r; have_f32 = 1; }
        const char *base = have_f32 && wt != TYPE_F32 ? "f32" : NULL;
        bench_emit1("e2e_load", name, N, &opt, "s", r.load, base, f32.load);
        bench_emit1("e2e_t3", name, N, &opt, "s", r.t3, base, f32.t3);
        bench_emit1("e2e_s3gen", name, N, &opt, "s", r.s3gen, base, f32.s3gen);
        bench_emit1("e2e_s3gen_other", name, N, &opt, "s", r.s3gen_other, r.bf16 ? "s3gen_bf16" : "s3gen_f32",
                    r.s3gen);
        bench_emit1("e2e_rtf", name, N, &opt, "x", r.rtf, base, f32.rtf);
        bench_emit1("e2e_t3_warm", name, N, &opt, "s", r.t3_warm, "t3_cold", r.t3);
        bench_emit1("e2e_t3_prefill_cold", name, N, &opt, "s", r.pre_cold, NULL, 0);
        bench_emit1("e2e_t3_prefill_warm", name, N, &opt, "s", r.pre_warm, "prefill_cold", r.pre_cold);
        bench_emit1("e2e_t3_prefix_build", name, N, &opt, "s", r.prefix, NULL, 0);
        bench_emit1("e2e_rtf_warm", name, N, &opt, "x", r.rtf_warm, "rtf_cold", r.rtf);
        bench_emit1("e2e_peak_rss", name, N, &opt, "MiB", r.rss, base, f32.rss);
        fprintf(stderr,
                "e2e %-5s %d tokens (%.1f s audio): load %.2f s | t3 %.2f s (%.1f tok/s, %.0f decoded) | s3gen %.2f s "
                "| RTF %.3f | peak RSS %.0f MiB\n"
                "e2e %-5s t3 cold %.2f s (prefill %.3f s) vs warm %.2f s (prefill %.3f s): x%.2f, prefill x%.1f; "
                "prefix build %.3f s; RTF warm %.3f\n"
                "e2e %-5s s3gen %.2f s with %s products, %.2f s with %s (x%.2f)\n",
                name, N, r.audio_s, r.load, r.t3, N / r.t3, r.t3_tokens, r.s3gen, r.rtf, r.rss,
                name, r.t3, r.pre_cold, r.t3_warm, r.pre_warm, r.t3_warm > 0 ? r.t3 / r.t3_warm : 0,
                r.pre_warm > 0 ? r.pre_cold / r.pre_warm : 0, r.prefix, r.rtf_warm,
                name, r.s3gen, r.bf16 ? "bf16" : "f32", r.s3gen_other, r.bf16 ? "f32" : "bf16",
                r.s3gen > 0 ? r.s3gen_other / r.s3gen : 0);
    }
    backend_free(be);
    return 0;
}
