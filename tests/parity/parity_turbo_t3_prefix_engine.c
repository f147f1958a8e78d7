/* parity_turbo_t3_prefix_engine.c - the engine's voice prefix cache
 * (pipeline/engine.h, "Voice prefix cache") on the synthetic Turbo
 * directory:
 *   - the first call in a voice builds the prefix (t_t3_prefix > 0,
 *     prefix_cached false), the next calls in that voice reuse it, and the
 *     audio of a cached call is bit-identical to the cold call's (greedy
 *     and sampled, whole and streamed);
 *   - voices are matched by content: a copy of the built-in voice at
 *     another address hits, a changed speaker embedding misses;
 *   - with a one-entry cache the least recently used voice is dropped;
 *     engine_prepare_voice fills the cache ahead of a call; voice_cache
 *     < 0 never keeps one between calls (and still gives the same audio);
 *   - engine_params.stream_prompt_tokens: a stream on a cut S3Gen prompt
 *     has the same length, is deterministic and differs from the whole
 *     prompt's (it is used).
 * Workload: a few speech tokens per call (the cache is what is tested). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "pipeline/engine.h"
#include "testutil.h"

struct out { float *pcm; int64_t n; struct engine_stats st; };

static int stream_prompt; /* engine_params.stream_prompt_tokens */

static bool say(const struct engine_model *m, const struct backend *be, const struct conds *v, const char *text,
                bool greedy, bool stream, struct out *o)
{
    char err[ERR_MAX] = "";
    struct engine_params p = engine_default_params();
    p.max_tokens = 6;
    p.max_retries = 0;
    p.seed = 7;
    p.stream = stream;
    p.stream_first_tokens = 8;
    p.stream_prompt_tokens = stream_prompt;
    if (greedy) p.s.top_k = 1;
    cbx_status rc = engine_synthesize(m, be, v, text, &p, NULL, NULL, NULL, &o->pcm, &o->n, &o->st, err);
    CHECK(rc == CBX_OK && o->n > 0, "engine_synthesize: %s", err);
    return rc == CBX_OK;
}

/* cold then warm: the flags and the audio */
static void pair(const char *what, const struct out *cold, const struct out *warm)
{
    double d = 0;
    const bool same_n = cold->n == warm->n;
    for (int64_t i = 0; same_n && i < cold->n; i++) d = fmax(d, fabs((double)cold->pcm[i] - warm->pcm[i]));
    printf("%-40s cold: prefix built in %.3f s (cached %d) | warm: %.3f s (cached %d) | T3 %.3f -> %.3f s | "
           "%lld vs %lld samples, max abs diff %.3e\n",
           what, cold->st.t_t3_prefix, cold->st.prefix_cached, warm->st.t_t3_prefix, warm->st.prefix_cached,
           cold->st.t_t3, warm->st.t_t3, (long long)cold->n, (long long)warm->n, d);
    CHECK(!cold->st.prefix_cached && cold->st.t_t3_prefix > 0, "%s: the cold call builds the prefix", what);
    CHECK(warm->st.prefix_cached && warm->st.t_t3_prefix == 0, "%s: the warm call reuses it", what);
    CHECK(same_n && d == 0, "%s: cached audio differs from the cold call's (%.3e)", what, d);
}

static void out_free(struct out *o)
{
    free(o->pcm);
    memset(o, 0, sizeof *o);
}

