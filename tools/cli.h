/* cli.h - subcommand table shared by tools/main.c and tools/cmd_*.c.
 * A subcommand gets argv with its own name at argv[0] and returns the
 * process exit status (0 ok, 1 failure, 2 usage error). */
#ifndef CBX_CLI_H
#define CBX_CLI_H

struct cli_command {
    const char *name, *help;
    int (*run)(int argc, char **argv);
};

int cmd_synth(int argc, char **argv);
int cmd_tokens(int argc, char **argv);
int cmd_say(int argc, char **argv);
int cmd_vocode(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_model_info(int argc, char **argv);
int cmd_voice(int argc, char **argv);
int cmd_download(int argc, char **argv);

#endif
