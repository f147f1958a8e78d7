/* bench_stream.c - streaming synthesis (say --stream) end to end through
 * the engine, per weight type (F32, Q8_0, Q4_0): first-audio latency and
 * its parts, chunk count, and the streamed run's real-time factor, with
 * the whole-utterance run of the same text and parameters from the same
 * invocation as baseline (its first audio is its end).
 *
 *   bench_stream --model DIR|GGUF [--tokens N] [--first-tokens K] [--chunk-tokens C] [--stream-prompt P]
 *                [--first-prompt F] [--context L]
 *                [--threads N] [--reps N] [--filter q4_0] [--backend cpu|cuda]
 *
 * --backend: where weights and computation go (default cpu); a record's
 * type is then "<type>@<backend>" for any backend but cpu.
 *
 * Workload: a fixed sentence with the built-in voice, seed 0, upstream
 * sampling defaults, at most N speech tokens (default 250 = 10 s); the
 * engine's defaults for streaming (first chunk after
 * engine_params.stream_first_tokens tokens, or K, then 20, 40, 80, 80...);
 * --stream-prompt P cuts S3Gen's reference prompt to its last P tokens
 * (engine_params.stream_prompt_tokens; default: the engine's);
 * --context L bounds each chunk's left context to L speech tokens
 * (engine_params.stream_context_tokens; default: the engine's);
 * --first-prompt F does so for the first chunk only
 * (engine_params.stream_first_prompt_tokens; default: the engine's).
 *
 * Cold and warm (pipeline/engine.h, "Voice prefix cache"): each repetition
 * empties the model's voice prefix cache and runs the stream twice: cold
 * (T3 first computes the voice prefix: speaker + prompt positions) and
 * warm (the second utterance in the voice: the prefix comes from the
 * cache); then "stored": the cache emptied again, the prefix comes from
 * the engine's prefix store on disk (engine_load_params.prefix_dir, a
 * temporary directory emptied before each cold run, as a later `say`
 * process finds it); then the whole-utterance baseline (warm). "first call" is the
 * untimed-for-medians warm-up right after loading (12 tokens, streamed):
 * cold prefix plus first touch of every weight page and buffer.
 * First-audio latency is measured from the engine_synthesize call to the
 * first chunk's callback; its parts: T3 prefill (call -> first token,
 * including the prefix when cold), the first chunk's tokens (-> token K),
 * and S3Gen's first chunk (-> first audio). "Playback start" is the
 * earliest time after the call at which a player could start playing the
 * stream and never run dry: max over chunks of (arrival - seconds of audio
 * delivered before it); it is the first audio when every chunk arrives
 * before the audio ahead of it has been played. --chunk-tokens C sets the
 * second chunk's tokens (engine_params.stream_chunk_tokens; later chunks
 * double up to 80). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "core/backend.h"
#include "io/model_file.h"
#include "pipeline/engine.h"

#define TEXT "The quick brown fox jumps over the lazy dog, and then, after a short rest in the warm " \
             "afternoon sun, it runs back across the green field to its den by the old river."

struct probe {
    double t0, t_tok1, t_tokf, t_audio;
    double played; /* seconds of audio delivered so far */
    double t_play; /* the earliest playback start that never runs dry */
    int first_tokens;
};

static int on_progress(void *user, const struct engine_progress *p)
{
    struct probe *b = user;
    if (p->stage == ENGINE_STAGE_T3 && p->segment == 0) {
        if (p->tokens == 1 && !b->t_tok1) b->t_tok1 = bench_now() - b->t0;
        if (p->tokens == b->first_tokens && !b->t_tokf) b->t_tokf = bench_now() - b->t0;
    }
    return 0;
}

static int on_chunk(void *user, const float *pcm, int64_t n, int sr)
{
    (void)pcm;
    struct probe *b = user;
    const double t = bench_now() - b->t0;
    if (!b->t_audio) b->t_audio = t;
    /* a player starting at P plays audio second s at P + s: this chunk
     * must arrive before the audio delivered so far has been played */
    if (t - b->played > b->t_play) b->t_play = t - b->played;
    b->played += (double)n / sr;
    return 0;
}

/* first audio and its parts */
struct first { double first, prefill, tokens, s3first, prefix, play; };

struct result {
    struct first cold, warm, stored, call1;
    double total, rtf, whole, whole_rtf, audio;
    int chunks;
    int64_t speech;
};

enum { V_FIRST, V_PREFILL, V_TOKENS, V_S3, V_PREFIX, V_PLAY, NV_FIRST };

