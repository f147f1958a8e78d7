/* test_vc_errors.c - every error a user of `chatterbox vc` can hit gives
 * ONE line "chatterbox vc: ..." on stderr, a non-zero exit (2 for usage,
 * 1 for failures), nothing on stdout, and no output file (nor a temporary
 * one) left behind.
 *
 * Without arguments (ctest tools_vc_errors) the cases that stop before a
 * model is loaded: no model, unknown option, bad values, no source, two
 * sources, unwritable output, a missing / unreadable / too short source.
 * With --model (ctest tools_vc_errors_model, needs the synthetic turbo
 * and english directories) also: a model of the wrong variant, a missing
 * target voice, a target without an S3Gen part, a broken pipe on stdout. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/audio.h"
#include "testutil.h"

#define CLI_CMD "vc"
#include "cli_cases.inc"

static char src[1100];

/* A 16-bit mono 16 kHz wav of n samples of a quiet tone. */
static void write_wav(const char *path, int n)
{
    size_t len = 44 + 2 * (size_t)n;
    unsigned char *b = calloc(1, len);
    if (!b) return;
    const unsigned v[] = {(unsigned)len - 8, 16, 0x00010001u, 16000, 32000, 0x00100002u, 2u * (unsigned)n};
    const int at[] = {4, 16, 20, 24, 28, 32, 40};
    memcpy(b, "RIFF", 4);
    memcpy(b + 8, "WAVEfmt ", 8);
    memcpy(b + 36, "data", 4);
    for (int k = 0; k < 7; k++)
        for (int j = 0; j < 4; j++) b[at[k] + j] = (unsigned char)(v[k] >> (8 * j));
    for (int i = 0; i < n; i++) b[44 + 2 * i + 1] = (unsigned char)((i / 20) % 2 ? 0x10 : 0xf0);
    write_file(path, b, len);
    free(b);
}

static void without_model(void)
{
    char text[1200], shortw[1200], args[4096];
    snprintf(text, sizeof text, "%s/notes.txt", tmp);
    snprintf(shortw, sizeof shortw, "%s/short.wav", tmp);
    write_file(text, "hello\n", 6);
    write_wav(shortw, 1600); /* 0.1 s */

    snprintf(args, sizeof args, "'%s' -o out.wav", src);
    fails("no model", args, 2, "chatterbox download english");
    fails("no source", "-o out.wav --model x", 2, "SOURCE audio file is required");
    fails("stdin source", "- -o out.wav --model x", 2, "SOURCE must be a file");
    snprintf(args, sizeof args, "'%s' --model x", src);
    fails("no output", args, 2, "-o OUT is required");
    snprintf(args, sizeof args, "'%s' '%s' -o out.wav --model x", src, src);
    fails("two sources", args, 2, "one SOURCE only");
    snprintf(args, sizeof args, "'%s' -o out.wav --model x --frobnicate 1", src);
    fails("unknown option", args, 2, "unknown option '--frobnicate'");
    snprintf(args, sizeof args, "'%s' -o out.wav --model", src);
    fails("option without value", args, 2, "option needs a value");
    snprintf(args, sizeof args, "'%s' -o out.wav --model x --cfm-steps 0", src);
    fails("bad cfm steps", args, 2, "--cfm-steps");
    snprintf(args, sizeof args, "'%s' -o out.wav --model x --seed minus", src);
    fails("bad seed", args, 2, "--seed");
    snprintf(args, sizeof args, "'%s' -o out.wav --model x --threads 0", src);
    fails("bad threads", args, 2, "--threads");
    snprintf(args, sizeof args, "'%s' -o out.wav --model x --format mp3", src);
    fails("bad format", args, 2, "--format");
    snprintf(args, sizeof args, "'%s' -o out.ogg --model x", src);
    fails("unknown extension", args, 2, "unknown audio format");
    snprintf(args, sizeof args, "'%s' -o /nonexistent/dir/out.wav --model x", src);
    fails("unwritable output", args, 1, "/nonexistent/dir");
    fails("missing source", "/nonexistent/src.wav -o out.wav --model x", 1, "/nonexistent/src.wav");
    snprintf(args, sizeof args, "'%s' -o out.wav --model x", text);
    fails("a text file as source", args, 1, "notes.txt");
    snprintf(args, sizeof args, "'%s' -o out.wav --model x", shortw);
    fails("too short a source", args, 1, "at least 0.5 s");
    snprintf(args, sizeof args, "'%s' -o out.wav --model /nonexistent/model", src);
    fails("missing model", args, 1, "/nonexistent/model");
}

