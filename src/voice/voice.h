/* voice.h - voice cloning: a reference recording -> the conditioning
 * tensors of struct conds (upstream `prepare_conditionals`).
 *
 * Ports the reference-audio pre-processing of chatterbox tts.py,
 * tts_turbo.py and mtl_tts.py (`prepare_conditionals`, Turbo's
 * `norm_loudness`) and of models/s3gen/s3gen.py (`embed_ref`), chatterbox
 * 0.1.7 at 5de7a54, with the audio helpers they call: librosa 0.11
 * `load`/`resample(res_type="soxr_hq")`, torchaudio 2.6
 * `transforms.Resample` (sinc_interp_hann) and pyloudnorm's
 * `Meter.integrated_loudness`; spec/overview.md §5, spec/voice.md §1, §2,
 * §7. The model stages themselves live in voice_encoder.h, campplus.h,
 * s3tokenizer.h and mel.h.
 *
 * Order of operations (overview.md §5), per variant:
 *   1. decode, mix to mono, resample to 24 kHz (soxr HQ)      -> ref24
 *   2. Turbo/Nano: need more than 5 s; loudness to -27 LUFS (optional)
 *   3. ref16 = soxr HQ 24 -> 16 kHz of the whole ref24
 *   4. ref24 cut to 10 s: prompt_feat (prompt mel), and from its
 *      torchaudio 16 kHz copy the CAMPPlus embedding and prompt_token,
 *      reconciled so that frames = 2 * tokens
 *   5. cond_prompt_speech_tokens = S3Tokenizer(ref16[:15 s or 6 s], max_len
 *      375 or 150)
 *   6. speaker_emb = VoiceEncoder(ref16), emotion_adv = exaggeration.
 * Input handling beyond upstream (bad input): a file's channels are mixed
 * to mono (mean) and any rate is resampled (soxr HQ) to 24 kHz as
 * librosa.load does; a reference too short for the variant fails; a
 * silent one (every 400 ms block below the meter's -70 LUFS gate, where
 * upstream would condition on nothing) fails; a long one is used as
 * upstream does (conditioning windows of 10 s / 15 s or 6 s, loudness
 * over the whole clip) except that the VoiceEncoder sees only its first
 * VOICE_VE_MAX_LEN samples (report.ve_capped). Every output is finite.
 * A given 16 kHz rendition (ref16 argument) replaces both 16 kHz
 * resamplings (3 and the one inside 4), as the fixtures do; the loudness
 * gain measured on ref24 is applied to it too.
 *
 * Thread safety: voice_models is read-only after loading; any number of
 * concurrent voice_prepare calls. The free functions: any thread. */
#ifndef CBX_VOICE_VOICE_H
#define CBX_VOICE_VOICE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "io/audio.h"
#include "io/model_dir.h"
#include "voice/conds.h"

struct backend;
struct model;

#define VOICE_S3GEN_SR 24000
#define VOICE_S3_SR 16000
#define VOICE_DEC_COND_LEN (10 * VOICE_S3GEN_SR) /* S3Gen prompt: 10 s at 24 kHz */
/* Ours: the VoiceEncoder sees at most the first 60 s of the 16 kHz
 * reference (upstream embeds the whole clip; its cost grows with the
 * length, ~3 s of CPU per minute, and the mean over 60 s of partials is
 * already a stable speaker embedding). */
#define VOICE_VE_MAX_LEN (60 * VOICE_S3_SR)

/* The prepare_conditionals constants of variant v: its row's voice rules
 * (io/variant.h), NULL when out of range. Thread safety: any. */
const struct variant_voice *voice_rules(enum model_variant v);

struct voice_params {
    bool norm_loudness;  /* Turbo/Nano: normalise to -27 LUFS (upstream default true) */
    float exaggeration;  /* emotion_adv (upstream default 0.5) */
    bool serial;         /* run the network stages one after another on the
                          * given backend (default false: on a CPU backend
                          * of 2+ threads, CAMPPlus + S3Gen prompt tokens
                          * and T3 prompt tokens + VoiceEncoder run as two
                          * lanes at once, a core each); same results */
};
struct voice_params voice_default_params(void);

/* What voice_prepare did, for provenance and benchmarks. Seconds are wall
 * time per stage. */
