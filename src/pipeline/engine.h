/* engine.h - text -> 24 kHz speech: the whole Turbo pipeline of
 * chatterbox tts_turbo.py (ChatterboxTurboTTS.generate, chatterbox 0.1.7)
 * behind one call, plus what upstream leaves to its callers: long text
 * split into segments the model was trained on, joined with short pauses,
 * early-stop retries, per-stage timings, progress and cancellation.
 *
 * Per segment, in upstream order (spec/overview.md §4, §6, §7):
 *   punc_norm (Turbo rules) -> GPT-2 BPE (truncated at model_max_length)
 *   -> T3.inference_turbo -> keep ids < 6561 -> append 3 x S3GEN_SIL (4299)
 *   -> S3Gen.inference (meanflow, 2 steps; fade-in of the first 960 samples).
 * No Perth watermark (a separate network upstream; overview.md §7).
 *
 * Long text (engine_split):
 *   1. the raw text is cut into sentences after . ! ? ... followed by white
 *      space, after each script's own sentence ends (CJK 。！？ with no
 *      space needed, Devanagari । ॥, Arabic ؟ ۔, Greek ;, text/splitter.h),
 *      and at line breaks; a '.' after a common abbreviation ("Mr.",
 *      "e.g.") or a single letter ("J. Smith") does not end a sentence;
 *   2. a sentence longer than the token budget is cut at , ; : or a dash
 *      (and CJK / Arabic clause marks), and failing that between words (or
 *      between Han / kana characters, never inside a character's marks);
 *   3. consecutive pieces are packed greedily into segments of at most
 *      `max_segment_tokens` GPT-2 tokens (so a short text stays ONE segment
 *      and goes through exactly as upstream's generate() would take it,
 *      and very short sentences ride along with their neighbours); a last
 *      segment under 1/8 of the budget joins the previous one even over
 *      budget (up to 1.5x);
 *   4. a segment without any letter or digit (Unicode L* / N*) is skipped.
 * The default budget, 60 tokens (about 45 English words, 15-20 s of
 * speech, about 400-500 speech tokens), keeps each segment a "short
 * paragraph" as the model was trained on and well inside the 1000-token
 * speech cap.
 *
 * Early-stop retry: a segment whose T3 output has fewer than
 * `min_speech_per_text` (2.0) speech tokens per text token, without having
 * reached the token cap, is re-generated with up to `max_retries` (2) other
 * seeds and the attempt with the most speech tokens is kept. Why 2: speech
 * tokens run at 25 per second and one GPT-2 token of English is 0.2-0.4 s
 * of speech (2.5-5 words per second, ~1.3 tokens per word), i.e. 5-10
 * speech tokens per text token; even very fast speech (6 words/s) gives
 * ~3.2, so below 2 the model has dropped words. Greedy decoding (top_k 1)
 * is deterministic, so it is never retried.
 *
 * Seeds: segment 0, first attempt, uses `seed` itself for T3 sampling and
 * every S3Gen stream (as upstream's single torch.manual_seed, rng.md), so a
 * one-segment text reproduces upstream; segment i, attempt j otherwise uses
 * engine_seed(seed, i, j) (splitmix64 of seed, i, j): deterministic.
 *
 * Joining: between two segments `pause_ms` (default 100 ms) of zeros. Each
 * Turbo segment already ends in the audio of three silence tokens (120 ms)
 * and starts with S3Gen's 20 ms silence + 20 ms fade-in, so the gap heard
 * is ~250 ms, a natural sentence pause.
 *
 * Chunks: the callback receives each segment's audio (preceded by its
 * pause) as soon as it exists; concatenating the chunks gives exactly the
 * returned audio. With `stream` the chunks are smaller: the T3 tokens of
 * a segment feed S3Gen chunk by chunk as they are sampled (stream.h), the
 * pause goes out as a chunk of its own before the segment's first audio.
 *
 * Voice prefix cache: T3's input is [speaker; voice prompt tokens; text;
 * start-of-speech] and GPT-2 is causal, so the keys/values of the first
 * 1 + P positions depend on the voice alone (t3.h, t3_prefix). The engine
 * computes them once per voice and reuses them for every segment of a
 * call and, through a small per-model cache (engine_load_params
 * .voice_cache entries, least recently used out; 19.6 MB each for a
 * quantised Turbo (Q8_0 cache), 74 MB for an F32 one, with Turbo's
 * 375-token prompt), for later calls in the same voice (say --lines, a C
 * API program speaking many texts, streaming). Voices are matched by
 * content (speaker embedding and prompt tokens), not by address. A cached
 * prefix gives bit-identical tokens to a freshly built one, so the output
 * never depends on what was spoken before. With engine_load_params
 * .prefix_dir the prefixes are also kept on disk (prefix_store.h): a miss
 * in memory looks there before building, and a prefix built by a call is
 * written there after the call's audio is out, so later processes (each
 * `say`) start as warm as a later call in the same process.
 *
 * Thread safety: an engine_model is immutable after loading and may serve
 * any number of concurrent calls. What calls share that changes is the
 * voice prefix cache, an object of its own with its own locks
 * (prefix_cache.h) that the model points to; working memory kept between
 * calls belongs to the caller (engine_work, engine_params.work), never to
 * the model. Each concurrent call needs its own backend (or a backend's
 * pool used by one call at a time) and its own engine_work.
 *
 * Batched decoding: calls whose backend is a host backend over the
 * process-wide pool (backend_cpu_create_shared, as every cbx_context's)
 * decode T3 through the model's scheduler (scheduler.h): each call
 * prefills its segment in its own thread, the scheduler's thread decodes
 * the sequences of all such calls together, one batched forward per step,
 * and hands each call its tokens, which the call turns into audio in its
 * own thread (S3Gen never runs inside a T3 step). A call's tokens and
 * audio are exactly what it gives alone (tests/pipeline/test_sched.c).
 * Other calls (a private pool, as the CLI's) decode alone, as before. */
