/* main.c - the `chatterbox` command line: git-style subcommands.
 * Each subcommand lives in tools/cmd_<name>.c and is listed here. */
#include <stdio.h>
#include <string.h>

#include "chatterbox.h"
#include "cli.h"

static const struct cli_command commands[] = {
    {"say", "text -> speech (wav, flac, or raw PCM on stdout)", cmd_say},
    {"tokens", "text -> T3 speech tokens (Turbo, Nano), printed on stdout", cmd_tokens},
    {"vocode", "S3 speech tokens -> 24 kHz audio through S3Gen (flow + HiFT)", cmd_vocode},
    {"vc", "voice conversion: a recording said again in another voice (english model)", cmd_vc},
    {"synth", "write a synthetic Hugging Face model directory", cmd_synth},
    {"convert", "model directory -> one GGUF file (f32, f16, bf16, q8_0, q4_0, ...)", cmd_convert},
    {"info", "describe a model (GGUF file or directory)", cmd_model_info},
    {"voice", "voice profile from a reference recording: create, info", cmd_voice},
    {"download", "fetch a model from Hugging Face (turbo, nano, english, multilingual)", cmd_download},
    {"serve", "OpenAI-compatible speech server (HTTP: /v1/audio/speech, voices, metrics)", cmd_serve},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: chatterbox [--help] [--version] <command> [<args>]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nRun 'chatterbox <command> --help' for a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("chatterbox %s\n", cbx_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "chatterbox: unknown command '%s' (see 'chatterbox --help')\n", argv[1]);
    return 2;
}
