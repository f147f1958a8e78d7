/* test_api.c - the public C API (include/chatterbox.h, src/pipeline/api.c).
 *
 * Without arguments (ctest pipeline_api; no model needed): version, the
 * defaults of every parameter, no-op frees, and misuse - NULL arguments,
 * missing/wrong/corrupt model files, a bad weight type, truncated error
 * buffers - each giving a status and a message; say_example's usage error.
 * With --model (ctest pipeline_api_model, needs the synthetic Turbo
 * directory): say_example run end to end, then misuse with a loaded model
 * (bad voices, empty text, bad parameters, cancellation from the chunk
 * callback), chunks adding up to the returned audio, determinism for a
 * fixed seed, and two segments joined by the stated pause. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "chatterbox.h"
#include "io/audio.h"
#include "testutil.h"

#define EXAMPLE CBX_BINARY_DIR "/examples/say_example"

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

static int run(const char *cmd)
{
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A failed load: status want, *model NULL, message containing what. */
static void load_fails(const char *what_path, const char *path, cbx_status want, const char *what)
{
    char err[512] = "";
    cbx_model *m = (cbx_model *)1;
    cbx_status rc = cbx_model_load(path, NULL, &m, err, sizeof err);
    printf("  load %s -> %s: %s\n", what_path, cbx_status_str(rc), err);
    CHECK(rc == want && m == NULL && strstr(err, what), "cbx_model_load(%s): %s (want %s), '%s'", what_path,
          cbx_status_str(rc), cbx_status_str(want), err);
}

