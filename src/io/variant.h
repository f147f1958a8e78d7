/* variant.h - the Chatterbox variants as rows of one table (DESIGN.md "A
 * variant is a row of data"): files and download list, tokenizer and text
 * front end, T3 backbone and its decode policy, sampler defaults, speech
 * token post-processing, S3Gen solver, voice rules, built-in voice. Every
 * per-variant fact lives here once; loaders, the engine, voice cloning,
 * convert, info, download and the synthetic writer read the row.
 *
 * Values are upstream's at chatterbox 5de7a54 (spec/overview.md §2-§7,
 * §10; spec/t3.md §2, §7-§9; spec/tokenizers.md §3), except where a field
 * comment says "ours".
 *
 *   name     T3 file                    S3Gen file                  VE file
 *   turbo    t3_turbo_v1.safetensors    s3gen_meanflow.safetensors  ve.safetensors
 *   nano     t3_nano_v1.safetensors     s3gen_meanflow.safetensors  ve.safetensors
 *   english  t3_cfg.safetensors         s3gen.safetensors           ve.safetensors
 *   mtl-v2   t3_mtl23ls_v2.safetensors  s3gen.pt                    ve.pt
 *   mtl-v3   t3_mtl23ls_v3.safetensors  s3gen.pt                    ve.pt
 *
 * Thread safety: the table is constant; every function: any thread,
 * concurrently. */
#ifndef CBX_IO_VARIANT_H
#define CBX_IO_VARIANT_H

#include <stdbool.h>
#include <stdint.h>

enum model_variant {
    MODEL_TURBO,
    MODEL_NANO,
    MODEL_ENGLISH,
    MODEL_MTL_V2,
    MODEL_MTL_V3,
    MODEL_N_VARIANTS,
};

/* The weight-carrying components of a checkpoint. */
enum model_component {
    MODEL_T3,
    MODEL_S3GEN,
    MODEL_VE,
    MODEL_N_COMPONENTS,
};

#define VARIANT_MAX_ALIASES 3
#define VARIANT_MAX_TOKENIZER_FILES 6
#define VARIANT_MAX_DOWNLOAD_FILES 12
#define VARIANT_MAX_PROCESSORS 6
#define VARIANT_MAX_SILENCE 3
#define VARIANT_N_LANGUAGES 23
#define VARIANT_MAX_CONDS_KEYS 10

/* The S3 speech vocabulary and its two control ids (overview.md §10). */
#define VARIANT_SPEECH_VOCAB 6561
#define VARIANT_START_SPEECH 6561
#define VARIANT_STOP_SPEECH 6562

enum variant_tokenizer {
    VARIANT_TOK_GPT2_BPE,   /* vocab.json + merges.txt + added tokens (tokenizers.md §1) */
    VARIANT_TOK_GRAPHEME,   /* HF tokenizers json, grapheme BPE (tokenizers.md §2, §3) */
};

/* punc_norm rule set (overview.md §6); the values are text/punc_norm.h's
 * enum punc_variant (variant.c checks). */
enum variant_text_rules {
    VARIANT_TEXT_ENGLISH,
    VARIANT_TEXT_MULTILINGUAL,
    VARIANT_TEXT_TURBO,
};

enum variant_backbone {
    VARIANT_T3_GPT2,    /* inference_turbo, t3.md §7.2 */
    VARIANT_T3_LLAMA,   /* inference (CFG pair), t3.md §7.1 */
};

/* Logits processors, listed in the order a decode step applies them. */
enum variant_processor {
    VARIANT_PROC_END = 0,   /* terminates a processor list */
    VARIANT_PROC_CFG,       /* l = cond + w (cond - uncond) */
    VARIANT_PROC_REPETITION,
    VARIANT_PROC_TEMPERATURE,
    VARIANT_PROC_TOP_K,
    VARIANT_PROC_MIN_P,
    VARIANT_PROC_TOP_P,
};

enum variant_solver {
    VARIANT_CFM_MEANFLOW,   /* linear t, no CFG (s3gen.md) */
    VARIANT_CFM_STANDARD,   /* cosine t, CFG with cfm_cfg_rate */
};

/* generate() defaults (overview.md §4). Fields a variant ignores hold 0. */
struct variant_sampling {
    double temperature;
    int top_k;                 /* 0: not used */
    double top_p;              /* 1: a no-op */
    double min_p;              /* 0: not used */
    double repetition_penalty;
    double cfg_weight;         /* 0 for Turbo/Nano (ignored upstream) */
    double exaggeration;       /* emotion_adv; 0 for Turbo/Nano (ignored) */
    int max_tokens;            /* samples incl. the stop token: 1001 / 1000 */
};

