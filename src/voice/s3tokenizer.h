/* s3tokenizer.h - S3TokenizerV2 ("speech_tokenizer_v2_25hz"): 16 kHz
 * waveform -> 25 Hz speech tokens in [0, 6561).
 * Ports chatterbox/models/s3tokenizer/s3tokenizer.py (S3Tokenizer,
 * log_mel_spectrogram, forward) and the s3tokenizer package model_v2.py
 * (AudioEncoderV2, FSMNMultiHeadAttention, FSQCodebook), spec/voice.md §5.
 * Thread safety: a loaded tokenizer is read-only; any thread, concurrently
 * (each call uses its own arena on the given backend). */
#ifndef CBX_VOICE_S3TOKENIZER_H
#define CBX_VOICE_S3TOKENIZER_H

#include <stdint.h>

#include "core/error.h"

struct backend;
struct weights;
struct s3tokenizer;

/* Tensors under "tokenizer." of the MODEL_S3GEN component (mel filters,
 * window, encoder, quantizer), placed on be (core/weights.h). The tokenizer
 * borrows them: w's source and be must outlive it. *out owned by the
 * caller, free with s3tok_free(). */
cbx_status s3tok_load(struct s3tokenizer **out, const struct weights *w, const struct backend *be, char *err);
void s3tok_free(struct s3tokenizer *t); /* no-op on NULL */

/* S3Tokenizer.log_mel_spectrogram of a 16 kHz waveform (before any max_len
 * cut): *mel [128, *frames] with *frames = n // 160, owned by the caller,
 * free with free(). */
cbx_status s3tok_log_mel(const struct s3tokenizer *t, const struct backend *be,
                         const float *wav16, int64_t n, float **mel, int64_t *frames,
                         char *err);

/* Tokens s3tok_tokenize gives for n samples without max_len: F = n // 160
 * mel frames, ceil(ceil(F / 2) / 2) tokens (0 when n is too short). */
int64_t s3tok_n_tokens(int64_t n);

/* S3Tokenizer.forward([wav16], max_len): tokens of one 16 kHz waveform,
 * at most max_len of them (0 = no limit; the mel is cut to 4 * max_len
 * frames after normalisation). *tokens owned by the caller, free with
 * free(). */
cbx_status s3tok_tokenize(const struct s3tokenizer *t, const struct backend *be,
                          const float *wav16, int64_t n, int64_t max_len,
                          int32_t **tokens, int64_t *n_tokens, char *err);

/* S3TokenizerV2.quantize(mel, mel_len) of one unpadded log-mel
 * mel[128, frames] (host, row-major, as s3tok_log_mel returns it): the
 * encoder and FSQ, with the 30 s windowing beyond 3000 frames. *tokens
 * owned by the caller, free with free(). */
cbx_status s3tok_quantize(const struct s3tokenizer *t, const struct backend *be,
                          const float *mel, int64_t frames, int32_t **tokens,
                          int64_t *n_tokens, char *err);

/* embed_ref's reconciliation: when the prompt mel has mel_frames frames
 * and mel_frames != 2 * n_tokens, keep the first mel_frames / 2 tokens
 * (never more than there are). Returns the kept count. */
int64_t s3tok_reconcile_prompt(int64_t n_tokens, int64_t mel_frames);

#endif