static void no_model(void)
{
    cbx_model_stats ms;
    CHECK(cbx_model_get_stats(NULL, &ms) == CBX_ERR_INVALID_ARG, "cbx_model_get_stats(NULL) is refused");
    CHECK(!strcmp(cbx_version(), CBX_VERSION_STRING), "cbx_version %s = header %s", cbx_version(),
          CBX_VERSION_STRING);
    cbx_synth_params p = cbx_synth_default_params();
    CHECK(p.temperature == 0.8 && p.top_k == 1000 && p.top_p == 0.95 && p.repetition_penalty == 1.2 &&
              p.max_tokens == 1001 && p.seed == 0 && p.cfm_steps == 0 && p.n_threads == 0 && p.split_text == 1 &&
              p.max_segment_tokens == 60 && p.pause_ms == 100 && p.max_retries == 2 && p.alignment_guard == 0,
          "cbx_synth_default_params: tts_turbo.py defaults");
    CHECK(cbx_model_default_params().weight_type == NULL, "cbx_model_default_params: weights as stored");

    /* frees are no-ops on NULL */
    cbx_model_free(NULL);
    cbx_voice_free(NULL);
    cbx_context_free(NULL);
    cbx_audio_free(NULL);
    cbx_audio empty = {0};
    cbx_audio_free(&empty);
    CHECK(1, "frees accept NULL");

    char err[512] = "";
    CHECK(cbx_model_load("x", NULL, NULL, err, sizeof err) == CBX_ERR_INVALID_ARG && strstr(err, "NULL"),
          "cbx_model_load(model NULL): '%s'", err);
    load_fails("NULL", NULL, CBX_ERR_INVALID_ARG, "no model path");
    load_fails("\"\"", "", CBX_ERR_INVALID_ARG, "no model path");
    load_fails("a missing path", "/nonexistent/chatterbox-model", CBX_ERR_IO, "/nonexistent/chatterbox-model");

    const char *dir = test_tmpdir("api");
    char text[600], gguf[600], bad_gguf[600];
    snprintf(text, sizeof text, "%s/notes.txt", dir);
    snprintf(gguf, sizeof gguf, "%s/corrupt.gguf", dir);
    snprintf(bad_gguf, sizeof bad_gguf, "%s/truncated.gguf", dir);
    write_file(text, "just some text\n", 15);
    unsigned char g[64] = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    write_file(gguf, g, sizeof g);
    write_file(bad_gguf, "GGUF", 4);
    char err2[512] = "";
    cbx_model *m = NULL;
    cbx_status rc = cbx_model_load(text, NULL, &m, err2, sizeof err2);
    printf("  load a text file -> %s: %s\n", cbx_status_str(rc), err2);
    CHECK(rc != CBX_OK && m == NULL && strstr(err2, "notes.txt"), "a text file as model: '%s'", err2);
    rc = cbx_model_load(gguf, NULL, &m, err2, sizeof err2);
    printf("  load a corrupt gguf -> %s: %s\n", cbx_status_str(rc), err2);
    CHECK((rc == CBX_ERR_FORMAT || rc == CBX_ERR_IO) && m == NULL && strstr(err2, "corrupt.gguf"),
          "a corrupt gguf: '%s'", err2);
    rc = cbx_model_load(bad_gguf, NULL, &m, err2, sizeof err2);
    printf("  load a truncated gguf -> %s: %s\n", cbx_status_str(rc), err2);
    CHECK(rc != CBX_OK && m == NULL && strstr(err2, "truncated.gguf"), "a truncated gguf: '%s'", err2);
    cbx_model_params mp = cbx_model_default_params();
    mp.weight_type = "q9_9";
    rc = cbx_model_load(text, &mp, &m, err2, sizeof err2);
    CHECK(rc == CBX_ERR_INVALID_ARG && strstr(err2, "q9_9"), "unknown weight type: '%s'", err2);

    /* a short caller buffer gets a truncated, terminated message; NULL is fine */
    char small[8];
    memset(small, 'x', sizeof small);
    /* a backend name this build lacks, or no such name: one line, no model */
    cbx_model_params bp = cbx_model_default_params();
    bp.backend = "tpu";
    rc = cbx_model_load(gguf, &bp, &m, err2, sizeof err2);
    CHECK(rc != CBX_OK && m == NULL && strstr(err2, "unknown backend 'tpu'"), "backend tpu: %s", err2);
    char bl[1024];
    const char *autoname = cbx_backends(bl, sizeof bl);
    printf("  backends (auto = %s):\n%s", autoname, bl);
    CHECK(strstr(bl, "cpu   yes") && (!strcmp(autoname, "cpu") || !strcmp(autoname, "cuda")), "cbx_backends: %s", bl);
    rc = cbx_model_load("/nonexistent/x", NULL, &m, small, sizeof small);
    CHECK(rc != CBX_OK && memchr(small, 0, sizeof small) && strlen(small) == 7, "errlen 8: '%s'", small);
    rc = cbx_model_load("/nonexistent/x", NULL, &m, NULL, 0);
    CHECK(rc != CBX_OK && m == NULL, "errbuf NULL: %s", cbx_status_str(rc));

    cbx_context *ctx = (cbx_context *)1;
    CHECK(cbx_context_create(NULL, &ctx) == CBX_ERR_INVALID_ARG && ctx == NULL, "cbx_context_create(NULL model)");
    CHECK(cbx_context_create(NULL, NULL) == CBX_ERR_INVALID_ARG, "cbx_context_create(NULL, NULL)");
    cbx_voice *v = (cbx_voice *)1;
    rc = cbx_voice_load(NULL, "x", &v, err, sizeof err);
    CHECK(rc == CBX_ERR_INVALID_ARG && v == NULL && strstr(err, "model"), "cbx_voice_load(NULL model): '%s'", err);
    cbx_audio a = {(float *)1, 5, 1};
    CHECK(cbx_synthesize(NULL, NULL, "hi", NULL, NULL, NULL, &a) == CBX_ERR_INVALID_ARG && a.samples == NULL && a.n == 0,
          "cbx_synthesize(NULL ctx): status, audio zeroed");
    CHECK(cbx_context_errmsg(NULL) != NULL, "cbx_context_errmsg(NULL) is a text");

    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' 2>/dev/null", EXAMPLE);
    CHECK(run(cmd) == 2, "say_example without arguments: usage, exit 2");
}

/* ---- with a model --------------------------------------------------------- */

struct chunks {
    float *pcm;
    size_t n, cap;
    int count, cancel_at;
    size_t first[4]; /* length of each of the first chunks */
};

static int collect(void *user, const float *s, size_t n, int sr)
{
    struct chunks *c = user;
    if (sr != 24000) return 1;
    if (c->count < 4) c->first[c->count] = n;
    if (++c->count == c->cancel_at) return 1;
    if (c->n + n > c->cap) {
        c->cap = (c->n + n) * 2;
        c->pcm = realloc(c->pcm, c->cap * sizeof(float));
    }
    memcpy(c->pcm + c->n, s, n * sizeof(float));
    c->n += n;
    return 0;
}

