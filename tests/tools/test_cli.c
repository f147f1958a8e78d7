/* test_cli.c - the `chatterbox` command line (tools/main.c, cmd_synth.c):
 * --help / --version, and usage errors that must print exactly one line
 * "chatterbox[ synth]: <problem>" on stderr and exit 2; runtime failures
 * exit 1 with one line. Runs the built binary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testutil.h"

static char tmp[4096], out_path[4200], err_path[4200];
static char out_text[8192], err_text[8192];

/* Run `chatterbox ARGS`; returns the exit status (or -1). */
static int run(const char *args)
{
    char cmd[10000];
    snprintf(cmd, sizeof cmd, "'%s/chatterbox' %s >'%s' 2>'%s'", CBX_BINARY_DIR, args, out_path,
             err_path);
    int st = system(cmd);
    test_slurp(out_path, out_text, sizeof out_text);
    test_slurp(err_path, err_text, sizeof err_text);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A usage error: exit 2, nothing on stdout, one line on stderr that starts
 * with prefix and contains `what`. */
static void usage_error(const char *args, const char *prefix, const char *what)
{
    int rc = run(args);
    CHECK(rc == 2 && out_text[0] == 0 && test_count_lines(err_text) == 1 &&
              !strncmp(err_text, prefix, strlen(prefix)) && strstr(err_text, what),
          "chatterbox %s -> exit %d, stderr: %s", args, rc, err_text);
}

int main(void)
{
    snprintf(tmp, sizeof tmp, "%s", test_tmpdir("cli"));
    snprintf(out_path, sizeof out_path, "%s/stdout", tmp);
    snprintf(err_path, sizeof err_path, "%s/stderr", tmp);

    int rc = run("--help");
    CHECK(rc == 0 && strstr(out_text, "usage: chatterbox") && strstr(out_text, "synth") &&
              err_text[0] == 0,
          "--help: exit %d, usage on stdout listing synth", rc);
    rc = run("--version");
    CHECK(rc == 0 && strstr(out_text, "chatterbox 0.") && test_count_lines(out_text) == 1,
          "--version: exit %d, '%.*s'", rc, (int)strcspn(out_text, "\n"), out_text);
    rc = run("");
    CHECK(rc == 2 && strstr(err_text, "usage"), "no arguments: exit %d, usage on stderr", rc);
    usage_error("frobnicate", "chatterbox: ", "frobnicate");

    rc = run("synth --help");
    CHECK(rc == 0 && strstr(out_text, "usage: chatterbox synth") && strstr(out_text, "mtl-v3") &&
              err_text[0] == 0,
          "synth --help: exit %d, usage on stdout", rc);
    rc = run("synth -h turbo");
    CHECK(rc == 0 && strstr(out_text, "usage: chatterbox synth"), "synth -h: exit %d", rc);

    usage_error("synth", "chatterbox synth: ", "VARIANT");
    usage_error("synth turbo", "chatterbox synth: ", "-o");
    usage_error("synth bogus -o x", "chatterbox synth: ", "unknown variant 'bogus'");
    usage_error("synth turbo -o", "chatterbox synth: ", "needs a directory");
    usage_error("synth turbo -o x --seed abc", "chatterbox synth: ", "--seed");
    usage_error("synth turbo -o x --seed -1", "chatterbox synth: ", "--seed");
    usage_error("synth turbo -o x --threads 0", "chatterbox synth: ", "--threads");
    usage_error("synth turbo -o x --frob", "chatterbox synth: ", "unknown option '--frob'");
    usage_error("synth turbo nano -o x", "chatterbox synth: ", "unexpected argument 'nano'");

    /* Runtime failure: the output cannot be created (a path under a file). */
    char args[8400];
    snprintf(args, sizeof args, "synth turbo -o '%s/stdout/sub' --quiet", tmp);
    rc = run(args);
    CHECK(rc == 1 && test_count_lines(err_text) == 1 && !strncmp(err_text, "chatterbox synth: ", 18),
          "unwritable output: exit %d, stderr: %s", rc, err_text);

    /* Runtime failure: no data directory. */
    snprintf(args, sizeof args, "synth nano -o '%s/o' --quiet", tmp);
    char envcmd[30000];
    snprintf(envcmd, sizeof envcmd, "env CBX_DATA_DIR='%s' '%s/chatterbox' %s >'%s' 2>'%s'", tmp,
             CBX_BINARY_DIR, args, out_path, err_path);
    int st = system(envcmd);
    test_slurp(err_path, err_text, sizeof err_text);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 1 && test_count_lines(err_text) == 1 &&
              strstr(err_text, "CBX_DATA_DIR"),
          "CBX_DATA_DIR without manifests: exit %d, stderr: %s",
          st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1, err_text);
    return test_summary();
}
