/* parity_turbo_say.c - Turbo END TO END: text -> waveform through the whole
 * product, vs the upstream fixture. The fixture's voice tensors are put in
 * a --voice directory of .npy files (speaker_emb = ve_embedding,
 * cond_prompt_speech_tokens = t3_cond_prompt_tokens, prompt_token =
 * s3gen_prompt_tokens, prompt_feat = s3gen_prompt_mel, embedding =
 * campplus_embedding); with seed 42, greedy decoding (--top-k 1) and the
 * fixture's token cap (--max-tokens 64 = max_gen_len 63) the fixture text
 * must become s3gen_wav within rel 1e-2 (the S3Gen waveform tolerance:
 * HiFT's sine source integrates f0 over the utterance, fixtures/README.md).
 * Checked three ways: `chatterbox say` (float wav) from the Hugging Face
 * directory, the C API from the directory, and `chatterbox say` from a
 * GGUF converted (F32) from it (written under the build tree, removed at
 * exit). Needs the synth_turbo model directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "chatterbox.h"
#include "io/audio.h"
#include "io/model_file.h"
#include "io/npy.h"
#include "testutil.h"

#define TEXT "Oh, that's hilarious! [chuckle] Um anyway, we do have a new model in store."
#define TOL 1e-2

static char gguf_path[600];
static void remove_gguf(void)
{
    if (gguf_path[0]) remove(gguf_path);
}

static void compare(const char *what, const float *got, int64_t n, const struct npy *want)
{
    int64_t nw = want->ne[want->ndim - 1];
    CHECK(n == nw, "%s: %lld samples, want %lld", what, (long long)n, (long long)nw);
    if (n == nw) check_close(what, got, want->data, (size_t)n, 0, TOL);
}

/* `chatterbox say` with the fixture settings into a float wav; extra
 * options (default --quiet), stderr into log (n bytes) when given. */
static void say_cli(const char *what, const char *model, const char *voice, const char *text_file,
                    const char *dir, const struct npy *want, const char *extra, char *log, size_t n)
{
    char out[700], cmd[3000], err[ERR_MAX] = "", logf[720];
    snprintf(out, sizeof out, "%s/say.wav", dir);
    snprintf(logf, sizeof logf, "%s/say.log", dir);
    snprintf(cmd, sizeof cmd,
             "'%s/chatterbox' say --text-file '%s' --model '%s' --voice '%s' --seed 42 --top-k 1 "
             "--max-tokens 64 --format wav-float -o '%s' %s 2>'%s'",
             CBX_BINARY_DIR, text_file, model, voice, out, extra ? extra : "--quiet", logf);
    int st = system(cmd);
    int rc = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    CHECK(rc == 0, "%s: exit %d", what, rc);
    struct audio a = {0};
    if (rc == 0 && io_audio_read(out, &a, err) == CBX_OK) {
        CHECK(a.sample_rate == 24000, "%s: %d Hz", what, a.sample_rate);
        compare(what, a.pcm, a.n, want);
    } else {
        CHECK(0, "%s: no output: %s", what, err);
    }
    io_audio_free(&a);
    remove(out);
    if (log) test_slurp(logf, log, n);
}

int main(void)
{
    char model[600], err[ERR_MAX] = "", voice[700], text_file[700], from[700];
    snprintf(model, sizeof model, "%s/models/turbo", CBX_BINARY_DIR);
    const char *dir = test_tmpdir("say-parity");
    snprintf(voice, sizeof voice, "%s/voice", dir);
    snprintf(text_file, sizeof text_file, "%s/text.txt", dir);
    test_fixture_voice_dir("turbo", voice);
    FILE *f = fopen(text_file, "wb");
    if (f) {
        fputs(TEXT "\n", f);
        fclose(f);
    }
    struct npy want;
    snprintf(from, sizeof from, "%s/s3gen_wav.npy", test_data("turbo"));
    if (io_npy_read(from, &want, err) != CBX_OK) {
        CHECK(0, "%s", err);
        return test_summary();
    }

    /* 1. the command line, Hugging Face directory */
    say_cli("parity_turbo_say (chatterbox say, HF dir, seed 42, greedy, 64 tokens)", model, voice, text_file, dir,
            &want, NULL, NULL, 0);

    /* 1b. twice with a fresh voice prefix store: built and saved, then
     * loaded by the second process, the audio within the same tolerance
     * (the prefix store's own test checks that it is bit-identical) */
    char opt[900], log[8192];
    snprintf(opt, sizeof opt, "-v --prefix-cache '%s/prefixes'", dir);
    say_cli("parity_turbo_say_store1 (prefix built)", model, voice, text_file, dir, &want, opt, log, sizeof log);
    printf("%s", strstr(log, "say: voice prefix") ? strstr(log, "say: voice prefix") : log);
    CHECK(strstr(log, "voice prefix built") && strstr(log, "saved in"), "first run builds and saves the prefix");
    say_cli("parity_turbo_say_store2 (prefix loaded)", model, voice, text_file, dir, &want, opt, log, sizeof log);
    printf("%s", strstr(log, "say: voice prefix") ? strstr(log, "say: voice prefix") : log);
    CHECK(strstr(log, "voice prefix loaded") != NULL, "second run loads the prefix");

    /* 2. the C API, Hugging Face directory; chunks add up to the audio */
    cbx_model *m = NULL;
    cbx_voice *v = NULL;
    cbx_context *ctx = NULL;
    cbx_status rc = cbx_model_load(model, NULL, &m, err, sizeof err);
    CHECK(rc == CBX_OK, "cbx_model_load: %s", err);
    if (rc == CBX_OK) rc = cbx_voice_load(m, voice, &v, err, sizeof err);
    CHECK(rc == CBX_OK, "cbx_voice_load: %s", err);
    if (rc == CBX_OK) rc = cbx_context_create(m, &ctx);
    if (rc == CBX_OK) {
        cbx_synth_params p = cbx_synth_default_params();
        p.seed = 42;
        p.top_k = 1;
        p.max_tokens = 64;
        cbx_audio a = {0};
        rc = cbx_synthesize(ctx, v, TEXT, &p, NULL, NULL, &a);
        CHECK(rc == CBX_OK, "cbx_synthesize: %s", cbx_context_errmsg(ctx));
        if (rc == CBX_OK) compare("parity_turbo_say_api (cbx_synthesize, HF dir)", a.samples, (int64_t)a.n, &want);
        cbx_audio_free(&a);
    }
    cbx_context_free(ctx);
    cbx_voice_free(v);
    cbx_model_free(m);

    /* 3. the command line, a converted F32 GGUF */
    snprintf(gguf_path, sizeof gguf_path, "%s/turbo-say-parity.gguf", CBX_BINARY_DIR);
    atexit(remove_gguf);
    struct model_convert_params prm = {TYPE_F32, -1, NULL, NULL};
    rc = model_convert(model, gguf_path, &prm, err);
    CHECK(rc == CBX_OK, "convert %s -> %s: %s", model, gguf_path, err);
    if (rc == CBX_OK)
        say_cli("parity_turbo_say_gguf (chatterbox say, F32 gguf)", gguf_path, voice, text_file, dir, &want, NULL,
                NULL, 0);

    io_npy_free(&want);
    return test_summary();
}
