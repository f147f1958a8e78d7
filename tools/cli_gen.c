/* cli_gen.c - the generation options of `say` and `tokens` (cli.h):
 * sampling knobs with per-variant defaults, the Llama T3's CFG weight,
 * exaggeration and alignment guard, --language, --text-ids and --t3 (a T3
 * file in place of the model's, given to the loader). */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/model_dir.h"
#include "io/variant.h"
#include "pipeline/engine.h"
#include "t3/t3.h"

const char cli_gen_help[] =
    "  --temperature T           default 0.8\n"
    "  --top-k K                 Turbo/Nano: default 1000; English and\n"
    "                            multilingual: unused\n"
    "                            (K = 1 is greedy for every model: the argmax\n"
    "                            after the repetition penalty)\n"
    "  --top-p P                 default 0.95 (Turbo/Nano), 1.0 (the others)\n"
    "  --min-p P                 English and multilingual: default 0.05\n"
    "  --repetition-penalty R    default 1.2\n"
    "  --max-tokens N            speech tokens sampled per segment, stop included\n"
    "                            (default 1001 for Turbo/Nano, 1000 for the\n"
    "                            others: about 40 s)\n"
    "  --cfg-weight W            English and multilingual: classifier-free\n"
    "                            guidance (default 0.5; 0 decodes without the\n"
    "                            unconditional row)\n"
    "  --exaggeration E          English and multilingual: emotion exaggeration\n"
    "                            (default: the voice's, 0.5 for the built-in\n"
    "                            voice)\n"
    "  --alignment-guard         English/multilingual only: follow T3's attention\n"
    "                            over the text (upstream's former alignment\n"
    "                            analyzer) for long texts: no stop before the\n"
    "                            end of the text, a forced stop on a long tail,\n"
    "                            a repeated passage or THREE equal speech tokens\n"
    "                            in a row (upstream's code stopped on two)\n"
    "  --language L              multilingual models only: ar da de el en es fi\n"
    "                            fr he hi it ja ko ms nl no pl pt ru sv sw tr zh\n"
    "                            (ja: kanji to hiragana with kakasi; zh: Cangjie\n"
    "                            codes from the model's Cangjie5_TC.json,\n"
    "                            unsegmented as upstream without pkuseg)\n"
    "  --text-ids \"I J K ...\"    the text as T3 token ids instead of text (the\n"
    "                            start/stop text tokens are added, as upstream's\n"
    "                            generate() does)\n"
    "  --t3 FILE                 a T3 weight file (.safetensors or .gguf) in place\n"
    "                            of the model's, e.g. a single-language pack's;\n"
    "                            it must fit the model (backbone, vocabularies)\n";

static const char *const options[] = {"--temperature", "--top-k", "--top-p", "--min-p",
                                      "--repetition-penalty", "--max-tokens", "--cfg-weight",
                                      "--exaggeration", "--language", "--text-ids", "--t3"};

bool cli_gen_is_option(const char *opt)
{
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
        if (!strcmp(opt, options[i])) return true;
    return false;
}

bool cli_gen_flag(struct cli_gen *g, const char *opt)
{
    if (strcmp(opt, "--alignment-guard")) return false;
    g->alignment_guard = true;
    return true;
}

/* "i j k" (spaces, commas or tabs between) -> ids */
static bool parse_ids(struct cli_gen *g, const char *cmd, const char *s)
{
    size_t cap = 16;
    int64_t n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return cli_usage_error(cmd, "out of memory") && false;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > 1000000 ||
            (*end && *end != ' ' && *end != ',' && *end != '\t' && *end != '\n')) {
            free(ids);
            cli_usage_error(cmd, "--text-ids needs non-negative integers separated by spaces, got '%s'", s);
            return false;
        }
        if ((size_t)n == cap) {
            int32_t *t = realloc(ids, 2 * cap * sizeof *ids);
            if (!t) {
                free(ids);
                cli_usage_error(cmd, "out of memory");
                return false;
            }
            ids = t;
            cap *= 2;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    if (n == 0) {
        free(ids);
        cli_usage_error(cmd, "--text-ids is empty");
        return false;
    }
    free(g->text_ids);
    g->text_ids = ids;
    g->n_text_ids = n;
    return true;
}

