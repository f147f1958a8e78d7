/* say_example.c - the smallest complete program on the public API
 * (include/chatterbox.h): load a model, optionally a voice, speak a text
 * and write a 16-bit mono WAV. Chunks are reported as they arrive, as a
 * streaming player would consume them.
 *
 *   say_example [--max-tokens N] MODEL "Text to speak." out.wav [VOICE]
 *
 * MODEL is a Chatterbox Turbo Hugging Face directory or a converted .gguf;
 * VOICE a .voice file, a directory of conditioning .npy files or a
 * reference recording. Exit status: 0 ok, 1 failure, 2 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chatterbox.h"

static int on_chunk(void *user, const float *samples, size_t n, int sample_rate)
{
    (void)samples;
    size_t *total = user;
    *total += n;
    fprintf(stderr, "chunk: %zu samples (%.2f s so far)\n", n, (double)*total / sample_rate);
    return 0; /* nonzero would cancel */
}

static void put_u32(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}

/* RIFF/WAVE, PCM 16-bit mono. */
static int write_wav(const char *path, const cbx_audio *a)
{
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    unsigned char h[44];
    unsigned data = (unsigned)(a->n * 2);
    memcpy(h, "RIFF", 4); put_u32(h + 4, 36 + data); memcpy(h + 8, "WAVEfmt ", 8);
    put_u32(h + 16, 16); h[20] = 1; h[21] = 0; h[22] = 1; h[23] = 0; /* PCM, mono */
    put_u32(h + 24, (unsigned)a->sample_rate); put_u32(h + 28, (unsigned)a->sample_rate * 2);
    h[32] = 2; h[33] = 0; h[34] = 16; h[35] = 0;
    memcpy(h + 36, "data", 4); put_u32(h + 40, data);
    int ok = fwrite(h, 1, 44, f) == 44;
    for (size_t i = 0; ok && i < a->n; i++) {
        float x = a->samples[i] > 1.0f ? 1.0f : a->samples[i] < -1.0f ? -1.0f : a->samples[i];
        int v = (int)(x * 32767.0f + (x >= 0 ? 0.5f : -0.5f));
        unsigned char s[2] = {(unsigned char)(v & 0xff), (unsigned char)((v >> 8) & 0xff)};
        ok = fwrite(s, 1, 2, f) == 2;
    }
    return fclose(f) == 0 && ok;
}

int main(int argc, char **argv)
{
    int max_tokens = 0; /* 0: the default (1001 per sentence) */
    if (argc >= 3 && !strcmp(argv[1], "--max-tokens")) {
        max_tokens = atoi(argv[2]);
        argc -= 2;
        argv += 2;
    }
    if (argc < 4 || argc > 5 || max_tokens < 0) {
        fprintf(stderr, "usage: say_example [--max-tokens N] MODEL \"Text to speak.\" out.wav [VOICE]\n");
        return 2;
    }
    char err[512];
    cbx_model *model = NULL;
    cbx_voice *voice = NULL;
    cbx_context *ctx = NULL;
    cbx_audio audio = {0};
    int status = 1;
    fprintf(stderr, "chatterbox %s\n", cbx_version());

    cbx_status rc = cbx_model_load(argv[1], NULL, &model, err, sizeof err);
    if (rc != CBX_OK) { fprintf(stderr, "say_example: %s\n", err); goto done; }
    if (argc == 5 && (rc = cbx_voice_load(model, argv[4], &voice, err, sizeof err)) != CBX_OK) {
        fprintf(stderr, "say_example: %s\n", err);
        goto done;
    }
    if ((rc = cbx_context_create(model, &ctx)) != CBX_OK) {
        fprintf(stderr, "say_example: %s\n", cbx_status_str(rc));
        goto done;
    }
    cbx_synth_params p = cbx_synth_default_params();
    p.seed = 1;
    if (max_tokens > 0) p.max_tokens = max_tokens;
    size_t total = 0;
    rc = cbx_synthesize(ctx, voice, argv[2], &p, on_chunk, &total, &audio);
    if (rc != CBX_OK) { fprintf(stderr, "say_example: %s\n", cbx_context_errmsg(ctx)); goto done; }
    if (!write_wav(argv[3], &audio)) { fprintf(stderr, "say_example: cannot write %s\n", argv[3]); goto done; }
    fprintf(stderr, "wrote %s: %zu samples at %d Hz (%s model)\n", argv[3], audio.n, audio.sample_rate,
            cbx_model_variant(model));
    status = 0;
done:
    cbx_audio_free(&audio);
    cbx_context_free(ctx);
    cbx_voice_free(voice);
    cbx_model_free(model);
    return status;
}
