/* variant.c - the variant table (variant.h). One row per variant; each
 * value names where upstream sets it (chatterbox 5de7a54). */
#include "io/variant.h"

#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "text/punc_norm.h"

_Static_assert((int)VARIANT_TEXT_ENGLISH == (int)PUNC_ENGLISH &&
                   (int)VARIANT_TEXT_MULTILINGUAL == (int)PUNC_MULTILINGUAL &&
                   (int)VARIANT_TEXT_TURBO == (int)PUNC_TURBO,
               "variant_text_rules mirrors punc_variant");

/* conds.pt entries (upstream T3Cond fields, then the S3Gen ref_dict,
 * voice.md §8) that loaders read and a converted file carries; other
 * entries of the file are not used. The same for every variant. */
static const char *const conds_keys[VARIANT_MAX_CONDS_KEYS + 1] = {
    "t3.speaker_emb",       "t3.clap_emb",     "t3.cond_prompt_speech_tokens",
    "t3.cond_prompt_speech_emb", "t3.emotion_adv", "gen.prompt_token",
    "gen.prompt_token_len", "gen.prompt_feat", "gen.prompt_feat_len", "gen.embedding", NULL,
};

/* mtl_tts.py SUPPORTED_LANGUAGES (tokenizers.md §3) */
static const char *const mtl_languages[VARIANT_N_LANGUAGES + 1] = {
    "ar", "da", "de", "el", "en", "es", "fi", "fr", "he", "hi", "it", "ja",
    "ko", "ms", "nl", "no", "pl", "pt", "ru", "sv", "sw", "tr", "zh", NULL,
};

/* tts_turbo.py: temperature, top-k, top-p, repetition penalty, each only
 * when it does something (t3.md §7.2); generate(): 0.8, 1000, 0.95, 1.2,
 * max_gen_len 1000 -> 1 + 1000 samples. */
#define TURBO_T3                                                                          \
    .backbone = VARIANT_T3_GPT2,                                                          \
    .processors = {VARIANT_PROC_TEMPERATURE, VARIANT_PROC_TOP_K, VARIANT_PROC_TOP_P,      \
                   VARIANT_PROC_REPETITION, VARIANT_PROC_END},                            \
    .cfg = false, .stop_on_first = false, .keep_stop = false,                             \
    .start_text = -1, .stop_text = -1, .speech_dict_size = 6563,                          \
    .sampling = {.temperature = 0.8, .top_k = 1000, .top_p = 0.95, .min_p = 0.0,          \
                 .repetition_penalty = 1.2, .cfg_weight = 0.0, .exaggeration = 0.0,       \
                 .max_tokens = 1001}

/* t3.py inference: CFG combine, repetition, temperature, min-p, top-p
 * (t3.md §7.1); tts.py / mtl_tts.py generate(): 0.8, min_p 0.05, top_p 1.0,
 * repetition 1.2, cfg_weight 0.5, exaggeration 0.5, max_new_tokens 1000. */
#define LLAMA_T3                                                                          \
    .backbone = VARIANT_T3_LLAMA,                                                         \
    .processors = {VARIANT_PROC_CFG, VARIANT_PROC_REPETITION, VARIANT_PROC_TEMPERATURE,   \
                   VARIANT_PROC_MIN_P, VARIANT_PROC_TOP_P, VARIANT_PROC_END},             \
    .cfg = true, .stop_on_first = true, .keep_stop = true,                                \
    .start_text = 255, .stop_text = 0, .speech_dict_size = 8194,                          \
    .sampling = {.temperature = 0.8, .top_k = 0, .top_p = 1.0, .min_p = 0.05,             \
                 .repetition_penalty = 1.2, .cfg_weight = 0.5, .exaggeration = 0.5,       \
                 .max_tokens = 1000}

/* tts_turbo.py: speech_tokens[speech_tokens < 6561], then S3GEN_SIL (4299)
 * x 3; S3Gen meanflow, n_cfm_timesteps=2. */
#define TURBO_AUDIO                                                                       \
    .drop_invalid = false, .keep_below = VARIANT_SPEECH_VOCAB,                            \
    .silence = {4299, 4299, 4299}, .n_silence = 3, .trim_last_token = false,              \
    .solver = VARIANT_CFM_MEANFLOW, .cfm_steps = 2, .cfm_cfg_rate = 0.0

/* tts.py: drop_invalid_tokens, then < 6561; standard CFM, 10 steps, CFG
 * 0.7. mtl_tts.py has no "< 6561" filter; ours applies it (overview.md §9:
 * an id >= 6561 would index past the S3Gen token table) and keeps
 * mtl_tts.py's cut of the last token's audio. */
#define LLAMA_AUDIO(trim)                                                                 \
    .drop_invalid = true, .keep_below = VARIANT_SPEECH_VOCAB,                             \
    .silence = {0}, .n_silence = 0, .trim_last_token = (trim),                            \
    .solver = VARIANT_CFM_STANDARD, .cfm_steps = 10, .cfm_cfg_rate = 0.7

