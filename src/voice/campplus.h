/* campplus.h - the CAMPPlus x-vector used by S3Gen as speaker embedding
 * (chatterbox models/s3gen/xvector.py: CAMPPlus with its FCM head, CAM
 * dense TDNN blocks and statistics pooling; features as
 * torchaudio.compliance.kaldi.fbank), see spec/voice.md §4.
 * Thread safety: a loaded campplus is read-only; any number of concurrent
 * campplus_embed calls (each makes its own arena). */
#ifndef CBX_VOICE_CAMPPLUS_H
#define CBX_VOICE_CAMPPLUS_H

#include <stdint.h>

#include "core/backend.h"
#include "core/error.h"
#include "io/weights.h"

#define CAMPPLUS_FEAT_DIM 80
#define CAMPPLUS_EMBED 192

struct campplus;

/* Load from the MODEL_S3GEN component (names under "speaker_encoder.");
 * BatchNorms are folded into per-channel affines owned by *out. *out is
 * owned by the caller, free with campplus_free(); the conv weights are
 * borrowed and must outlive it. Every weight is placed on be
 * (core/weights.h), which must outlive *out. */
cbx_status campplus_load(struct campplus **out, const struct weights *w, const struct backend *be, char *err);
void campplus_free(struct campplus *c); /* no-op on NULL */

/* CAMPPlus x-vector of a 16 kHz waveform in [-1, 1] (no int16 scaling):
 * Kaldi fbank, mean subtraction over time, network -> out[192].
 * Thread safety: any thread, concurrently. */
cbx_status campplus_embed(const struct campplus *c, const struct backend *be,
                          const float *wav16, int64_t n, float out[192], char *err);

/* The network alone, from a Kaldi fbank [frames, 80] before mean
 * subtraction (the mean is subtracted here). */
cbx_status campplus_embed_fbank(const struct campplus *c, const struct backend *be,
                                const float *fbank, int64_t frames, float out[192],
                                char *err);

/* torchaudio.compliance.kaldi.fbank(wave, num_mel_bins) with its other
 * defaults (16 kHz, 25/10 ms, povey, pre-emphasis 0.97, DC removal,
 * dither 0, snip_edges, power, log): *out [*frames, num_mel_bins] before
 * mean subtraction, owned by the caller (free()). Fails for n < 400. */
cbx_status kaldi_fbank(const float *wav16, int64_t n, int num_mel_bins, float **out,
                       int64_t *frames, char *err);

#endif
