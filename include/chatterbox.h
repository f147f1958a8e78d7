/* chatterbox.h - public C API of chatterbox.c, a native runtime for the
 * Chatterbox text-to-speech models (Resemble AI, MIT).
 *
 * Conventions: every fallible call returns a cbx_status (CBX_OK = 0); the
 * static text of a code comes from cbx_status_str(). Handles are opaque;
 * each constructor has a _free on the same noun that is a no-op on NULL.
 * Ownership is stated at every returned pointer. */
#ifndef CHATTERBOX_H
#define CHATTERBOX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define CBX_API __declspec(dllexport)
#else
#define CBX_API __attribute__((visibility("default")))
#endif

#define CBX_VERSION_MAJOR 0
#define CBX_VERSION_MINOR 1
#define CBX_VERSION_PATCH 0
#define CBX_VERSION_NUMBER \
    ((CBX_VERSION_MAJOR << 16) | (CBX_VERSION_MINOR << 8) | CBX_VERSION_PATCH)
#define CBX_VERSION_STRING "0.1.0"

typedef enum cbx_status {
    CBX_OK = 0,
    CBX_ERR_INVALID_ARG, /* a caller passed a bad value */
    CBX_ERR_IO,          /* a file or stream could not be read or written */
    CBX_ERR_FORMAT,      /* a file's content is malformed or unsupported */
    CBX_ERR_NOMEM,       /* an allocation failed */
    CBX_ERR_UNSUPPORTED, /* valid, but not supported by this build/backend */
    CBX_ERR_NOT_FOUND,   /* a named tensor, file or key does not exist */
    CBX_ERR_INTERNAL,    /* an invariant of ours was broken (a bug) */
    CBX_ERR_CANCELLED,   /* a callback asked to stop */
} cbx_status;

/* Static English text for a status code; never NULL.
 * Thread safety: any thread, concurrently. */
CBX_API const char *cbx_status_str(cbx_status s);

/* Version of the library as linked (compare with CBX_VERSION_STRING).
 * Thread safety: any thread, concurrently. */
CBX_API const char *cbx_version(void);

/* ---- handles --------------------------------------------------------------
 * cbx_model   weights, tokenizer and built-in voice; read-only after load,
 *             shared by any number of contexts and threads.
 * cbx_voice   conditioning of one speaker; read-only after load, shared.
 * cbx_context per-caller working state (thread pool, last error message);
 *             one thread at a time per context. */
typedef struct cbx_model cbx_model;
typedef struct cbx_voice cbx_voice;
typedef struct cbx_context cbx_context;

/* ---- model ------------------------------------------------------------ */

typedef struct cbx_model_params {
    /* Type the linear weights are held in: "f32", "f16", "bf16", "q8_0",
     * "q4_0", ...; NULL: as stored (f32 for a Hugging Face directory, the
     * converted file's type for a .gguf). */
    const char *weight_type;
    /* A directory where each voice's T3 prefix (the keys and values of its
     * speaker and reference-prompt positions, ~0.4 s to compute on a
     * 2-core CPU, ~20 MB for a quantised Turbo) is kept between
     * processes, so the first utterance in a voice is as fast as later
     * ones; created when
     * missing, at most 16 files, least recently used removed. NULL (the
     * default): prefixes are kept in memory only. `chatterbox say` uses
     * ~/.cache/chatterbox/prefixes. */
    const char *prefix_cache_dir;
    /* A T3 weight file (.safetensors or .gguf) loaded in place of the
     * model's own, e.g. one of Resemble's single-language packs (T3 files
     * of the multilingual architecture under other names). Its backbone is
     * told by its tensors, not its name, and it must fit the model (text
     * vocabulary of the model's tokenizer, speech vocabulary, speaker
     * embedding), else cbx_model_load fails with one line saying what
     * differs. Borrowed: read during cbx_model_load only (the file itself
     * stays mapped by the model). NULL (the default): the model's T3. */
    const char *t3_path;
    /* Where the weights live and the calls compute: "cpu", "cuda" (GPU 0),
     * "cuda:N", or "auto"/NULL (the default): cuda when this library was
     * built with it and a GPU is present, else cpu. Every context of the
     * model computes on the same kind (a cuda context has a stream of its
     * own; voices from audio, cbx_voice_load, are made on the CPU). An unknown name, a
     * backend this build lacks, no GPU or a driver error make
     * cbx_model_load fail with one line (cbx_backends lists them). */
    const char *backend;
} cbx_model_params;