/* cbx_prepare_voice builds the built-in voice's T3 prefix before any
 * synthesis: the model's prefix store holds its file afterwards, and the
 * audio is the audio of a model that never prepared. */
static void prepare(const char *path)
{
    char err[512] = "", store[600];
    snprintf(store, sizeof store, "%s/prefixes", test_tmpdir("api-prepare"));
    cbx_model_params mp = cbx_model_default_params();
    mp.prefix_cache_dir = store;
    cbx_model *m = NULL, *m2 = NULL;
    cbx_context *ctx = NULL, *ctx2 = NULL;
    cbx_status rc = cbx_model_load(path, &mp, &m, err, sizeof err);
    CHECK(rc == CBX_OK, "cbx_model_load(%s, prefix store): %s", path, err);
    rc = rc == CBX_OK ? cbx_model_load(path, NULL, &m2, err, sizeof err) : rc;
    CHECK(rc == CBX_OK, "cbx_model_load(%s): %s", path, err);
    if (rc == CBX_OK) rc = cbx_context_create(m, &ctx);
    if (rc == CBX_OK) rc = cbx_context_create(m2, &ctx2);
    if (rc != CBX_OK) goto out;
    CHECK(cbx_prepare_voice(NULL, NULL, 0) == CBX_ERR_INVALID_ARG, "cbx_prepare_voice(NULL context)");
    rc = cbx_prepare_voice(ctx, NULL, -2);
    CHECK(rc == CBX_ERR_INVALID_ARG && strstr(cbx_context_errmsg(ctx), "n_threads"), "n_threads -2: '%s'",
          cbx_context_errmsg(ctx));
    int before = test_count_files(store, ".cbxpfx", NULL, 0);
    const double t0 = test_now();
    rc = cbx_prepare_voice(ctx, NULL, 0);
    const double t_prep = test_now() - t0;
    char file[700] = "";
    int after = test_count_files(store, ".cbxpfx", file, sizeof file);
    printf("  cbx_prepare_voice: %s in %.3f s; prefix files in the store %d -> %d\n", cbx_status_str(rc), t_prep,
           before < 0 ? 0 : before, after);
    CHECK(rc == CBX_OK && *cbx_context_errmsg(ctx) == 0, "cbx_prepare_voice: %s", cbx_context_errmsg(ctx));
    CHECK(before <= 0 && after == 1, "the prepared prefix is in the store (%d -> %d files)", before, after);
    CHECK(cbx_prepare_voice(ctx, NULL, 0) == CBX_OK && test_count_files(store, ".cbxpfx", NULL, 0) == 1,
          "a second cbx_prepare_voice: %s", cbx_context_errmsg(ctx));
    /* same audio as a model that never prepared */
    cbx_synth_params p = cbx_synth_default_params();
    p.max_tokens = 12;
    p.top_k = 1;
    cbx_audio a = {0}, b = {0};
    rc = cbx_synthesize(ctx, NULL, "Prepared in advance.", &p, NULL, NULL, &a);
    CHECK(rc == CBX_OK, "synthesis after cbx_prepare_voice: %s", cbx_context_errmsg(ctx));
    const int t1 = test_n_threads();
    rc = cbx_synthesize(ctx2, NULL, "Prepared in advance.", &p, NULL, NULL, &b);
    CHECK(rc == CBX_OK, "synthesis without it: %s", cbx_context_errmsg(ctx2));
    /* both contexts run on the process's one pool of all CPUs (on cuda
     * the batches draw on it); the only new thread is the second model's
     * T3 scheduler (one per model, pipeline/scheduler.h) */
    printf("  threads: %d after the first context's call, %d after the second's\n", t1, test_n_threads());
    CHECK(test_n_threads() == t1 + 1, "a second context starts no workers of its own (%d -> %d threads: "
          "the second model's T3 scheduler alone)", t1, test_n_threads());
    CHECK(a.n > 0 && a.n == b.n && !memcmp(a.samples, b.samples, a.n * sizeof(float)),
          "prepared and unprepared audio are the same (%zu, %zu samples)", a.n, b.n);
    cbx_audio_free(&a);
    cbx_audio_free(&b);
out:
    cbx_context_free(ctx);
    cbx_context_free(ctx2);
    cbx_model_free(m);
    cbx_model_free(m2);
}

struct aborter {
    int calls, at;
};

static int abort_after(void *user)
{
    struct aborter *b = user;
    return ++b->calls >= b->at;
}

