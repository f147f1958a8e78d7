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
int cmd_serve(int argc, char **argv);

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
/* The output path can be written: not a directory, its directory exists
 * and is writable (io_audio_write makes a temporary file there); else a
 * one-line message in err. */
#include "core/error.h"
cbx_status cli_check_output(const char *path, char *err);

/* ---- generation options shared by say and tokens (cli_gen.c) ----------
 * Sampling knobs whose defaults depend on the model's variant: parsed
 * before the model is open, applied on top of the variant's defaults
 * (engine_model_default_params) after. */
struct engine_model;
struct engine_params;
struct cli_gen {
    double temperature, top_p, min_p, repetition_penalty, cfg_weight, exaggeration;
    int top_k, max_tokens;
    unsigned set;          /* CLI_GEN_* bits of the options given */
    const char *language;  /* --language */
    int32_t *text_ids;     /* --text-ids, owned (cli_gen_free) */
    int64_t n_text_ids;
    const char *t3;        /* --t3 FILE: engine_load_params.t3_path */
    bool alignment_guard;  /* --alignment-guard */
};
enum {
    CLI_GEN_TEMPERATURE = 1u << 0, CLI_GEN_TOP_K = 1u << 1, CLI_GEN_TOP_P = 1u << 2,
    CLI_GEN_MIN_P = 1u << 3, CLI_GEN_REPETITION = 1u << 4, CLI_GEN_MAX_TOKENS = 1u << 5,
    CLI_GEN_CFG = 1u << 6, CLI_GEN_EXAGGERATION = 1u << 7,
};
/* The --help lines of these options. */
extern const char cli_gen_help[];
/* Whether opt is one of these options (each takes a value). */
bool cli_gen_is_option(const char *opt);
/* Whether opt is one of their flags (no value; --alignment-guard), which
 * is then recorded in g. */
bool cli_gen_flag(struct cli_gen *g, const char *opt);
/* Parse opt's value into g; false after a usage error on stderr. */
bool cli_gen_parse(struct cli_gen *g, const char *cmd, const char *opt, const char *val);
/* Apply g to p over m's defaults; false after a one-line error on stderr
 * (an option the variant does not have, a language it does not speak). */
bool cli_gen_apply(const struct cli_gen *g, const char *cmd, const struct engine_model *m,
                   struct engine_params *p);
void cli_gen_free(struct cli_gen *g);

/* The --help line of --backend (every command that computes). */
#define CLI_BACKEND_HELP                                                                    \
    "  --backend NAME            cpu, cuda, cuda:N or auto (default: cuda when built\n"  \
    "                            and a GPU is present, else cpu; 'info --backends')\n"

/* Whether val names a backend of this build (core/backend.h); else a
 * usage error on stderr naming cmd and the names there are. */
bool cli_backend_ok(const char *cmd, const char *val);

/* fn for SIGINT and SIGTERM (sigaction, no flags). */
void cli_on_stop_signals(void (*fn)(int));
/* The voice prefix store a command uses: opt (--prefix-cache DIR), else
 * $CHATTERBOX_PREFIX_CACHE ("" turns it off), else <cache root>/prefixes
 * written into buf[n]; NULL when off (off: --no-prefix-cache) or when
 * there is no cache root. */
const char *cli_prefix_dir(const char *opt, bool off, char *buf, size_t n);

#endif