/* Defaults of every field (fields are only ever appended).
 * Thread safety: any thread, concurrently. */
CBX_API cbx_model_params cbx_model_default_params(void);

/* The backends this library has, one line each ("cpu   yes  2 threads,
 * avx512", "cuda:0 yes  NVIDIA H200, ..."), into buf (len bytes,
 * truncated); returns what "auto" picks here ("cpu" or "cuda"; static).
 * Thread safety: any thread, concurrently. */
CBX_API const char *cbx_backends(char *buf, size_t len);

/* The backend the model's weights are on ("cpu" or "cuda"; static text).
 * Thread safety: any thread, concurrently. */
CBX_API const char *cbx_model_backend(const cbx_model *model);

/* Load a model from path: a Hugging Face snapshot directory or a .gguf made
 * by `chatterbox convert`, any variant (turbo, nano, english, mtl-v2,
 * mtl-v3; an english model also serves voice conversion,
 * cbx_convert_voice). params may be NULL
 * (defaults). On success *model is owned by the caller, free with
 * cbx_model_free(); on failure *model is NULL and, when errbuf is not NULL,
 * errbuf (errlen bytes) receives one line naming the path and the problem.
 * Thread safety: any thread, concurrently. */
CBX_API cbx_status cbx_model_load(const char *path, const cbx_model_params *params,
                                  cbx_model **model, char *errbuf, size_t errlen);

/* Free a model; a no-op on NULL. Every context and voice made from it must
 * be freed first. Thread safety: once, when no other call uses the model. */
CBX_API void cbx_model_free(cbx_model *model);

/* Output sample rate (24000). Thread safety: any thread, concurrently. */
CBX_API int cbx_model_sample_rate(const cbx_model *model);

/* Variant name ("turbo", "nano", ...); static text, never NULL.
 * Thread safety: any thread, concurrently. */
CBX_API const char *cbx_model_variant(const cbx_model *model);

/* What the model's T3 scheduler has done so far: concurrent
 * cbx_synthesize calls on contexts of the same thread count decode their
 * speech tokens together, one batched step for all (a server's batch). */
typedef struct cbx_model_stats {
    int64_t t3_steps;    /* batched decode steps run */
    int64_t t3_rows;     /* rows decoded over those steps (tokens; a CFG
                          * pair is two rows); t3_rows / t3_steps is the
                          * mean batch */
    int64_t t3_max_rows; /* the most rows in one step */
} cbx_model_stats;

/* Fill *stats (zeros for a model that does not synthesize). Errors:
 * CBX_ERR_INVALID_ARG (NULL). Thread safety: any thread, concurrently. */
CBX_API cbx_status cbx_model_get_stats(const cbx_model *model, cbx_model_stats *stats);

/* ---- voice ------------------------------------------------------------ */

/* A voice from path: a voice file (`chatterbox voice create`, .voice), a
 * directory of conditioning .npy files (speaker_emb.npy,
 * cond_prompt_speech_tokens.npy, prompt_token.npy, prompt_feat.npy,
 * embedding.npy), or an audio file (wav, flac, ... longer than 5 s)
 * conditioned on the fly (needs a model loaded from a directory). Checked
 * against model. On success *voice is owned by the caller, free with
 * cbx_voice_free() before the model; on failure *voice is NULL and errbuf
 * (optional) gets the message.
 * Thread safety: any thread, concurrently. */
CBX_API cbx_status cbx_voice_load(const cbx_model *model, const char *path, cbx_voice **voice,
                                  char *errbuf, size_t errlen);

