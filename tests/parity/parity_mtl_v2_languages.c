/* parity_mtl_v2_languages.c - `chatterbox say --language xx "text"` for
 * each of the 23 languages of mtl_tts.py on the synthetic mtl-v2 model
 * (its synthetic tokenizer and Cangjie files): every language gives a
 * 24 kHz wav that is not silent, and an unknown code fails with one line
 * naming the valid ones, leaving no file. Kept lean: the voice is made
 * once from the first 2 s of the reference clip (so S3Gen's prompt is 100
 * mel frames, not 500), a few sampled tokens, 2 CFM steps; the voice
 * prefix is built once and kept in the test prefix cache. Needs the
 * synth_mtl-v2 model directory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "io/audio.h"
#include "testutil.h"

#include "mtl_sentences.inc"

int main(void)
{
    char model[600], out[700], errf[700], clip[700], voice[700], cmd[4000], msg[4096], e[ERR_MAX];
    snprintf(model, sizeof model, "%s/models/mtl-v2", CBX_BINARY_DIR);
    const char *dir = test_tmpdir("mtl-v2-languages");
    snprintf(errf, sizeof errf, "%s/err.txt", dir);
    snprintf(clip, sizeof clip, "%s/clip2s.wav", dir);
    snprintf(voice, sizeof voice, "%s/short.voice", dir);
    /* the short voice */
    struct audio ref = {0};
    bool have_voice = io_audio_read(test_data("ref_voice_24k.wav"), &ref, e) == CBX_OK &&
                      io_audio_write(clip, ref.pcm, ref.n < 2 * ref.sample_rate ? ref.n : 2 * ref.sample_rate,
                                     ref.sample_rate, AUDIO_WAV_FLOAT, e) == CBX_OK;
    io_audio_free(&ref);
    snprintf(cmd, sizeof cmd, "'%s/chatterbox' voice create '%s' -o '%s' --model '%s' --threads 2 --quiet",
             CBX_BINARY_DIR, clip, voice, model);
    have_voice = have_voice && system(cmd) == 0;
    CHECK(have_voice, "a 2 s voice for the runs: %s", e);
    if (!have_voice) return test_summary();
    int spoken = 0;
    for (int i = 0; i < N_MTL_SENTENCES; i++) {
        const char *code = mtl_sentences[i][0], *text = mtl_sentences[i][1];
        snprintf(out, sizeof out, "%s/%s.wav", dir, code);
        remove(out);
        snprintf(cmd, sizeof cmd,
                 "'%s/chatterbox' say --model '%s' --voice '%s' --language %s '%s' --seed 1 --max-tokens 8 "
                 "--cfm-steps 2 --threads 2 --format wav-float -o '%s' --quiet 2>'%s'",
                 CBX_BINARY_DIR, model, voice, code, text, out, errf);
        int st = system(cmd);
        st = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        test_slurp(errf, msg, sizeof msg);
        struct audio a = {0};
        const bool have = io_audio_read(out, &a, e) == CBX_OK;
        double peak = 0, ss = 0;
        for (int64_t k = 0; have && k < a.n; k++) {
            peak = fmax(peak, fabs(a.pcm[k]));
            ss += (double)a.pcm[k] * a.pcm[k];
        }
        const double rms = have && a.n ? sqrt(ss / (double)a.n) : 0;
        const bool ok = st == 0 && have && a.sample_rate == 24000 && a.n >= 960 && rms > 1e-3;
        printf("say --language %s %-40s exit %d, %6lld samples, peak %.3f, rms %.4f %s\n", code, text, st,
               (long long)a.n, peak, rms, ok ? "PASS" : "FAIL");
        CHECK(ok, "%s: exit %d, %lld samples, rms %.3g: %s", code, st, (long long)a.n, rms, msg);
        spoken += ok;
        io_audio_free(&a);
        remove(out);
    }
    printf("%d of %d languages spoken\n", spoken, N_MTL_SENTENCES);
    CHECK(spoken == 23 && N_MTL_SENTENCES == 23, "%d of %d languages", spoken, N_MTL_SENTENCES);
    /* an unknown code: one line naming the valid ones, exit 2, no file */
    snprintf(out, sizeof out, "%s/xx.wav", dir);
    snprintf(cmd, sizeof cmd,
             "'%s/chatterbox' say --model '%s' --voice '%s' --language xx 'Hello.' -o '%s' --quiet 2>'%s'",
             CBX_BINARY_DIR, model, voice, out, errf);
    int st = system(cmd);
    st = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    test_slurp(errf, msg, sizeof msg);
    const char *nl = strchr(msg, '\n');
    FILE *f = fopen(out, "rb");
    printf("say --language xx: exit %d, %s: %s", st, f ? "a file" : "no file", msg);
    CHECK(st == 2 && nl && !nl[1] && strstr(msg, "\"xx\"") && strstr(msg, "ar, da") && !f,
          "unknown language: exit %d, '%s'", st, msg);
    if (f) fclose(f);
    return test_summary();
}
