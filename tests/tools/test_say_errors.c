/* test_say_errors.c - every error a user of `chatterbox say` can hit gives
 * ONE line "chatterbox say: ..." on stderr, a non-zero exit (2 for usage,
 * 1 for failures, 130 for an interrupt), nothing on stdout, and no output
 * file (nor a temporary one) left behind.
 *
 * Without arguments (ctest tools_say_errors) the cases that stop before a
 * model is needed or loaded: no model, unknown option, bad values, empty
 * text, unwritable output, a text file / corrupt GGUF as --model, missing
 * voice or text file. With --model (ctest tools_say_errors_model, needs
 * the synthetic Turbo directory) also: a missing voice with a real model,
 * a broken pipe on stdout (`-o - | head -c 10`) and SIGINT during
 * synthesis. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define CLI_CMD "say"
#include "cli_cases.inc"

static char model[1100];

static void without_model(void)
{
    char text[1200], gguf[1200], nul[1200], args[4096];
    snprintf(text, sizeof text, "%s/notes.txt", tmp);
    snprintf(gguf, sizeof gguf, "%s/corrupt.gguf", tmp);
    snprintf(nul, sizeof nul, "%s/nul.txt", tmp);
    write_file(text, "hello\n", 6);
    write_file(gguf, "GGUF\3\0\0\0\xff\xff\xff\xff\xff\xff\xff\x7f", 16);
    write_file(nul, "hi\0there", 8);

    fails("no model", "Hello. -o out.wav", 2, "chatterbox download turbo");
    fails("no output", "Hello. --model x", 2, "-o OUT is required");
    fails("unknown option", "Hello. -o out.wav --model x --frobnicate", 2, "unknown option '--frobnicate'");
    fails("option without value", "Hello. -o out.wav --model", 2, "--model needs a value");
    fails("bad number", "Hello. -o out.wav --model x --temperature hot", 2, "--temperature");
    fails("bad top-p", "Hello. -o out.wav --model x --top-p 1.5", 2, "--top-p");
    fails("bad stream-prompt", "Hello. -o out.wav --model x --stream-prompt -1", 2, "--stream-prompt");
    fails("bad stream-first-prompt", "Hello. -o out.wav --model x --stream-first-prompt -3", 2,
          "--stream-first-prompt");
    fails("bad precision", "Hello. -o out.wav --model x --precision fp8", 2, "--precision: 'fp8'");
    fails("bad format", "Hello. -o out.wav --model x --format mp3", 2, "--format");
    fails("unknown extension", "Hello. -o out.ogg --model x", 2, "extension");
    fails("two texts", "Hello. World. -o out.wav --model x", 2, "more than one TEXT");
    fails("empty text", "'' -o out.wav --model x", 2, "empty");
    fails("blank text", "'  ' -o out.wav --model x", 2, "empty");
    fails("nothing to speak", "'... !?' -o out.wav --model x", 2, "nothing to speak");
    fails("empty text file", "-o out.wav --model x --text-file /dev/null", 2, "empty");
    snprintf(args, sizeof args, "--text-file '%s' -o out.wav --model x", nul);
    fails("NUL byte in the text file", args, 1, "NUL");
    fails("missing text file", "--text-file /nonexistent/t.txt -o out.wav --model x", 1, "/nonexistent/t.txt");
    fails("unwritable output", "Hello. -o /nonexistent/dir/out.wav --model x", 1, "/nonexistent/dir");
    snprintf(args, sizeof args, "Hello. -o '%s' --format wav --model x", tmp);
    fails("output is a directory", args, 1, "is a directory");
    fails("missing model", "Hello. -o out.wav --model /nonexistent/model", 1, "/nonexistent/model");
    snprintf(args, sizeof args, "Hello. -o out.wav --model '%s'", text);
    fails("a text file as model", args, 1, "notes.txt");
    snprintf(args, sizeof args, "Hello. -o out.wav --model '%s'", gguf);
    fails("corrupt gguf", args, 1, "corrupt.gguf");
}

static void with_model(void)
{
    char args[4096], cmd[8192];
    snprintf(args, sizeof args, "Hello. -o out.wav --model '%s' --voice /nonexistent/me.voice", model);
    fails("missing voice", args, 1, "/nonexistent/me.voice");

    /* broken pipe: 40 tokens are ~80 KB of s16le, more than a pipe holds,
     * so the write must meet the closed pipe after head exits */
    char rc_path[1200];
    snprintf(rc_path, sizeof rc_path, "%s/rc", tmp);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && ('%s' say 'Hello there, this is a test.' --model '%s' --top-k 1 --max-tokens 40 -o - "
             "2>'%s'; echo $? >'%s') | head -c 10 >'%s'",
             outdir, BIN, model, err_path, rc_path, out_path);
    int st = system(cmd);
    char rc_text[64];
    test_slurp(rc_path, rc_text, sizeof rc_text);
    test_slurp(err_path, err_text, sizeof err_text);
    test_slurp(out_path, out_text, sizeof out_text);
    printf("  %-28s exit %s: %s", "broken pipe", rc_text, err_text);
    CHECK(st == 0 && atoi(rc_text) == 1 && test_count_lines(err_text) == 1 && strstr(err_text, "broken pipe"),
          "-o - | head -c 10: exit %d, one line naming the broken pipe", atoi(rc_text));

    /* SIGINT once synthesis runs (--verbose reports the load first) */
    pid_t pid = fork();
    if (pid == 0) {
        if (chdir(outdir) != 0 || !freopen(err_path, "w", stderr) || !freopen("/dev/null", "r", stdin)) _exit(99);
        execl(BIN, BIN, "say", "Hello there, this is a test.", "--model", model, "--top-k", "1", "--max-tokens",
              "1000", "-o", "out.wav", "--verbose", (char *)NULL);
        _exit(98);
    }
    int waited = 0;
    for (; waited < 600; waited++) { /* up to 5 minutes for the load */
        test_slurp(err_path, err_text, sizeof err_text);
        if (strstr(err_text, "loaded in")) break;
        struct timespec ts = {0, 500000000};
        nanosleep(&ts, NULL);
    }
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    test_slurp(err_path, err_text, sizeof err_text);
    int errors = 0;
    for (const char *s = err_text; (s = strstr(s, "chatterbox say: ")); s++) errors++;
    const char *last = strstr(err_text, "chatterbox say: ");
    printf("  %-28s exit %d: %s", "SIGINT during synthesis", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
           last ? last : "(nothing)\n");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 130 && errors == 1 && last && strstr(last, "interrupted") &&
              files_left() == 0,
          "SIGINT: exit 130, one error line, no output file");
}

int main(int argc, char **argv)
{
    cli_cases_init("say-errors");
    snprintf(model, sizeof model, "%s/models/turbo", CBX_BINARY_DIR);
    if (argc > 1 && !strcmp(argv[1], "--model")) with_model();
    else without_model();
    return test_summary();
}