static void put(double **v, int r, const struct probe *b, const struct engine_stats *st)
{
    v[V_FIRST][r] = b->t_audio;
    v[V_PREFILL][r] = b->t_tok1;
    v[V_TOKENS][r] = b->t_tokf - b->t_tok1;
    v[V_S3][r] = b->t_audio - b->t_tokf;
    v[V_PREFIX][r] = st->t_t3_prefix;
    v[V_PLAY][r] = b->t_play;
}

static struct first medians(double **v, int R)
{
    struct first f = {bench_stats(v[V_FIRST], R).median, bench_stats(v[V_PREFILL], R).median,
                      bench_stats(v[V_TOKENS], R).median, bench_stats(v[V_S3], R).median,
                      bench_stats(v[V_PREFIX], R).median, bench_stats(v[V_PLAY], R).median};
    return f;
}

/* remove every file of dir (the prefix store) */
static void empty_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') unlinkat(dirfd(d), e->d_name, 0);
    if (d) closedir(d);
}

static int run_type(const char *path, int wtype, int N, int K, int C, int P, int FP, int LC, const struct bench_opts *o,
                    struct backend *be, struct result *res)
{
    char err[ERR_MAX] = "";
    struct engine_model *m = NULL;
    const int R = o->reps;
    double *v[3 * NV_FIRST + 3];
    for (int i = 0; i < 3 * NV_FIRST + 3; i++) v[i] = calloc((size_t)R, sizeof(double));
    double **vc = v, **vw = v + NV_FIRST, **vs = v + 2 * NV_FIRST, *tot = v[3 * NV_FIRST],
           *whole = v[3 * NV_FIRST + 1], *waud = v[3 * NV_FIRST + 2];
    int ok = 0;
    char store[] = "/tmp/bench_stream_prefix_XXXXXX";
    if (!mkdtemp(store)) {
        snprintf(err, sizeof err, "cannot make a temporary directory");
        goto done;
    }
    struct engine_load_params lp = engine_load_default_params();
    lp.wtype = wtype;
    lp.prefix_dir = store;
    lp.backend = be->host ? "cpu" : be->name;
    if (engine_model_load(path, &lp, &m, err) != CBX_OK) goto done;
    struct engine_params p = engine_default_params();
    p.split = false;
    if (K > 0) p.stream_first_tokens = K;
    if (C > 0) p.stream_chunk_tokens = C;
    if (P >= 0) p.stream_prompt_tokens = P;
    if (FP >= 0) p.stream_first_prompt_tokens = FP;
    if (LC >= 0) p.stream_context_tokens = LC;
    for (int r = -1; r < R; r++) {
        /* warm: 0 cold, 1 from the cache, 2 from the store */
        for (int warm = 0; warm < 3; warm++) {
            if (r < 0 && warm) break;
            struct probe b = {0, 0, 0, 0, 0, 0, p.stream_first_tokens};
            struct engine_stats st;
            p.stream = true;
            p.max_tokens = r < 0 ? 12 : N;
            if (warm != 1) engine_voice_cache_clear(m);
            if (!warm) empty_dir(store);
            b.t0 = bench_now();
            if (engine_synthesize(m, be, NULL, TEXT, &p, on_chunk, on_progress, &b, NULL, NULL, &st, err) != CBX_OK)
                goto done;
            static const int want[3] = {ENGINE_PREFIX_BUILT, ENGINE_PREFIX_MEMORY, ENGINE_PREFIX_DISK};
            if (st.prefix_source != want[warm]) {
                snprintf(err, sizeof err, "voice prefix from source %d on the %s run (%.200s)", st.prefix_source,
                         warm == 2 ? "stored" : warm ? "warm" : "cold", st.prefix_note);
                goto done;
            }
            if (r < 0) {
                res->call1 = (struct first){b.t_audio, b.t_tok1, b.t_tokf - b.t_tok1, b.t_audio - b.t_tokf,
                                            st.t_t3_prefix, b.t_play};
                continue;
            }
            put(warm == 2 ? vs : warm ? vw : vc, r, &b, &st);
            if (warm != 1) continue;
            tot[r] = st.t_total;
            res->chunks = st.n_chunks;
            res->speech = st.n_speech_tokens;
            res->audio = st.audio_seconds;
        }
        if (r < 0) continue;
        /* the baseline: the same utterance, not streamed */
        struct engine_stats st;
        p.stream = false;
        p.max_retries = 0;
        if (engine_synthesize(m, be, NULL, TEXT, &p, NULL, NULL, NULL, NULL, NULL, &st, err) != CBX_OK) goto done;
        whole[r] = st.t_total;
        waud[r] = st.audio_seconds;
    }
    res->cold = medians(vc, R);
    res->warm = medians(vw, R);
    res->stored = medians(vs, R);
    res->total = bench_stats(tot, R).median;
    res->whole = bench_stats(whole, R).median;
    res->rtf = res->audio > 0 ? res->total / res->audio : 0;
    const double wa = bench_stats(waud, R).median;
    res->whole_rtf = wa > 0 ? res->whole / wa : 0;
    ok = 1;
done:
    if (!ok) fprintf(stderr, "bench_stream: %s\n", err);
    engine_model_free(m);
    empty_dir(store);
    rmdir(store);
    for (int i = 0; i < 3 * NV_FIRST + 3; i++) free(v[i]);
    return ok;
}