/* Free a voice; a no-op on NULL. Thread safety: once, when no synthesis
 * uses the voice. */
CBX_API void cbx_voice_free(cbx_voice *voice);

/* ---- context ---------------------------------------------------------- */

/* A context for model. On success *ctx is owned by the caller, free with
 * cbx_context_free() before the model; on failure *ctx is NULL.
 * Thread safety: any thread, concurrently. */
CBX_API cbx_status cbx_context_create(const cbx_model *model, cbx_context **ctx);

/* Free a context; a no-op on NULL. Thread safety: once, when no call uses
 * the context. */
CBX_API void cbx_context_free(cbx_context *ctx);

/* Last error message of ctx ("" after a successful call); borrowed from
 * ctx, valid until its next call. Never NULL (a NULL ctx gives a static
 * text). Thread safety: one thread at a time per context. */
CBX_API const char *cbx_context_errmsg(const cbx_context *ctx);

/* ---- voice preparation ------------------------------------------------ */

/* Do now the work a voice needs before its first speech token: T3's voice
 * prefix (the keys and values of the speaker and reference-prompt
 * positions, ~0.3-0.5 s on a 2-core CPU), taken from the model's memory,
 * or its prefix_cache_dir, or built, and then kept in memory (and written
 * to prefix_cache_dir when the model has one). The next cbx_synthesize()
 * in this voice then starts decoding at once: call this when a voice
 * becomes known (a server registering a voice, a live reader before the
 * first line arrives) to take that cost off the first audio. voice NULL:
 * the built-in voice. n_threads as cbx_synth_params.n_threads (0: all
 * CPUs). The model keeps the 2 most recently used prefixes in memory.
 * Optional: synthesis without it gives the same audio. Errors:
 * CBX_ERR_INVALID_ARG, CBX_ERR_NOT_FOUND (no voice and no built-in one),
 * CBX_ERR_NOMEM; the message is in cbx_context_errmsg(ctx).
 * Thread safety: one thread at a time per context. */
CBX_API cbx_status cbx_prepare_voice(cbx_context *ctx, const cbx_voice *voice, int n_threads);

/* ---- synthesis -------------------------------------------------------- */