/* Long-text splitting (ours, not upstream's: engine.h "Long text"). */
struct variant_segment {
    int max_tokens;             /* text tokens per segment */
    double min_speech_per_text; /* fewer speech tokens per text token: an early stop */
};

/* prepare_conditionals constants (overview.md §5). */
struct variant_voice {
    int enc_cond_seconds;      /* ENC_COND_LEN / 16000: T3 prompt audio */
    int64_t prompt_len;        /* speech_cond_prompt_len: T3 prompt tokens */
    double min_seconds;        /* shortest reference accepted */
    bool min_exclusive;        /* Turbo asserts len > 5 s (strict) */
    bool loudness;             /* norm_loudness exists (default on) */
    double target_lufs;        /* its target; 0 when !loudness */
};

struct variant {
    enum model_variant id;
    const char *name;                                   /* "turbo", "mtl-v2", ... */
    const char *aliases[VARIANT_MAX_ALIASES + 1];       /* NULL-terminated */
    const char *description;                            /* one line for humans */

    /* files (overview.md §3) */
    const char *file[MODEL_N_COMPONENTS];               /* weight file per component */
    const char *conds_file;                             /* built-in voice: "conds.pt" */
    const char *const *conds_keys;                      /* its entries loaders use, NULL-terminated */
    const char *hf_repo;                                /* Hugging Face repository */
    const char *hf_cache_subdir;                        /* under the download cache */
    const char *download_required[VARIANT_MAX_DOWNLOAD_FILES + 1];
    const char *download_optional[VARIANT_MAX_DOWNLOAD_FILES + 1]; /* when the repo has them */

    /* text front end (tokenizers.md) */
    enum variant_tokenizer tokenizer;
    const char *tokenizer_files[VARIANT_MAX_TOKENIZER_FILES + 1]; /* read from the dir */
    const char *tokenizer_data_dir;                     /* copy in data/ for the synthetic writer, or NULL */
    int text_vocab;                                     /* text_tokens_dict_size */
    enum variant_text_rules text_rules;                 /* punc_norm rule set */
    const char *const *languages;                       /* NULL-terminated codes, or NULL: none */
    struct variant_segment segment;                     /* long text */

    /* T3 (t3.md §2, §7-§9) */
    enum variant_backbone backbone;
    enum variant_processor processors[VARIANT_MAX_PROCESSORS + 1]; /* in order, END-terminated */
    bool cfg;                                           /* CFG pair (cond, uncond rows) */
    bool stop_on_first;                                 /* stop checked on the first sample */
    bool keep_stop;                                     /* stop token stays in T3's output */
    int32_t start_text, stop_text;                      /* text wrap tokens, -1: none */
    int speech_dict_size;                               /* speech_tokens_dict_size */
    struct variant_sampling sampling;

    /* speech tokens -> audio (overview.md §7) */
    bool drop_invalid;                                  /* drop_invalid_tokens first */
    int32_t keep_below;                                 /* then keep ids < this (6561) */
    int32_t silence[VARIANT_MAX_SILENCE];               /* appended before S3Gen */
    int n_silence;
    bool trim_last_token;                               /* drop the last token's audio */
    enum variant_solver solver;
    int cfm_steps;
    double cfm_cfg_rate;                                /* 0: no CFG */

    struct variant_voice voice;
};

/* Row of v, or NULL when out of range. Borrowed from the constant table. */
const struct variant *variant_get(enum model_variant v);
/* Row whose name or one of whose aliases is `name` (exact, case-sensitive),
 * or NULL. */
const struct variant *variant_by_name(const char *name);
/* Row whose T3 weight file is `file` (a base name), or NULL. */
const struct variant *variant_by_t3_file(const char *file);
/* "turbo, nano, english, mtl-v2, mtl-v3": the names, for messages. */
const char *variant_names(void);
/* True when `code` (case-insensitive) is one of v's languages. */
bool variant_has_language(const struct variant *v, const char *code);

/* The row's post-filter on T3's output, in place (overview.md §7):
 * drop_invalid_tokens when the row says so (cut after the first 6561,
 * before the first 6562), then keep only ids in [0, keep_below). Returns the
 * new length. */
int64_t variant_filter_speech(const struct variant *v, int32_t *tokens, int64_t n);

/* Kept so callers being restructured elsewhere build unchanged: the same
 * row under its former name. */
static inline const struct variant *model_variant_info(enum model_variant v) { return variant_get(v); }

#endif
