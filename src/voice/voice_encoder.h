/* voice_encoder.h - the VoiceEncoder speaker embedding used by T3
 * (chatterbox models/voice_encoder: VoiceEncoder.embeds_from_wavs for one
 * 16 kHz utterance, melspec.melspectrogram, librosa.effects.trim), see
 * spec/voice.md §3.
 * Thread safety: a loaded voice_encoder is read-only; any number of
 * concurrent ve_embed calls (each makes its own arena). */
#ifndef CBX_VOICE_VOICE_ENCODER_H
#define CBX_VOICE_VOICE_ENCODER_H

#include <stdint.h>

#include "core/backend.h"
#include "core/error.h"
#include "io/weights.h"

#define VE_N_MELS 40
#define VE_EMBED 256
#define VE_PARTIAL_FRAMES 160

struct voice_encoder;

/* Load from the MODEL_VE component (names lstm.*, proj.*), placed on be
 * (core/weights.h). *out is owned by the caller, free with ve_free(); the
 * weights are borrowed, and they and be must outlive it. */
cbx_status ve_load(struct voice_encoder **out, const struct weights *w, const struct backend *be, char *err);
void ve_free(struct voice_encoder *ve); /* no-op on NULL */

/* VoiceEncoder.embeds_from_wavs([wav16], 16000): trim, mel, partials,
 * LSTM, mean, L2 norm -> out[256]. wav16: n samples in [-1, 1] at 16 kHz.
 * Thread safety: any thread, concurrently. */
cbx_status ve_embed(const struct voice_encoder *ve, const struct backend *be,
                    const float *wav16, int64_t n, float out[256], char *err);

/* ---- stages, exposed for parity tests ---------------------------------- */

/* librosa.effects.trim(wav, top_db=20) (frame 2048, hop 512): the kept
 * interval [*start, *end) of samples (empty, start == end, when silent). */
void ve_trim(const float *wav, int64_t n, int64_t *start, int64_t *end);
/* melspec.melspectrogram of wav (no trimming here): [*frames, 40] linear
 * power mel, *mel owned by the caller (free()). */
cbx_status ve_melspec(const struct backend *be, const float *wav, int64_t n, float **mel,
                      int64_t *frames, char *err);
/* From a mel [frames, 40]: partials, LSTM, projection -> out[256];
 * partial_embeds (or NULL) receives *n_partials x 256 floats, owned by the
 * caller (free()). */
cbx_status ve_embed_mel(const struct voice_encoder *ve, const struct backend *be,
                        const float *mel, int64_t frames, float out[256],
                        float **partial_embeds, int64_t *n_partials, char *err);

#endif
