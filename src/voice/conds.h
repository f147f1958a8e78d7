/* conds.h - a voice as upstream's Conditionals: the T3 part (speaker_emb,
 * cond_prompt_speech_tokens, emotion_adv) and the S3Gen reference dict
 * (prompt_token, prompt_feat, embedding). Loaded from a model directory's
 * conds.pt (the built-in voice) or from a directory of .npy files named
 * after the conds keys (spec/voice.md §8).
 * Thread safety: read-only after loading. */
#ifndef CBX_VOICE_CONDS_H
#define CBX_VOICE_CONDS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"

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
/* A directory of .npy files: speaker_emb.npy (1,256) float32 and
 * cond_prompt_speech_tokens.npy (1,T) int32/int64 are required;
 * emotion_adv.npy, prompt_token.npy, prompt_feat.npy (1,T,80),
 * embedding.npy (1,192) are optional. */
cbx_status conds_from_npy_dir(const char *dir, struct conds *out, char *err);
void conds_free(struct conds *c); /* frees the arrays; no-op on zeroed */

#endif