#ifndef CBX_PIPELINE_ENGINE_H
#define CBX_PIPELINE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "io/model_dir.h"
#include "t3/sampler.h"
#include "voice/conds.h"

struct backend;
struct engine_model; /* opaque: model file, tokenizer, T3, S3Gen, built-in voice */

#define ENGINE_SAMPLE_RATE 24000
/* Room for the silence tokens a row appends before S3Gen (variant.h
 * silence, n_silence: Turbo/Nano 3 x S3GEN_SIL 4299). */
#define ENGINE_N_SIL VARIANT_MAX_SILENCE
#define ENGINE_SAMPLES_PER_TOKEN 960 /* 2 mel frames x 480 samples */

/* Where a call's T3 voice prefix came from (engine_stats.prefix_source). */
enum { ENGINE_PREFIX_BUILT, ENGINE_PREFIX_MEMORY, ENGINE_PREFIX_DISK };

struct engine_load_params {
    int wtype; /* enum dtype of the linear weights; < 0: as stored (F32 for a
                * directory, the file's quantisation for a GGUF) */
    int voice_cache; /* T3 voice prefixes kept between calls (see "Voice
                      * prefix cache" below): 0 = the default, 2; < 0 = none
                      * (a call still shares one among its segments) */
    const char *prefix_dir; /* a directory keeping voice prefixes between
                             * processes (prefix_store.h), copied; NULL or
                             * "": none */
    bool t3_only;           /* skip S3Gen (engine_tokens needs T3 alone);
                             * engine_synthesize then fails */
    const char *t3_path;    /* a T3 weight file (safetensors or GGUF) used
                             * in place of the model's own (Resemble's
                             * single-language packs are multilingual T3
                             * files under other names); its backbone is
                             * told by its tensors and must fit the model
                             * (backbone, text vocabulary = the tokenizer's,
                             * speech vocabulary, speaker embedding). The
                             * string is not kept; NULL: the model's */
    const struct backend *be; /* the backend holding the weights (placed
                               * at load, core/weights.h); it must outlive
                               * the model, and the backends the calls
                               * compute with must be of its kind. NULL: a
                               * backend the model makes and owns, named by
                               * `backend` */
    const char *backend;      /* when be is NULL: "cpu", "cuda", "cuda:N"
                               * or "auto"/NULL (cuda when built and a
                               * device is present, else cpu;
                               * core/backend.h backend_create) */
};
struct engine_load_params engine_load_default_params(void);