bool cli_gen_parse(struct cli_gen *g, const char *cmd, const char *opt, const char *val)
{
    double v;
    if (!strcmp(opt, "--language")) {
        g->language = val;
        return true;
    }
    if (!strcmp(opt, "--text-ids")) return parse_ids(g, cmd, val);
    if (!strcmp(opt, "--t3")) {
        if (!*val) return cli_usage_error(cmd, "--t3 needs a file") && false;
        g->t3 = val;
        return true;
    }
    struct { const char *name; double lo, hi; double *d; int *i; unsigned bit; } t[] = {
        {"--temperature", 1e-6, 100, &g->temperature, NULL, CLI_GEN_TEMPERATURE},
        {"--top-k", 0, 1000000, NULL, &g->top_k, CLI_GEN_TOP_K},
        {"--top-p", 0, 1, &g->top_p, NULL, CLI_GEN_TOP_P},
        {"--min-p", 0, 1, &g->min_p, NULL, CLI_GEN_MIN_P},
        {"--repetition-penalty", 1e-6, 100, &g->repetition_penalty, NULL, CLI_GEN_REPETITION},
        {"--max-tokens", 1, 100000, NULL, &g->max_tokens, CLI_GEN_MAX_TOKENS},
        {"--cfg-weight", 0, 100, &g->cfg_weight, NULL, CLI_GEN_CFG},
        {"--exaggeration", 0, 100, &g->exaggeration, NULL, CLI_GEN_EXAGGERATION},
    };
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        if (strcmp(opt, t[k].name)) continue;
        if (t[k].i) {
            long long x;
            if (!cli_parse_int(cmd, opt, val, (long long)t[k].lo, (long long)t[k].hi, &x)) return false;
            *t[k].i = (int)x;
        } else {
            if (!cli_parse_num(cmd, opt, val, t[k].lo, t[k].hi, &v)) return false;
            *t[k].d = v;
        }
        g->set |= t[k].bit;
        return true;
    }
    cli_usage_error(cmd, "unknown option '%s'", opt);
    return false;
}

bool cli_gen_apply(const struct cli_gen *g, const char *cmd, const struct engine_model *m,
                   struct engine_params *p)
{
    const char *name = model_variant_info(engine_model_variant(m))->name;
    const bool cfg = engine_model_t3(m)->order == T3_ORDER_CFG;
    const unsigned llama_only = CLI_GEN_MIN_P | CLI_GEN_CFG | CLI_GEN_EXAGGERATION;
    if (!cfg && (g->set & llama_only)) {
        fprintf(stderr, "chatterbox %s: --%s is not an option of the %s model (English and multilingual only)\n", cmd,
                g->set & CLI_GEN_MIN_P ? "min-p" : g->set & CLI_GEN_CFG ? "cfg-weight" : "exaggeration", name);
        return false;
    }
    if (!cfg && g->alignment_guard) {
        fprintf(stderr, "chatterbox %s: --alignment-guard is not an option of the %s model (English and "
                        "multilingual only)\n", cmd, name);
        return false;
    }
    if (g->language && !variant_get(engine_model_variant(m))->languages) {
        fprintf(stderr, "chatterbox %s: --language: the %s model speaks one language (only the multilingual "
                        "models take a language)\n", cmd, name);
        return false;
    }
    const struct variant *row = variant_get(engine_model_variant(m));
    if (g->language && !variant_has_language(row, g->language)) { /* with --text-ids too */
        fprintf(stderr, "chatterbox %s: --language: unsupported language \"%.32s\"; the %s model takes one of:", cmd,
                g->language, name);
        for (int i = 0; row->languages[i]; i++) fprintf(stderr, "%s %s", i ? "," : "", row->languages[i]);
        fputc('\n', stderr);
        return false;
    }
    const struct engine_params d = engine_model_default_params(m);
    p->s = d.s;
    p->max_tokens = d.max_tokens;
    p->max_segment_tokens = d.max_segment_tokens;
    p->min_speech_per_text = d.min_speech_per_text;
    p->cfg_weight = d.cfg_weight;
    if (g->set & CLI_GEN_TEMPERATURE) p->s.temperature = g->temperature;
    if (g->set & CLI_GEN_TOP_K) p->s.top_k = g->top_k;
    if (g->set & CLI_GEN_TOP_P) p->s.top_p = g->top_p;
    if (g->set & CLI_GEN_MIN_P) p->s.min_p = g->min_p;
    if (g->set & CLI_GEN_REPETITION) p->s.repetition_penalty = g->repetition_penalty;
    if (g->set & CLI_GEN_MAX_TOKENS) p->max_tokens = g->max_tokens;
    if (g->set & CLI_GEN_CFG) p->cfg_weight = g->cfg_weight;
    if (g->set & CLI_GEN_EXAGGERATION) p->exaggeration = g->exaggeration;
    p->text_ids = g->text_ids;
    p->n_text_ids = g->n_text_ids;
    p->language = g->language;
    p->alignment_guard = g->alignment_guard;
    return true;
}

void cli_gen_free(struct cli_gen *g)
{
    free(g->text_ids);
    g->text_ids = NULL;
    g->n_text_ids = 0;
}
