/* conds.h - a voice as upstream's Conditionals: the T3 part (speaker_emb,
 * cond_prompt_speech_tokens, emotion_adv) and the S3Gen reference dict
 * (prompt_token, prompt_feat, embedding). Loaded from a model directory's
 * conds.pt (the built-in voice) or from a directory of .npy files named
 * after the conds keys (spec/voice.md §8).
 * Thread safety: read-only after loading. */
#ifndef CBX_VOICE_CONDS_H
#define CBX_VOICE_CONDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

struct model;
struct model_dir;

struct conds {
    /* t3 */
    float *speaker_emb;           /* [n_speaker] (256) */
    int64_t n_speaker;
    int32_t *cond_prompt_tokens;  /* [n_cond_prompt] */
    int64_t n_cond_prompt;
    float emotion_adv;            /* exaggeration; 0.5 when absent */
    bool has_emotion_adv;
    /* gen (S3Gen ref dict); absent parts have n = 0 */
    int32_t *prompt_token;        /* [n_prompt_token] */
    int64_t n_prompt_token;
    float *prompt_feat;           /* [n_prompt_feat, 80] */
    int64_t n_prompt_feat;
    float *embedding;             /* [n_embedding] (192) */
    int64_t n_embedding;
};

/* The built-in voice of a model directory (conds.pt). */
cbx_status conds_from_model_dir(const struct model_dir *md, struct conds *out, char *err);
/* The same from either kind of model (io/model_file.h): conds.pt of a
 * directory or the conds.* tensors of a converted GGUF. */
cbx_status conds_from_model(const struct model *m, struct conds *out, char *err);
/* A directory of .npy files: speaker_emb.npy (1,256) float32 and
 * cond_prompt_speech_tokens.npy (1,T) int32/int64 are required;
 * emotion_adv.npy, prompt_token.npy, prompt_feat.npy (1,T,80),
 * embedding.npy (1,192) are optional. */
cbx_status conds_from_npy_dir(const char *dir, struct conds *out, char *err);
void conds_free(struct conds *c); /* frees the arrays; no-op on zeroed */

/* ---- voice files ----------------------------------------------------------
 * A voice file (`chatterbox voice create`, usually *.voice) is a small GGUF
 * v3 file (io/gguf.h) holding the conditioning tensors under their conds.pt
 * paths, batch dimension kept as upstream stores them:
 *   t3.speaker_emb                 f32 [1, 256]
 *   t3.cond_prompt_speech_tokens   i32 [1, P]      (1 <= P <= 4096)
 *   t3.emotion_adv                 f32 [1, 1, 1]
 *   gen.prompt_token               i32 [1, Np]     (1 <= Np <= 4096)
 *   gen.prompt_feat                f32 [1, Tp, 80] (1 <= Tp <= 8192)
 *   gen.embedding                  f32 [1, 192]
 * (token ids in [0, 6561), every float finite; int64 ids are accepted on
 * reading) and provenance metadata:
 *   general.type                   "chatterbox-voice"
 *   chatterbox.voice.format_version  u32, CONDS_VOICE_FORMAT_VERSION
 *   chatterbox.voice.variant       str, model variant it was made with
 *   chatterbox.voice.source        str, base name of the reference file
 *   chatterbox.voice.sample_rate   u32, of the reference file
 *   chatterbox.voice.duration      f64, seconds of the reference file
 *   chatterbox.voice.loudness_norm bool, loudness normalisation applied
 *   chatterbox.voice.loudness_lufs f64, measured loudness (NaN: not measured)
 *   chatterbox.voice.gain_db       f64, gain applied (0 when none)
 *   chatterbox.voice.tool          str, "chatterbox <version> (<commit>)"
 * A reader refuses a newer format version, a missing tensor or key, a
 * wrong shape or type, an out-of-range token and a non-finite value, with
 * a message naming the file and the field. The files hold no timestamp, so
 * the same input gives the same bytes. */
#define CONDS_VOICE_FORMAT_VERSION 1
#define CONDS_VOICE_TYPE "chatterbox-voice"
#define CONDS_SPEECH_VOCAB 6561 /* S3 speech tokens are < 3^8 */
#define CONDS_MAX_PROMPT_TOKENS 4096
#define CONDS_MAX_PROMPT_FRAMES 8192

struct conds_meta {
    uint32_t format_version;
    char variant[32];      /* "turbo", "english", ... */
    char source[256];      /* reference file base name */
    uint32_t sample_rate;  /* of the reference file */
    double duration;       /* seconds of the reference file */
    bool loudness_norm;    /* normalisation applied */
    double loudness_lufs;  /* measured integrated loudness, NaN if not measured */
    double gain_db;        /* gain applied, 0 if none */
    char tool[96];         /* creating program and version */
};

/* Write c (all six tensors present: n_speaker 256, n_embedding 192, token
 * and frame counts in the ranges above) and m to path, atomically (a
 * failure leaves no file). m->format_version is ignored (the current one is
 * written). Thread safety: any thread, concurrently (distinct paths). */
cbx_status conds_write_voice(const char *path, const struct conds *c, const struct conds_meta *m,
                             char *err);
/* Read a voice file into *c (owned by the caller, free with conds_free())
 * and, when m is not NULL, its metadata. On failure *c is zeroed.
 * Thread safety: any thread, concurrently. */
cbx_status conds_read_voice(const char *path, struct conds *c, struct conds_meta *m, char *err);
/* The same from n bytes at buf; name is used in messages (NULL: "<memory>"). */
cbx_status conds_read_voice_mem(const void *buf, size_t n, const char *name, struct conds *c,
                                struct conds_meta *m, char *err);
/* True when the file at path starts with the GGUF magic (a voice file
 * candidate); false for anything else or an unreadable path. */
bool conds_is_gguf(const char *path);
/* Write the tensors of c as .npy files named after upstream's conds keys
 * into dir (created if missing): speaker_emb (1,256) f32,
 * cond_prompt_speech_tokens (1,P) i32, emotion_adv (1,1,1) f32, and when
 * present prompt_token (1,Np) i32, prompt_feat (1,Tp,80) f32, embedding
 * (1,192) f32 - what conds_from_npy_dir reads back. On failure the files
 * written so far (and the directory, if this call made it) are removed. */
cbx_status conds_write_npy_dir(const char *dir, const struct conds *c, char *err);

#endif