/* tts_turbo.py: ENC_COND_LEN 15 s, speech_cond_prompt_len 375, assert
 * len > 5 s, norm_loudness to -27 LUFS. tts.py / mtl_tts.py: 6 s, 150, no
 * check and no loudness step: the 1 s minimum is ours, the shortest clip
 * whose prompt (25 tokens, 50 mel frames) still means something and that
 * every stage accepts. */
#define TURBO_VOICE {15, 375, 5.0, true, true, -27.0}
#define LLAMA_VOICE {6, 150, 1.0, false, false, 0.0}

/* Long text (engine.h): segment budget and early-stop floor per text
 * token. Ordinary English speech is ~15 characters and 25 speech tokens a
 * second: a GPT-2 token (~4 characters) is ~6 speech tokens, a grapheme
 * token (~2-3 characters) ~1.5 (60 GPT-2 tokens ~ 150 grapheme tokens). */
#define SEGMENT_GPT2 .segment = {60, 2.0}
#define SEGMENT_GRAPHEME .segment = {150, 0.5}

#define GPT2_TOKENIZER                                                                    \
    .tokenizer = VARIANT_TOK_GPT2_BPE,                                                    \
    .tokenizer_files = {"vocab.json", "merges.txt", "added_tokens.json",                  \
                        "special_tokens_map.json", "tokenizer_config.json", "tokenizer.json", \
                        NULL},                                                            \
    .tokenizer_data_dir = "chatterbox-turbo", .text_vocab = 50276,                        \
    .text_rules = VARIANT_TEXT_TURBO, .languages = NULL

#define MTL_TOKENIZER                                                                     \
    .tokenizer = VARIANT_TOK_GRAPHEME,                                                    \
    .tokenizer_files = {"grapheme_mtl_merged_expanded_v1.json", "Cangjie5_TC.json", NULL}, \
    .tokenizer_data_dir = NULL, .text_vocab = 2454,                                       \
    .text_rules = VARIANT_TEXT_MULTILINGUAL, .languages = mtl_languages

/* from_pretrained of each (overview.md §3), restricted to what our loaders
 * read; tokenizer files that only some front ends read are optional, as
 * snapshot_download's allow-patterns skip absent ones silently. */
#define TURBO_DOWNLOAD(t3)                                                                \
    .download_required = {t3, "s3gen_meanflow.safetensors", "ve.safetensors", "conds.pt", \
                          "vocab.json", "merges.txt", NULL},                              \
    .download_optional = {"added_tokens.json", "special_tokens_map.json",                 \
                          "tokenizer_config.json", "tokenizer.json", NULL}

/* mtl_tts.py from_pretrained's allow-patterns, every one read: the
 * Cangjie table by the zh front end (tokenizers.md §3.1) */
#define MTL_DOWNLOAD(t3)                                                                  \
    .download_required = {"ve.pt", t3, "s3gen.pt", "grapheme_mtl_merged_expanded_v1.json", \
                          "conds.pt", "Cangjie5_TC.json", NULL},                          \
    .download_optional = {NULL}