/* Open path (HF snapshot directory or converted GGUF, io/model_file.h) and
 * load tokenizer, T3, S3Gen and the built-in voice; every variant of the
 * table (io/variant.h). *out owned by the caller, engine_model_free(). On
 * failure *out is NULL and err names the path and the problem. Also
 * records the load time (engine_model_load_seconds). */
cbx_status engine_model_load(const char *path, const struct engine_load_params *p,
                             struct engine_model **out, char *err);
void engine_model_free(struct engine_model *m); /* no-op on NULL */

enum model_variant engine_model_variant(const struct engine_model *m);
/* The loaded T3 (read-only; borrowed from m). */
struct t3_model;
const struct t3_model *engine_model_t3(const struct engine_model *m);
/* The opened model file and the loaded S3Gen (NULL when loaded with
 * t3_only), read-only and borrowed from m, e.g. for voice conversion
 * (vc_model_borrow). */
struct model;
struct s3gen;
const struct model *engine_model_file(const struct engine_model *m);
const struct s3gen *engine_model_s3gen(const struct engine_model *m);
/* The figures of m's T3 scheduler (scheduler.h). */
struct sched_stats;
void engine_model_sched_stats(const struct engine_model *m, struct sched_stats *st);
/* The backend holding m's weights (engine_load_params). */
const struct backend *engine_model_backend(const struct engine_model *m);
/* Wall seconds engine_model_load took. */
double engine_model_load_seconds(const struct engine_model *m);
/* The built-in voice (conds.pt); borrowed from m. */
const struct conds *engine_model_voice(const struct engine_model *m);

/* A voice from a voice file (.voice GGUF), a directory of conditioning
 * .npy files, or an audio file conditioned on the fly (needs a model
 * directory: the voice networks are not in a converted GGUF yet). Checked
 * against the model: 256-value speaker embedding, 192-value x-vector,
 * prompt tokens. *out owned by the caller, conds_free(). be may be NULL. */
cbx_status engine_voice_load(const struct engine_model *m, const struct backend *be,
                             const char *path, struct conds *out, char *err);