static void with_model(void)
{
    char path[600], err[512] = "", cmd[3000], out[600];
    snprintf(path, sizeof path, "%s/models/turbo", CBX_BINARY_DIR);
    const char *dir = test_tmpdir("api-model");

    /* the example program, end to end (a short token cap keeps it quick) */
    snprintf(out, sizeof out, "%s/example.wav", dir);
    snprintf(cmd, sizeof cmd, "'%s' --max-tokens 24 '%s' 'Hello from the example.' '%s'", EXAMPLE, path, out);
    int st = run(cmd);
    struct audio wav = {0};
    cbx_status rc = st == 0 ? io_audio_read(out, &wav, err) : CBX_ERR_IO;
    CHECK(st == 0 && rc == CBX_OK && wav.sample_rate == 24000 && wav.n > 24000 / 10,
          "say_example: exit %d, %s: %lld samples at %d Hz", st, out, (long long)wav.n, wav.sample_rate);
    io_audio_free(&wav);

    cbx_model *m = NULL;
    rc = cbx_model_load(path, NULL, &m, err, sizeof err);
    CHECK(rc == CBX_OK, "cbx_model_load(%s): %s", path, err);
    if (rc != CBX_OK) return;
    CHECK(!strcmp(cbx_model_variant(m), "turbo") && cbx_model_sample_rate(m) == 24000, "variant %s, %d Hz",
          cbx_model_variant(m), cbx_model_sample_rate(m));

    /* voices: missing, not a voice, a directory without the tensors */
    cbx_voice *v = (cbx_voice *)1;
    rc = cbx_voice_load(m, "/nonexistent/me.voice", &v, err, sizeof err);
    printf("  voice: missing -> %s: %s\n", cbx_status_str(rc), err);
    CHECK(rc == CBX_ERR_NOT_FOUND && v == NULL && strstr(err, "/nonexistent/me.voice"), "missing voice: '%s'", err);
    char notes[700];
    snprintf(notes, sizeof notes, "%s/notes.txt", dir);
    write_file(notes, "not audio at all\n", 17);
    rc = cbx_voice_load(m, notes, &v, err, sizeof err);
    printf("  voice: a text file -> %s: %s\n", cbx_status_str(rc), err);
    CHECK(rc != CBX_OK && v == NULL && strstr(err, "notes.txt"), "a text file as voice: '%s'", err);
    rc = cbx_voice_load(m, dir, &v, err, sizeof err);
    printf("  voice: empty directory -> %s: %s\n", cbx_status_str(rc), err);
    CHECK(rc != CBX_OK && v == NULL && strstr(err, "speaker_emb"), "a directory without tensors: '%s'", err);

    cbx_context *ctx = NULL;
    CHECK(cbx_context_create(m, &ctx) == CBX_OK && ctx, "cbx_context_create");
    cbx_synth_params p = cbx_synth_default_params();
    p.max_tokens = 8;
    p.top_k = 1; /* greedy: deterministic, never retried */
    cbx_audio a = {0};
    struct {
        const char *text, *what;
    } bad[] = {{NULL, "NULL"}, {"", "empty"}, {"  \n ", "empty"}, {"... !!! ?", "nothing to speak"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = cbx_synthesize(ctx, NULL, bad[i].text, &p, NULL, NULL, &a);
        printf("  text %s -> %s: %s\n", bad[i].what, cbx_status_str(rc), cbx_context_errmsg(ctx));
        CHECK(rc == CBX_ERR_INVALID_ARG && a.samples == NULL && strstr(cbx_context_errmsg(ctx), bad[i].what),
              "text '%s': '%s'", bad[i].text ? bad[i].text : "(null)", cbx_context_errmsg(ctx));
    }
    cbx_synth_params q = p;
    q.max_tokens = 0;
    rc = cbx_synthesize(ctx, NULL, "Hello.", &q, NULL, NULL, &a);
    CHECK(rc == CBX_ERR_INVALID_ARG && strstr(cbx_context_errmsg(ctx), "max_tokens"), "max_tokens 0: '%s'",
          cbx_context_errmsg(ctx));
    q = p;
    q.n_threads = -1;
    rc = cbx_synthesize(ctx, NULL, "Hello.", &q, NULL, NULL, &a);
    CHECK(rc == CBX_ERR_INVALID_ARG && strstr(cbx_context_errmsg(ctx), "n_threads"), "n_threads -1: '%s'",
          cbx_context_errmsg(ctx));
    q = p;
    q.alignment_guard = 1; /* the Llama T3's option */
    rc = cbx_synthesize(ctx, NULL, "Hello.", &q, NULL, NULL, &a);
    printf("  alignment_guard on turbo -> %s: %s\n", cbx_status_str(rc), cbx_context_errmsg(ctx));
    CHECK(rc == CBX_ERR_INVALID_ARG && a.samples == NULL && strstr(cbx_context_errmsg(ctx), "alignment guard"),
          "alignment_guard on turbo: '%s'", cbx_context_errmsg(ctx));

    /* cancellation from the chunk callback */
    struct chunks c = {0};
    c.cancel_at = 1;
    rc = cbx_synthesize(ctx, NULL, "Hello there.", &p, collect, &c, &a);
    printf("  cancel in the first chunk -> %s: %s\n", cbx_status_str(rc), cbx_context_errmsg(ctx));
    CHECK(rc == CBX_ERR_CANCELLED && a.samples == NULL && a.n == 0 && strstr(cbx_context_errmsg(ctx), "cancel"),
          "chunk callback cancels: %s", cbx_status_str(rc));

    /* cancellation from the abort callback, within a whole-text call (no
     * chunk callback): it stops at the call that returned nonzero */
    struct aborter ab = {0, 5};
    q = p;
    q.abort_callback = abort_after;
    q.abort_user = &ab;
    rc = cbx_synthesize(ctx, NULL, "Hello there, how are you today?", &q, NULL, NULL, &a);
    printf("  abort at callback %d -> %s after %d calls: %s\n", ab.at, cbx_status_str(rc), ab.calls,
           cbx_context_errmsg(ctx));
    CHECK(rc == CBX_ERR_CANCELLED && a.samples == NULL && ab.calls == ab.at &&
              strstr(cbx_context_errmsg(ctx), "cancel"),
          "abort callback cancels at once: %s after %d calls", cbx_status_str(rc), ab.calls);
    ab = (struct aborter){0, 1 << 30}; /* never aborts: the same audio as without it */
    cbx_audio plain = {0};
    rc = cbx_synthesize(ctx, NULL, "Hello there.", &p, NULL, NULL, &plain);
    cbx_status rc2 = cbx_synthesize(ctx, NULL, "Hello there.", &q, NULL, NULL, &a);
    CHECK(rc == CBX_OK && rc2 == CBX_OK && ab.calls > 2 && a.n == plain.n &&
              !memcmp(a.samples, plain.samples, a.n * sizeof(float)),
          "an abort callback that returns 0 (%d calls) changes nothing", ab.calls);
    cbx_audio_free(&plain);
    cbx_audio_free(&a);

    /* two segments: two chunks adding up to the audio, with the pause */
    c = (struct chunks){0};
    q = p;
    q.max_segment_tokens = 4;
    q.pause_ms = 100;
    rc = cbx_synthesize(ctx, NULL, "Good morning. Good night.", &q, collect, &c, &a);
    CHECK(rc == CBX_OK && *cbx_context_errmsg(ctx) == 0, "two segments: %s", cbx_context_errmsg(ctx));
    CHECK(c.count == 2 && c.n == a.n && a.n > 0 && !memcmp(c.pcm, a.samples, a.n * sizeof(float)),
          "%d chunks, %zu samples, = the returned %zu", c.count, c.n, a.n);
    if (c.count == 2) {
        int zeros = 1;
        for (size_t i = 0; i < 2400; i++) zeros &= a.samples[c.first[0] + i] == 0.0f;
        CHECK(zeros && c.first[1] > 2400, "second chunk starts with the 100 ms pause (2400 zero samples)");
    }
    /* same seed, same audio; another seed differs in sampling */
    cbx_audio b = {0};
    rc = cbx_synthesize(ctx, NULL, "Good morning. Good night.", &q, NULL, NULL, &b);
    CHECK(rc == CBX_OK && b.n == a.n && !memcmp(a.samples, b.samples, a.n * sizeof(float)),
          "deterministic for a fixed seed (%zu samples)", b.n);
    cbx_audio_free(&b);
    cbx_audio_free(&a);
    free(c.pcm);
    cbx_context_free(ctx);
    cbx_model_free(m);
    prepare(path);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--model")) with_model();
    else no_model();
    return test_summary();
}
