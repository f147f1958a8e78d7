/* vc.h - voice conversion: speech in one voice -> the same speech in a
 * target voice. Ports chatterbox vc.py (ChatterboxVC: from_local,
 * set_target_voice, generate), chatterbox 0.1.7 at 5de7a54, which runs the
 * English checkpoint's S3Gen alone (spec/overview.md §3.4):
 *   1. the source, mono, at 16 kHz: librosa.load(src, sr=16000) (soxr HQ
 *      when the file has another rate, voice_resample); the whole clip,
 *      no cut, no trim, no loudness change
 *   2. s3gen.tokenizer(source16) -> speech tokens (25 Hz; past 30 s in
 *      the 30 s windows of S3TokenizerV2.quantize)
 *   3. s3gen.inference(tokens, ref_dict): the standard CFM (the English
 *      s3gen.safetensors has no time_embed_mixer), 10 Euler steps, CFG
 *      rate 0.7, HiFT, trim_fade on the first 40 ms
 *   4. upstream then applies the Perth watermark; we do not (a separate
 *      network, overview.md §7).
 * The target (upstream's ref_dict) is the S3Gen part of a voice
 * (struct conds: prompt_token, prompt_feat, embedding): the model's
 * built-in voice (conds.pt "gen"), a voice file, a conds .npy directory,
 * or an audio clip conditioned as set_target_voice does (24 kHz, first
 * 10 s, embed_ref; voice.h does this as part of voice_prepare). The T3
 * parts of a voice are not used.
 * Ours beyond upstream (bad input): only the English variant is accepted
 * (upstream's VC is for ResembleAI/chatterbox; the meanflow S3Gen of
 * Turbo/Nano is another model); a source shorter than VC_MIN_SOURCE_SECONDS
 * fails (upstream would run on an empty token list and crash).
 * Random streams: those of S3Gen (rng.md §3) with the given seed, as
 * upstream's torch.manual_seed before generate().
 *
 * Thread safety: a vc_model is read-only after loading and may serve any
 * number of concurrent calls, each with its own backend. */
#ifndef CBX_PIPELINE_VC_H
#define CBX_PIPELINE_VC_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "io/audio.h"
#include "voice/conds.h"

struct backend;
struct model;
struct vc_model; /* opaque: model file, S3Gen, S3Tokenizer, built-in voice */

#define VC_SAMPLE_RATE 24000        /* output (S3GEN_SR) */
#define VC_SOURCE_RATE 16000        /* the tokenizer's input (S3_SR) */
#define VC_MIN_SOURCE_SECONDS 0.5   /* ours: ~12 speech tokens */

/* Open path (HF snapshot directory or converted GGUF of the English
 * variant) and load what ChatterboxVC.from_local loads: S3Gen (its
 * tokenizer included) and the built-in voice when conds.pt has one.
 * wtype: enum dtype of S3Gen's estimator weights, < 0 as stored. Another
 * variant is refused (CBX_ERR_UNSUPPORTED) naming it. *out owned by the
 * caller, free with vc_model_free(); on failure NULL and err says why.
 * backend: where the weights go, as engine_load_params.backend ("cpu",
 * "cuda", "auto" or NULL). */
cbx_status vc_model_load(const char *path, int wtype, const char *backend, struct vc_model **out,
                         char *err);
/* The same over a model file and an S3Gen loaded elsewhere (a text-to-
 * speech engine's: engine_model_file, engine_model_s3gen), so a program
 * that speaks and converts holds S3Gen once. Both are borrowed and must
 * outlive *out; only the S3Tokenizer and the built-in voice are made, on
 * be (the backend holding s3's weights, engine_model_backend). The
 * variant rules are vc_model_load's. */
struct s3gen;
struct backend;
cbx_status vc_model_borrow(const struct model *file, const struct s3gen *s3, const struct backend *be,
                           struct vc_model **out, char *err);
/* The backend holding vm's weights: vc_convert computes on one of its kind
 * (core/backend.h backend_compatible). */
const struct backend *vc_model_backend(const struct vc_model *vm);
void vc_model_free(struct vc_model *vm); /* no-op on NULL */

/* The opened model file (variant, weights); borrowed from vm. */
const struct model *vc_model_file(const struct vc_model *vm);
/* The built-in voice (conds.pt), or NULL when the model has none (then
 * vc_model_no_voice_reason says why). Borrowed from vm. */
const struct conds *vc_model_voice(const struct vc_model *vm);
const char *vc_model_no_voice_reason(const struct vc_model *vm);

/* A target voice from path: a voice file (.voice), a conds .npy
 * directory, or an audio file conditioned on the fly (voice.h; the S3Gen
 * part is upstream's set_target_voice). Fails unless the voice has an
 * S3Gen part of the right sizes. *out owned by the caller, conds_free().
 * be may be NULL (a CPU backend is made for the call when needed). */
cbx_status vc_voice_load(const struct vc_model *vm, const struct backend *be, const char *path,
                         struct conds *out, char *err);
/* Whether c can be a target: prompt_token, prompt_feat, embedding (192)
 * present and consistent; name is used in the message. */
cbx_status vc_check_target(const struct conds *c, const char *name, char *err);

struct vc_params {
    uint64_t seed;   /* every S3Gen stream; 0 */
    int n_cfm_steps; /* <= 0: the model's (10) */
    bool bf16;       /* BF16 products (s3gen_params.bf16); default for the
                      * weight type (s3gen_default_bf16) */
};
struct vc_params vc_default_params(const struct vc_model *vm);

/* Steps 1-2: the source's speech tokens. src is mono at any rate (name
 * only for messages). *tokens owned by the caller (free()). */
cbx_status vc_source_tokens(const struct vc_model *vm, const struct backend *be, const struct audio *src,
                            const char *name, int32_t **tokens, int64_t *n_tokens, char *err);

/* ChatterboxVC.generate: src (mono, any rate) spoken in target's voice,
 * 24 kHz mono float PCM. *pcm owned by the caller (free()); on failure
 * NULL and err says why. tokens/n_tokens (optional) receive the source
 * tokens (owned by the caller, free()). */
cbx_status vc_convert(const struct vc_model *vm, const struct backend *be, const struct audio *src,
                      const char *name, const struct conds *target, const struct vc_params *p,
                      float **pcm, int64_t *n_pcm, int32_t **tokens, int64_t *n_tokens, char *err);

#endif