struct engine_params {
    struct sampler_params s; /* Turbo: temperature 0.8, top_k 1000, top_p 0.95,
                              * min_p 0 (unused by Turbo), repetition 1.2 */
    int max_tokens;          /* sampled speech tokens per segment incl. stop:
                              * max_gen_len + 1 = 1001 */
    uint64_t seed;           /* see "Seeds" above; default 0 */
    int cfm_steps;           /* <= 0: the model's (2 for meanflow) */
    bool split;              /* long-text splitting (default true); false: the
                              * whole text is one segment, as upstream */
    int max_segment_tokens;  /* 60 */
    int pause_ms;            /* 100 */
    int max_retries;         /* 2 */
    double min_speech_per_text; /* 2.0 */
    /* streaming (pipeline/stream.h): each segment's audio reaches `chunk`
     * in pieces while T3 still runs; no early-stop retries (audio already
     * delivered cannot be taken back) */
    bool stream;             /* false */
    int stream_first_tokens; /* speech tokens before the first chunk: 10 */
    int stream_chunk_tokens; /* the second chunk; later ones double up to 80: 20 */
    int stream_prompt_tokens; /* streaming only: S3Gen's reference prompt cut to
                               * its last N tokens (and 2N mel frames). Every
                               * chunk re-runs the flow over the prompt and its
                               * tokens, so the prompt sets the floor of every
                               * chunk's cost (Turbo's built-in voice: 250
                               * tokens, 500 frames); a shorter one trades
                               * reference for latency (the speaker x-vector is
                               * kept). Default 50 (2 s: with
                               * stream_context_tokens, a stream then costs
                               * about what the whole utterance does; 1.03-
                               * 1.06x in bench_stream here, 1.45-1.59x with
                               * 100); 0: the whole prompt. */
    int stream_first_prompt_tokens; /* streaming only: the first chunk alone is
                               * conditioned on the last N prompt tokens
                               * (stream.h invariant 7), bounding first-audio
                               * latency; default 25 (1 s of reference);
                               * 0: as every other chunk */
    int stream_context_tokens; /* streaming only: each chunk's flow sees the
                               * generated tokens from N before its first new
                               * mel frame on (stream.h invariant 8), so a
                               * chunk's cost does not grow with the
                               * utterance; default 32; 0: every token so far */
    int precision;            /* S3Gen products: ENGINE_PREC_AUTO (default: BF16
                               * for quantised weights, else F32), _F32, _BF16 */
    /* Llama T3 (English, multilingual) */
    double cfg_weight;        /* classifier-free guidance: 0.5; 0 decodes the
                               * conditional row alone (upstream English
                               * fails there; the result is what the formula
                               * gives) */
    double exaggeration;      /* emotion_adv: < 0 (default) the voice's own
                               * (conds.pt / voice file: 0.5 unless made
                               * otherwise) */
    /* Text given as token ids (T3's text vocabulary), without the start/stop
     * text tokens, which are added as upstream's generate() does; the text
     * argument is then ignored and not split. For checking T3 where the
     * tokenizer file is not at hand. Borrowed for the call. */
    const int32_t *text_ids;
    int64_t n_text_ids;
    /* multilingual models: the language code ("fr"; NULL: no language
     * token, as upstream accepts None); an error for other variants */
    const char *language;
    /* Llama T3 (English, multilingual): the alignment guard against
     * long-form failures (t3/alignment.h: no early stop before the text
     * is spoken, a forced stop on a long tail, a repeated passage or three
     * equal tokens); false (default); an error for Turbo and Nano */
    bool alignment_guard;
    /* the caller's working memory (engine_work_create), used by one call
     * at a time; NULL: the call makes and frees its own */
    struct engine_work *work;
};
enum { ENGINE_PREC_AUTO = 0, ENGINE_PREC_F32 = 1, ENGINE_PREC_BF16 = 2 };
struct engine_params engine_default_params(void);
/* Upstream's generate() defaults for m's variant (spec/overview.md §4):
 * Turbo/Nano as engine_default_params; English/multilingual temperature
 * 0.8, min_p 0.05, top_p 1.0, repetition 1.2, cfg_weight 0.5, top_k 0
 * (unused), 1000 tokens, and a segment budget and early-stop threshold
 * for their grapheme tokens. */
struct engine_params engine_model_default_params(const struct engine_model *m);

/* Seed of segment i, attempt j (seed itself for i = j = 0). */
uint64_t engine_seed(uint64_t seed, int i, int j);

/* Working memory one caller keeps between its calls: T3's workspace (KV
 * cache, per-layer scratch) and S3Gen's arena keep their blocks, so calls
 * after the first fault in no new pages. Made empty; filled on first use
 * for the call's backend (another backend: dropped and made again).
 * Belongs to one call at a time (a context's). NULL: out of memory. */
struct engine_work;
struct engine_work *engine_work_create(void);
void engine_work_free(struct engine_work *w); /* no-op on NULL */

/* T3 decode steps run by the model's scheduler (scheduler.h: batched
 * decoding of concurrent calls whose backends are host backends over the
 * process-wide pool, as cbx_context's; other calls decode alone), the
 * rows they carried in all, and the most rows in one step. */
void engine_batch_stats(const struct engine_model *m, int64_t *steps, int64_t *rows, int64_t *max_rows);

/* ---- long text -------------------------------------------------------- */

struct engine_segments {
    char **text;   /* [n] raw segment text (before punc_norm), owned */
    int n;
};
struct text_tokenizer;
/* Split text as described above (text/splitter.h), counting tokens with
 * tok (the model's: engine_model_tokenizer) as the model will see them:
 * with `language` (NULL: none) for the multilingual front end, whose
 * Chinese step makes several ids of one character. Segments without word
 * characters are dropped here. *out owned by the caller,
 * engine_segments_free(). */
cbx_status engine_split(const struct text_tokenizer *tok, const char *text, const char *language,
                        int max_segment_tokens, struct engine_segments *out, char *err);
/* The model's text front end (text/tokenizer.h: GPT-2 BPE for Turbo and
 * Nano, grapheme BPE from tokenizer.json for English); borrowed from m. */