int main(int argc, char **argv)
{
    const char *model = bench_take_model(&argc, argv), *v;
    const char *bname = bench_take_opt(&argc, argv, "--backend");
    int N = (v = bench_take_opt(&argc, argv, "--tokens")) ? atoi(v) : 250;
    int K = (v = bench_take_opt(&argc, argv, "--first-tokens")) ? atoi(v) : 0;
    int C = (v = bench_take_opt(&argc, argv, "--chunk-tokens")) ? atoi(v) : 0;
    int P = (v = bench_take_opt(&argc, argv, "--stream-prompt")) ? atoi(v) : -1;
    int LC = (v = bench_take_opt(&argc, argv, "--context")) ? atoi(v) : -1;
    int FP = (v = bench_take_opt(&argc, argv, "--first-prompt")) ? atoi(v) : -1;
    struct bench_opts opt;
    if (!bench_parse(argc, argv, &opt, 1)) return 2;
    if (!model || N < 12 || N > 4000) {
        fprintf(stderr, "bench_stream: needs --model DIR|GGUF (or CHATTERBOX_MODEL) and --tokens in [12, 4000]\n");
        return 2;
    }
    const int gguf = bench_model_is_gguf("bench_stream", model);
    struct backend *be = gguf < 0 ? NULL : bench_backend("bench_stream", bname, opt.threads);
    if (!be) return 1;
    int wt;
    const char *tname;
    for (size_t it = 0; bench_next_type(&opt, gguf, &it, &wt, &tname);) {
        char name[64];
        bench_type_on(be, tname, name, sizeof name);
        struct result r = {0};
        if (!run_type(model, wt, N, K, C, P, FP, LC, &opt, be, &r)) {
            backend_free(be);
            return 1;
        }
        bench_emit1("stream_first_audio", name, N, &opt, "s", r.warm.first, "whole_utterance", r.whole);
        bench_emit1("stream_first_audio_cold", name, N, &opt, "s", r.cold.first, "warm", r.warm.first);
        bench_emit1("stream_first_audio_stored", name, N, &opt, "s", r.stored.first, "cold", r.cold.first);
        bench_emit1("stream_first_audio_first_call", name, N, &opt, "s", r.call1.first, NULL, 0);
        bench_emit1("stream_t3_prefill", name, N, &opt, "s", r.warm.prefill, "cold", r.cold.prefill);
        bench_emit1("stream_t3_prefix_build", name, N, &opt, "s", r.cold.prefix, NULL, 0);
        bench_emit1("stream_first_tokens", name, N, &opt, "s", r.warm.tokens, NULL, 0);
        bench_emit1("stream_s3gen_first_chunk", name, N, &opt, "s", r.warm.s3first, NULL, 0);
        bench_emit1("stream_rtf", name, N, &opt, "x", r.rtf, "whole_rtf", r.whole_rtf);
        bench_emit1("stream_playback_start", name, N, &opt, "s", r.warm.play, "first_audio", r.warm.first);
        bench_emit1("stream_playback_start_cold", name, N, &opt, "s", r.cold.play, "first_audio_cold", r.cold.first);
        const struct first *f[4] = {&r.call1, &r.cold, &r.stored, &r.warm};
        static const char *const what[4] = {"first call", "cold", "stored", "warm"};
        for (int k = 0; k < 4; k++)
            fprintf(stderr,
                    "stream %-5s %-10s first audio %5.0f ms = prefill %5.0f (voice prefix %4.0f) + %d tokens %4.0f + "
                    "s3gen chunk %5.0f; playback start %5.0f\n",
                    name, what[k], 1000 * f[k]->first, 1000 * f[k]->prefill, 1000 * f[k]->prefix,
                    K > 0 ? K : engine_default_params().stream_first_tokens, 1000 * f[k]->tokens,
                    1000 * f[k]->s3first, 1000 * f[k]->play);
        fprintf(stderr, "stream %-5s %lld tokens (%.1f s audio, %d chunks): stream total %.2f s (RTF %.3f) vs whole "
                "%.2f s (RTF %.3f)\n",
                name, (long long)r.speech, r.audio, r.chunks, r.total, r.rtf, r.whole, r.whole_rtf);
    }
    backend_free(be);
    return 0;
}