static void with_model(void)
{
    char args[4096], cmd[8192], turbo[1200], english[1200], novoice[1200];
    snprintf(turbo, sizeof turbo, "%s/models/turbo", CBX_BINARY_DIR);
    snprintf(english, sizeof english, "%s/models/english", CBX_BINARY_DIR);
    snprintf(novoice, sizeof novoice, "%s/t3-only-voice", tmp);
    /* a conds .npy directory without the S3Gen part (T3 keys only) */
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/english/t3_cond_prompt_tokens.npy' "
             "'%s/cond_prompt_speech_tokens.npy' && cp '%s/english/ve_embedding.npy' '%s/speaker_emb.npy'",
             novoice, CBX_TEST_DATA, novoice, CBX_TEST_DATA, novoice);
    CHECK(system(cmd) == 0, "%s", cmd);

    snprintf(args, sizeof args, "'%s' -o out.wav --model '%s'", src, turbo);
    fails("turbo model", args, 1, "needs the english model");
    snprintf(args, sizeof args, "'%s' -o out.wav --model '%s' --voice /nonexistent/me.voice", src, english);
    fails("missing voice", args, 1, "/nonexistent/me.voice");
    snprintf(args, sizeof args, "'%s' -o out.wav --model '%s' --voice '%s'", src, english, novoice);
    fails("voice without S3Gen part", args, 1, "no S3Gen part");

    /* broken pipe: 3 s of output is 144 KB of s16le, more than a pipe
     * holds, so the write meets the closed pipe after head exits */
    char rc_path[1200];
    snprintf(rc_path, sizeof rc_path, "%s/rc", tmp);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && ('%s' vc '%s' --model '%s' --cfm-steps 1 -o - 2>'%s'; echo $? >'%s') | head -c 10 >'%s'",
             outdir, BIN, src, english, err_path, rc_path, out_path);
    int st = system(cmd);
    char rc_text[64];
    test_slurp(rc_path, rc_text, sizeof rc_text);
    test_slurp(err_path, err_text, sizeof err_text);
    printf("  %-28s exit %s: %s", "broken pipe", rc_text, err_text);
    CHECK(st == 0 && atoi(rc_text) == 1 && test_count_lines(err_text) == 1 && strstr(err_text, "broken pipe"),
          "-o - | head -c 10: exit %d, one line naming the broken pipe", atoi(rc_text));
}

int main(int argc, char **argv)
{
    cli_cases_init("vc-errors");
    /* the source: 3 s of the reference recording (16 kHz) */
    snprintf(src, sizeof src, "%s/source.wav", tmp);
    struct audio a = {0};
    char err[ERR_MAX] = "";
    if (!test_read_audio("ref_voice_16k.wav", 16000, &a)) return test_summary();
    cbx_status rc = io_audio_write(src, a.pcm, a.n < 3 * 16000 ? a.n : 3 * 16000, 16000, AUDIO_WAV_PCM16, err);
    io_audio_free(&a);
    CHECK(rc == CBX_OK, "write %s: %s", src, err);
    if (rc != CBX_OK) return test_summary();
    if (argc > 1 && !strcmp(argv[1], "--model")) with_model();
    else without_model();
    return test_summary();
}