const struct text_tokenizer *engine_model_tokenizer(const struct engine_model *m);
void engine_segments_free(struct engine_segments *s);
/* True when s (UTF-8) has a letter or digit. */
bool engine_has_word(const char *s);

/* ---- synthesis -------------------------------------------------------- */

enum engine_stage { ENGINE_STAGE_T3, ENGINE_STAGE_S3GEN, ENGINE_STAGE_DONE };

struct engine_progress {
    enum engine_stage stage;
    int segment, n_segments; /* current segment (0-based) */
    int attempt;             /* 0, or the retry number */
    int tokens, max_tokens;  /* T3: speech tokens so far in this segment */
    int64_t total_tokens;    /* speech tokens kept so far, all segments */
};
/* Called at each T3 token, each CFM step and at stage changes; nonzero
 * return cancels (CBX_ERR_CANCELLED). */
typedef int (*engine_progress_fn)(void *user, const struct engine_progress *p);
/* Called with each chunk of audio (borrowed for the call); nonzero return
 * cancels. */
typedef int (*engine_chunk_fn)(void *user, const float *pcm, int64_t n, int sample_rate);

struct engine_stats {
    double t_text;      /* split + normalise + tokenise */
    double t_t3;        /* T3 including retries */
    double t_s3gen;     /* flow + HiFT */
    double t_total;
    int n_segments;
    int n_retries;
    int64_t n_text_tokens;
    int64_t n_speech_tokens;  /* kept, before the silence padding */
    int64_t n_t3_steps;       /* all T3 decode steps incl. discarded attempts */
    int64_t n_samples;
    double audio_seconds;
    double t_first_audio;     /* seconds from the call to the first chunk */
    int n_chunks;             /* chunks delivered (pauses not counted) */
    double t_t3_prefix;       /* building or loading the voice prefix (part
                               * of t_t3; 0 when it came from the cache) */
    bool prefix_cached;       /* the voice prefix came from the cache */
    int prefix_source;        /* ENGINE_PREFIX_*: where it came from */
    bool prefix_saved;        /* this call wrote it to the prefix store */
    char prefix_note[ERR_MAX];/* why the store's file was not used or not
                               * written ("" when nothing went wrong) */
    bool s3gen_bf16;          /* S3Gen was asked for BF16 products
                               * (engine_params.precision) */
};

/* Put voice's T3 prefix into the model's cache now (NULL: the built-in
 * voice), so that the next call in that voice starts without it (CFG
 * models on the CPU: with the unconditional row over a segment's text,
 * t3_prefix_extend); a no-op when it is cached already or the cache is
 * off. */
cbx_status engine_prepare_voice(const struct engine_model *m, const struct backend *be,
                                const struct conds *voice, char *err);
/* Empty the voice prefix cache (prefixes in use are freed by their calls). */
void engine_voice_cache_clear(const struct engine_model *m);

/* T3 alone on one segment (no split, no retries): text (or p->text_ids)
 * through the variant's front end and T3, then the variant's speech-token
 * filter: exactly the tokens S3Gen is given (before Turbo's silence tail).
 * Seeds and voice as engine_synthesize. *tokens owned by the caller
 * (free()). */
cbx_status engine_tokens(const struct engine_model *m, const struct backend *be,
                         const struct conds *voice, const char *text, const struct engine_params *p,
                         engine_progress_fn progress, void *user, int32_t **tokens, int64_t *n,
                         char *err);

/* Speak text with voice (NULL: the built-in voice) on backend be. *pcm
 * (when pcm is not NULL) receives the whole audio, owned by the caller
 * (free()); chunk (optional) receives it piece by piece. st (optional)
 * receives timings. Errors: empty text or text with nothing to speak
 * (CBX_ERR_INVALID_ARG), CBX_ERR_CANCELLED from a callback, and the
 * stages' own; on failure *pcm is NULL. */
cbx_status engine_synthesize(const struct engine_model *m, const struct backend *be,
                             const struct conds *voice, const char *text,
                             const struct engine_params *p, engine_chunk_fn chunk,
                             engine_progress_fn progress, void *user, float **pcm, int64_t *n,
                             struct engine_stats *st, char *err);

#endif