int main(void)
{
    char err[ERR_MAX] = "", dir[512];
    snprintf(dir, sizeof dir, "%s/models/turbo", CBX_BINARY_DIR);
    struct engine_model *m = NULL, *m0 = NULL;
    struct engine_load_params lp = engine_load_default_params();
    lp.backend = test_backend_name();
    lp.voice_cache = 1;
    cbx_status rc = engine_model_load(dir, &lp, &m, err);
    CHECK(rc == CBX_OK, "load %s: %s", dir, err);
    if (rc != CBX_OK) return test_summary();
    struct backend *be = test_compute_backend(0);
    const struct conds *builtin = engine_model_voice(m);
    CHECK(builtin != NULL, "built-in voice");
    if (!builtin) return test_summary();

    /* a copy at another address (same content), and another speaker */
    struct conds copy = *builtin, other = *builtin;
    float *spk = malloc(sizeof(float) * (size_t)builtin->n_speaker);
    memcpy(spk, builtin->speaker_emb, sizeof(float) * (size_t)builtin->n_speaker);
    spk[0] += 0.5f;
    other.speaker_emb = spk;
    int32_t *pt = malloc(sizeof(int32_t) * (size_t)(builtin->n_cond_prompt + 1));
    memcpy(pt, builtin->cond_prompt_tokens, sizeof(int32_t) * (size_t)builtin->n_cond_prompt);
    copy.cond_prompt_tokens = pt;

    struct out a = {0}, b = {0}, c = {0};
    if (say(m, be, NULL, "Hello there.", true, false, &a) && say(m, be, NULL, "Hello there.", true, false, &b))
        pair("greedy, whole", &a, &b);
    out_free(&a);
    out_free(&b);
    if (say(m, be, &copy, "Hello there.", false, false, &b)) {
        printf("copy of the built-in voice at another address: cached %d\n", b.st.prefix_cached);
        CHECK(b.st.prefix_cached, "a voice with the same content hits");
    }
    out_free(&b);
    /* the other voice pushes the built-in one out of the one-entry cache */
    if (say(m, be, &other, "Hello there.", false, false, &a) && say(m, be, &other, "Hello there.", false, false, &b))
        pair("other speaker, sampled", &a, &b);
    out_free(&a);
    out_free(&b);
    if (say(m, be, NULL, "Hello there.", false, true, &a) && say(m, be, NULL, "Hello there.", false, true, &b))
        pair("built-in again (evicted), streamed", &a, &b);
    out_free(&b);
    /* the S3Gen prompt cut to its last 20 tokens */
    stream_prompt = 20;
    if (say(m, be, NULL, "Hello there.", false, true, &b) && say(m, be, NULL, "Hello there.", false, true, &c)) {
        const bool same = b.n == c.n && !memcmp(b.pcm, c.pcm, sizeof(float) * (size_t)b.n);
        double d = 0;
        for (int64_t i = 0; b.n == a.n && i < a.n; i++) d = fmax(d, fabs((double)a.pcm[i] - b.pcm[i]));
        printf("stream_prompt_tokens 20: %lld samples (whole prompt %lld), repeat %s, max abs diff to the whole "
               "prompt's %.3e, S3Gen %.3f s vs %.3f s\n",
               (long long)b.n, (long long)a.n, same ? "identical" : "DIFFERS", d, b.st.t_s3gen, a.st.t_s3gen);
        CHECK(b.n == a.n && same && d > 0, "stream_prompt_tokens: same length, deterministic, used");
    }
    stream_prompt = 0;
    out_free(&b);
    out_free(&c);
    /* engine_prepare_voice, then a streamed call of the same text: as before */
    rc = engine_prepare_voice(m, be, &other, err);
    CHECK(rc == CBX_OK, "engine_prepare_voice: %s", err);
    if (say(m, be, &other, "Hello there.", false, false, &c)) {
        printf("after engine_prepare_voice: cached %d\n", c.st.prefix_cached);
        CHECK(c.st.prefix_cached, "engine_prepare_voice fills the cache");
    }
    out_free(&c);

    /* no cache between calls: never cached, same audio as the cached model */
    lp.voice_cache = -1;
    rc = engine_model_load(dir, &lp, &m0, err);
    CHECK(rc == CBX_OK, "load without cache: %s", err);
    if (rc == CBX_OK) {
        if (say(m0, be, NULL, "Hello there.", false, true, &b) && say(m0, be, NULL, "Hello there.", false, true, &c)) {
            bool same = a.n == b.n && b.n == c.n && !memcmp(a.pcm, b.pcm, sizeof(float) * (size_t)a.n) &&
                        !memcmp(b.pcm, c.pcm, sizeof(float) * (size_t)b.n);
            printf("voice_cache -1: cached %d, %d; audio %s the cached model's\n", b.st.prefix_cached,
                   c.st.prefix_cached, same ? "identical to" : "DIFFERS from");
            CHECK(!b.st.prefix_cached && !c.st.prefix_cached, "voice_cache < 0 keeps nothing");
            CHECK(same, "the audio does not depend on the cache");
        }
        CHECK(engine_prepare_voice(m0, be, NULL, err) == CBX_OK, "engine_prepare_voice without cache: %s", err);
    }
    out_free(&a);
    out_free(&b);
    out_free(&c);
    free(spk);
    free(pt);
    engine_model_free(m0);
    engine_model_free(m);
    backend_free(be);
    return test_summary();
}