typedef struct cbx_synth_params {
    /* T3 sampling, upstream Turbo defaults (tts_turbo.py generate) */
    double temperature;        /* 0.8 */
    int top_k;                 /* 1000 (1: greedy; 0: off) */
    double top_p;              /* 0.95 (1: off) */
    double repetition_penalty; /* 1.2 (1: off) */
    int max_tokens;            /* speech tokens sampled per segment, stop
                                * token included: 1001 (max_gen_len 1000) */
    uint64_t seed;             /* every random stream; 0 */
    /* S3Gen */
    int cfm_steps;             /* 0: the model's (2 for Turbo's meanflow) */
    /* runtime */
    int n_threads;             /* 0: all CPUs */
    /* long text: split into sentence segments of at most max_segment_tokens
     * text tokens, joined with pause_ms of silence; a segment whose speech
     * stops suspiciously early is retried up to max_retries times */
    int split_text;            /* 1 (0: the whole text as one segment) */
    int max_segment_tokens;    /* 60 */
    int pause_ms;              /* 100 */
    int max_retries;           /* 2 */
    /* streaming: the chunk callback gets each segment's audio in pieces
     * while the speech tokens are still being generated (first audio after
     * stream_first_tokens tokens, ~200 ms of speech; later chunks grow from
     * stream_chunk_tokens, doubling up to 80). No early-stop retries. */
    int stream;                /* 0 (1: on) */
    int stream_first_tokens;   /* 10 (at least 8) */
    int stream_chunk_tokens;   /* 20 (at least 3) */
    /* streaming latency knob: S3Gen's reference prompt cut to its last N
     * speech tokens while streaming. Every chunk re-runs the flow over the
     * prompt plus its tokens (stream_context_tokens), so the prompt (250
     * tokens for a 10 s reference) sets the floor of every chunk's cost; a shorter one
     * trades reference context for latency (the speaker x-vector is kept) */
    int stream_prompt_tokens;  /* 50 (2 s); 0: the whole prompt */
    /* streaming latency: the first chunk alone is conditioned on the last
     * N tokens of the reference prompt (later chunks on stream_prompt_tokens
     * of it), so its
     * cost, and first-audio latency, does not grow with the reference; only
     * the first ~180 ms of speech see less reference. 0: the whole prompt */
    int stream_first_prompt_tokens; /* 25 */
    /* S3Gen arithmetic (a cbx_precision): AUTO rounds the operands of the
     * large products to BF16 (accumulating in F32) for quantised models on
     * CPUs with AMX-BF16 (on the CUDA backend: to TF32, tensor-core
     * products), and keeps F32 for F32/F16/BF16 models */
    int precision;             /* CBX_PRECISION_AUTO */
    /* English / multilingual (Llama T3 with classifier-free guidance);
     * ignored by Turbo and Nano */
    double min_p;              /* 0.05 (0: off) */
    double cfg_weight;         /* 0.5 (0: no unconditional row) */
    double exaggeration;       /* < 0 (default): the voice's own (0.5 for
                                * the built-in voice and voices from audio) */
    const char *language;      /* multilingual models only; NULL (an error
                                * for a model that speaks one language) */
    /* English / multilingual: the alignment guard for long texts (upstream's
     * former alignment-stream analyzer): T3 reads three of its attention
     * heads to follow where it is in the text, holds the stop token back
     * until the end of the text is reached, and forces a stop on a long
     * tail, a repeated passage, or three equal speech tokens in a row
     * (upstream's code stopped on two). CBX_ERR_INVALID_ARG for Turbo and
     * Nano. */
    int alignment_guard;       /* 0 (1: on) */
    /* cancellation without audio: called from the calling thread at every
     * speech token and every S3Gen step (and with each chunk's delivery);
     * a nonzero return stops the call at that point with
     * CBX_ERR_CANCELLED, as a chunk callback's nonzero return does. For a
     * whole-text call, whose chunk callback only runs between segments, it
     * is the way to stop within one step (a server whose client went away,
     * a deadline). Must be quick and must not call into ctx. */
    int (*abort_callback)(void *user); /* NULL: none */
    void *abort_user;                  /* its argument */
    /* streaming: each chunk's mel is made from the generated speech tokens
     * from N before its first new frame on (plus the reference prompt), not
     * from every token so far, so a chunk costs the same however long the
     * utterance has grown; N tokens = N x 40 ms of left context. 0: every
     * token so far (the cost of chunk k grows with k) */
    int stream_context_tokens;         /* 32 */
} cbx_synth_params;

enum cbx_precision { CBX_PRECISION_AUTO = 0, CBX_PRECISION_F32 = 1, CBX_PRECISION_BF16 = 2 };

/* Defaults of every field (fields are only ever appended). The sampling
 * fields are Turbo's; cbx_synth_default_params_for gives a model's own.
 * Thread safety: any thread, concurrently. */
CBX_API cbx_synth_params cbx_synth_default_params(void);
/* Upstream's defaults for model's variant: Turbo/Nano as above; English:
 * temperature 0.8, top_k 0 (unused), top_p 1.0, min_p 0.05, repetition
 * penalty 1.2, cfg_weight 0.5, max_tokens 1000, max_segment_tokens 150
 * (grapheme tokens). model NULL: cbx_synth_default_params().
 * Thread safety: any thread, concurrently. */
CBX_API cbx_synth_params cbx_synth_default_params_for(const cbx_model *model);

/* Audio returned by cbx_synthesize: mono float samples in [-1, 1]. */
typedef struct cbx_audio {
    float *samples;  /* owned by the caller, free with cbx_audio_free() */
    size_t n;        /* number of samples */
    int sample_rate; /* Hz (24000) */
} cbx_audio;

