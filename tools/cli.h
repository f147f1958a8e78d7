/* cli.h - subcommand table shared by tools/main.c and tools/cmd_*.c.
 * A subcommand gets argv with its own name at argv[0] and returns the
 * process exit status (0 ok, 1 failure, 2 usage error). */
#ifndef CBX_CLI_H
#define CBX_CLI_H

#include <stdbool.h>
#include <stdint.h>

struct cli_command {
    const char *name, *help;
    int (*run)(int argc, char **argv);
};

int cmd_synth(int argc, char **argv);
int cmd_tokens(int argc, char **argv);
int cmd_say(int argc, char **argv);
int cmd_vocode(int argc, char **argv);
int cmd_vc(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_model_info(int argc, char **argv);
int cmd_voice(int argc, char **argv);
int cmd_download(int argc, char **argv);

/* "chatterbox CMD: <message> (see 'chatterbox CMD --help')" on stderr;
 * returns 2, the usage-error exit status. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The value of the option at argv[*i]: argv[*i + 1], with *i moved onto
 * it; NULL when argv ends there, after "chatterbox CMD: option needs a
 * value (see --help)" (or "unexpected argument" when argv[*i] is not an
 * option) on stderr. */
const char *cli_option_value(const char *cmd, int argc, char **argv, int *i);
/* The whole of s as a number (integer) in [lo, hi]; otherwise a usage error
 * naming opt is printed and false returned. */
bool cli_parse_num(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out);
bool cli_parse_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi,
                   long long *out);
bool cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out);

#endif