static const struct variant rows[MODEL_N_VARIANTS] = {
    [MODEL_TURBO] = {
        .id = MODEL_TURBO, .name = "turbo", .aliases = {"chatterbox-turbo", NULL},
        .description = "Chatterbox-Turbo: GPT-2 medium T3, meanflow S3Gen, English",
        .file = {"t3_turbo_v1.safetensors", "s3gen_meanflow.safetensors", "ve.safetensors"},
        .conds_file = "conds.pt", .conds_keys = conds_keys,
        .hf_repo = "ResembleAI/chatterbox-turbo", .hf_cache_subdir = "ResembleAI/chatterbox-turbo",
        TURBO_DOWNLOAD("t3_turbo_v1.safetensors"),
        GPT2_TOKENIZER, SEGMENT_GPT2, TURBO_T3, TURBO_AUDIO, .voice = TURBO_VOICE,
    },
    [MODEL_NANO] = {
        .id = MODEL_NANO, .name = "nano", .aliases = {"chatterbox-nano", NULL},
        .description = "Chatterbox-Nano: GPT-2 small T3, meanflow S3Gen, English",
        .file = {"t3_nano_v1.safetensors", "s3gen_meanflow.safetensors", "ve.safetensors"},
        .conds_file = "conds.pt", .conds_keys = conds_keys,
        .hf_repo = "ResembleAI/chatterbox-nano", .hf_cache_subdir = "ResembleAI/chatterbox-nano",
        TURBO_DOWNLOAD("t3_nano_v1.safetensors"),
        GPT2_TOKENIZER, SEGMENT_GPT2, TURBO_T3, TURBO_AUDIO, .voice = TURBO_VOICE,
    },
    [MODEL_ENGLISH] = {
        .id = MODEL_ENGLISH, .name = "english", .aliases = {NULL},
        .description = "Chatterbox (original): Llama T3 with CFG and exaggeration, standard CFM, English",
        .file = {"t3_cfg.safetensors", "s3gen.safetensors", "ve.safetensors"},
        .conds_file = "conds.pt", .conds_keys = conds_keys,
        .hf_repo = "ResembleAI/chatterbox", .hf_cache_subdir = "ResembleAI/chatterbox",
        .download_required = {"ve.safetensors", "t3_cfg.safetensors", "s3gen.safetensors",
                              "tokenizer.json", "conds.pt", NULL},
        .download_optional = {NULL},
        .tokenizer = VARIANT_TOK_GRAPHEME, .tokenizer_files = {"tokenizer.json", NULL},
        .tokenizer_data_dir = NULL, .text_vocab = 704, .text_rules = VARIANT_TEXT_ENGLISH,
        .languages = NULL, SEGMENT_GRAPHEME,
        LLAMA_T3, LLAMA_AUDIO(false), .voice = LLAMA_VOICE,
    },
    /* English and multilingual share a repository but get a cache
     * directory each, so model_dir_open() detects either without
     * ambiguity; so do v2 and v3. */
    [MODEL_MTL_V2] = {
        .id = MODEL_MTL_V2, .name = "mtl-v2", .aliases = {"multilingual", "mtl", NULL},
        .description = "Chatterbox Multilingual v2: Llama T3, standard CFM, 23 languages",
        .file = {"t3_mtl23ls_v2.safetensors", "s3gen.pt", "ve.pt"},
        .conds_file = "conds.pt", .conds_keys = conds_keys,
        .hf_repo = "ResembleAI/chatterbox", .hf_cache_subdir = "ResembleAI/chatterbox-multilingual",
        MTL_DOWNLOAD("t3_mtl23ls_v2.safetensors"),
        MTL_TOKENIZER, SEGMENT_GRAPHEME, LLAMA_T3, LLAMA_AUDIO(true), .voice = LLAMA_VOICE,
    },
    [MODEL_MTL_V3] = {
        .id = MODEL_MTL_V3, .name = "mtl-v3", .aliases = {"multilingual-v3", NULL},
        .description = "Chatterbox Multilingual v3: v2's architecture, newer T3 weights",
        .file = {"t3_mtl23ls_v3.safetensors", "s3gen.pt", "ve.pt"},
        .conds_file = "conds.pt", .conds_keys = conds_keys,
        .hf_repo = "ResembleAI/chatterbox", .hf_cache_subdir = "ResembleAI/chatterbox-multilingual-v3",
        MTL_DOWNLOAD("t3_mtl23ls_v3.safetensors"),
        MTL_TOKENIZER, SEGMENT_GRAPHEME, LLAMA_T3, LLAMA_AUDIO(true), .voice = LLAMA_VOICE,
    },
};

const struct variant *variant_get(enum model_variant v)
{
    return (int)v >= 0 && v < MODEL_N_VARIANTS ? &rows[v] : NULL;
}

const struct variant *variant_by_name(const char *name)
{
    for (int v = 0; name && v < MODEL_N_VARIANTS; v++) {
        if (!strcmp(name, rows[v].name)) return &rows[v];
        for (int a = 0; rows[v].aliases[a]; a++)
            if (!strcmp(name, rows[v].aliases[a])) return &rows[v];
    }
    return NULL;
}

const struct variant *variant_by_t3_file(const char *file)
{
    for (int v = 0; file && v < MODEL_N_VARIANTS; v++)
        if (!strcmp(file, rows[v].file[MODEL_T3])) return &rows[v];
    return NULL;
}

const char *variant_names(void) { return "turbo, nano, english, mtl-v2, mtl-v3"; }

bool variant_has_language(const struct variant *v, const char *code)
{
    for (int i = 0; v && code && v->languages && v->languages[i]; i++)
        if (!strcasecmp(code, v->languages[i])) return true;
    return false;
}

int64_t variant_filter_speech(const struct variant *v, int32_t *tokens, int64_t n)
{
    int64_t s = 0, e = n;
    if (v->drop_invalid) {
        /* tts.py drop_invalid_tokens: x[s:e], s after the first SOS (6561),
         * e at the first EOS (6562); upstream assumes at most one of each */
        for (int64_t i = 0; i < n; i++)
            if (tokens[i] == VARIANT_START_SPEECH) { s = i + 1; break; }
        for (int64_t i = 0; i < n; i++)
            if (tokens[i] == VARIANT_STOP_SPEECH) { e = i; break; }
        if (e < s) e = s; /* torch slicing: an empty result */
    }
    int64_t k = 0;
    for (int64_t i = s; i < e; i++)
        if (tokens[i] >= 0 && tokens[i] < v->keep_below) tokens[k++] = tokens[i];
    return k;
}