/* Free audio->samples and zero *audio; a no-op on NULL or a zeroed audio.
 * Thread safety: any thread (distinct audio objects). */
CBX_API void cbx_audio_free(cbx_audio *audio);

/* Receives audio as it is produced: n samples at sample_rate, borrowed
 * for the duration of the call only (copy what you keep). Concatenating
 * every chunk gives exactly the whole audio. Return 0 to go on, nonzero to
 * cancel (cbx_synthesize then returns CBX_ERR_CANCELLED). One chunk per
 * text segment (and one per pause), or with cbx_synth_params.stream
 * several per segment, each delivered as soon as it exists. */
typedef int (*cbx_chunk_cb)(void *user, const float *samples, size_t n, int sample_rate);

/* Speak UTF-8 text with voice (NULL: the model's built-in voice). params
 * may be NULL (defaults). chunk (optional) receives audio piece by piece
 * with user; audio (optional) receives the whole result, owned by the
 * caller (cbx_audio_free()); on failure *audio is zeroed. Errors:
 * CBX_ERR_INVALID_ARG (NULL or empty text, text without letters or
 * digits, bad parameters), CBX_ERR_CANCELLED (the callback asked),
 * CBX_ERR_NOMEM, CBX_ERR_INTERNAL; the message is in
 * cbx_context_errmsg(ctx).
 * Thread safety: one thread at a time per context; any number of contexts
 * may synthesize concurrently with the same model and voice. */
CBX_API cbx_status cbx_synthesize(cbx_context *ctx, const cbx_voice *voice, const char *text,
                                  const cbx_synth_params *params, cbx_chunk_cb chunk, void *user,
                                  cbx_audio *audio);

/* ---- voice conversion -------------------------------------------------- */

typedef struct cbx_vc_params {
    uint64_t seed;  /* every random stream of S3Gen; 0 */
    int cfm_steps;  /* flow-matching Euler steps; 0: the model's (10) */
    int n_threads;  /* 0: all CPUs */
} cbx_vc_params;

/* Defaults of every field (fields are only ever appended).
 * Thread safety: any thread, concurrently. */
CBX_API cbx_vc_params cbx_vc_default_params(void);

/* Voice conversion, as upstream's ChatterboxVC.generate: the speech in
 * samples (n mono float samples at sample_rate Hz, any rate; resampled to
 * 16 kHz, used whole) said again in the voice target (NULL: the model's
 * built-in voice), through the S3 speech tokenizer and S3Gen (10 flow
 * steps with classifier-free guidance, HiFT). Needs the english model
 * (cbx_model_load of a ResembleAI/chatterbox snapshot or its converted
 * .gguf; other variants give CBX_ERR_UNSUPPORTED). target may come from
 * cbx_voice_load (a .voice file, a conditioning .npy directory, or an
 * audio clip, of which the first 10 s are used); only its S3Gen part
 * (prompt tokens, prompt mel, x-vector) matters. params may be NULL
 * (defaults). audio receives 24 kHz mono float samples, owned by the
 * caller (cbx_audio_free()); on failure *audio is zeroed. No watermark is
 * applied. Errors: CBX_ERR_INVALID_ARG (NULL or too short source, under
 * 0.5 s, non-finite samples, bad parameters), CBX_ERR_UNSUPPORTED (not an
 * english model), CBX_ERR_NOT_FOUND (no target and no built-in voice),
 * CBX_ERR_FORMAT (a target without an S3Gen part), CBX_ERR_NOMEM; the
 * message is in cbx_context_errmsg(ctx).
 * Thread safety: one thread at a time per context; any number of contexts
 * may convert concurrently with the same model and voice. */
CBX_API cbx_status cbx_convert_voice(cbx_context *ctx, const cbx_voice *target, const float *samples,
                                     size_t n, int sample_rate, const cbx_vc_params *params,
                                     cbx_audio *audio);

#ifdef __cplusplus
}
#endif
#endif /* CHATTERBOX_H */