struct voice_report {
    bool loudness_measured;   /* the meter ran (clip >= 0.4 s) */
    bool loudness_applied;    /* gain applied */
    double loudness_lufs;     /* measured, NaN when not measured */
    double gain_db;           /* applied gain, 0 when none */
    int64_t n24, n16;         /* samples of ref24 / ref16 after resampling */
    bool ve_capped;           /* the VoiceEncoder saw only VOICE_VE_MAX_LEN samples */
    double t_resample, t_loudness, t_prompt_mel, t_campplus, t_prompt_tokens,
        t_t3_tokens, t_ve;
    /* CPU seconds of the thread that ran each lane (CAMPPlus + prompt
     * tokens; T3 tokens + VE): the lanes' whole work when they run at
     * once (one thread each); serial, only the calling thread's share */
    double cpu_lane_a, cpu_lane_b;
};

/* ---- audio helpers (host code, float32 in and out) ------------------ */

/* librosa.resample(x, orig_sr=orig, target_sr=target, res_type="soxr_hq"):
 * python-soxr's resample (libsoxr SOXR_HQ, linear phase, float32, the
 * input fed in chunks of 48000 * orig / target samples, then flushed),
 * then fixed to ceil(n * target / orig) samples by zero-padding or cutting
 * (no scaling). Equal rates copy. *out owned by the caller (free()). */
cbx_status voice_resample(const float *x, int64_t n, int orig, int target, float **out,
                          int64_t *n_out, char *err);

/* torchaudio.transforms.Resample(orig, target) with its defaults
 * (sinc_interp_hann, lowpass_filter_width 6, rolloff 0.99), voice.md §1.3:
 * ceil(target * n / orig) samples. *out owned by the caller (free()). */
cbx_status voice_resample_sinc(const float *x, int64_t n, int orig, int target, float **out,
                               int64_t *n_out, char *err);

/* pyloudnorm.Meter(rate).integrated_loudness(x) (BS.1770-4 with
 * pyloudnorm's own K-weighting design at `rate`, 400 ms blocks, 75 %
 * overlap, -70 LUFS / -10 LU gates), voice.md §2. Fails (CBX_ERR_INVALID_ARG)
 * when x is shorter than 0.4 s; -INFINITY when every block is gated. */
cbx_status voice_integrated_loudness(const float *x, int64_t n, int rate, double *lufs, char *err);

/* ---- the pipeline --------------------------------------------------- */

struct voice_models; /* VoiceEncoder + CAMPPlus + S3Tokenizer of one model */

/* Load the three voice networks of md (ve.*, speaker_encoder.*,
 * tokenizer.*). They borrow md's weights: md must outlive *out. *out owned
 * by the caller, free with voice_models_free(). */
cbx_status voice_models_load(const struct model_dir *md, struct voice_models **out, char *err);
/* The same from any weight source: a model directory or a converted GGUF
 * (io/model_file.h), which holds the VE and S3Gen tensors too. */
cbx_status voice_models_load_model(const struct model *m, struct voice_models **out, char *err);
void voice_models_free(struct voice_models *vm); /* no-op on NULL */
enum model_variant voice_models_variant(const struct voice_models *vm);

/* prepare_conditionals on decoded audio: ref (mono, any rate; the file's
 * name, if known, only for messages) and optionally ref16, a 16 kHz
 * rendition of the same recording used instead of resampling. *out is
 * owned by the caller (conds_free()); rep (optional) receives the report.
 * Errors: a reference too short for the variant, ref16 not at 16 kHz, and
 * the stages' own. Thread safety: any thread, concurrently. */
cbx_status voice_prepare(const struct voice_models *vm, const struct backend *be, const struct audio *ref,
                         const struct audio *ref16, const struct voice_params *p, struct conds *out,
                         struct voice_report *rep, char *err);

/* The same from files (any format io_audio_read decodes); ref16_path may
 * be NULL. Messages name the file. */
cbx_status voice_prepare_file(const struct voice_models *vm, const struct backend *be, const char *path,
                              const char *ref16_path, const struct voice_params *p, struct conds *out,
                              struct voice_report *rep, char *err);

/* A voice from whatever `--voice` names: a voice file (GGUF), a directory
 * of .npy files (conds_from_npy_dir), or an audio file, conditioned on the
 * fly with md's networks and p (NULL: defaults). be may be NULL (a CPU
 * backend is made for the call when needed). *out owned by the caller,
 * conds_free(). Thread safety: any thread, concurrently. */
cbx_status conds_load_any(const char *path, const struct model_dir *md, const struct backend *be,
                          const struct voice_params *p, struct conds *out, char *err);
/* The same with a model opened by model_open (directory or GGUF). */
cbx_status conds_load_any_model(const char *path, const struct model *m, const struct backend *be,
                                const struct voice_params *p, struct conds *out, char *err);

#endif
