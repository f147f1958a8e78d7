/* mel.h - mel filterbanks and the S3Gen prompt mel.
 *
 * mel_filters_librosa ports librosa.filters.mel (librosa 0.11.0, default
 * dtype float32); s3gen_prompt_mel ports the Matcha/CosyVoice
 * mel_spectrogram that chatterbox/models/s3gen/utils/mel.py uses for
 * `prompt_feat` (spec/voice.md §6).
 * Thread safety: any thread, concurrently. */
#ifndef CBX_VOICE_MEL_H
#define CBX_VOICE_MEL_H

#include <stdint.h>

#include "core/error.h"

struct backend;

/* librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin,
 * fmax=fmax (<= 0: sr/2), htk=htk, norm="slaney") as float32:
 * out[n_mels, n_fft/2+1], a caller buffer. Computed in
 * double and rounded where librosa rounds (each triangle to float32, then
 * the Slaney scaling in double, rounded again). */
void mel_filters_librosa(int sr, int n_fft, int n_mels, double fmin, double fmax,
                         int htk, float *out);

/* S3Gen prompt mel of a 24 kHz waveform: reflect-pad 720, STFT (n_fft 1920,
 * hop 480, periodic Hann, center False), magnitude sqrt(re^2+im^2+1e-9),
 * 80 Slaney mels (fmin 0, fmax 8000), log(max(x, 1e-5)).
 * *mel [*T, 80] (frames outermost, as `prompt_feat[0]`), owned by the
 * caller, free with free(). Needs n > 720 (reflect padding). */
cbx_status s3gen_prompt_mel(const struct backend *be, const float *wav24, int64_t n,
                            float **mel, int64_t *T, char *err);

#endif
