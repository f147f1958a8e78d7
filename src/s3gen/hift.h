/* hift.h - HiFT vocoder (S3Gen `mel2wav`): 80-bin log-mel -> 24 kHz
 * waveform through an F0-driven neural source-filter excitation, HiFi-GAN
 * upsampling and an iSTFT head (chatterbox models/s3gen/hifigan.py
 * HiFTGenerator, f0_predictor.py ConvRNNF0Predictor). The configuration is
 * the one S3Gen instantiates (spec/hift.md §1); channel counts are read
 * from the weights.
 * Thread safety: a loaded hift is read-only and may serve any number of
 * concurrent calls, each with its own arena. */
#ifndef CBX_S3GEN_HIFT_H
#define CBX_S3GEN_HIFT_H

#include <stdint.h>

#include "core/ops.h"
#include "io/weights.h"

#define HIFT_SAMPLES_PER_FRAME 480 /* 8 * 5 * 3 upsampling * iSTFT hop 4 */
#define HIFT_SAMPLE_RATE 24000

struct hift;

/* Load `mel2wav.*` from w (the MODEL_S3GEN component). Weight-normed layers
 * (parametrizations.weight.original0/1 or legacy weight_g/weight_v) are
 * folded once into memory the model owns; the other weights are borrowed
 * from w's source, which must outlive the model. Every weight is placed
 * on be (core/weights.h), which must outlive the model. On failure *out is NULL
 * and err (ERR_MAX bytes, or NULL) names the missing or misshapen tensor. */
cbx_status hift_load(struct hift **out, const struct weights *w, const struct backend *be, char *err);
void hift_free(struct hift *h); /* no-op on NULL */

/* HiFTGenerator.inference with an empty cache_source:
 * mel [1, 80, T] -> wav [1, 480*T], clamped to +-0.99 (no trim fade: that
 * is S3Gen's). *source (when not NULL) receives the excitation
 * s [1, 1, 480*T]; *f0 (when not NULL) the predicted f0 [1, T] in Hz.
 * The SineGen draws come from the streams "hift.sinegen.phase" and
 * "hift.sinegen.noise" seeded with `seed`, counters from 0 (rng.md §3).
 * All results arena-owned; NULL on failure (arena_status(a) says why).
 * Intermediates go to private scratch arenas (created per call on a's
 * backend, freed before returning), so `a` grows by stage results only. */
struct tensor *hift_inference(struct arena *a, const struct hift *h, const struct tensor *mel,
                              uint64_t seed, struct tensor **source, struct tensor **f0);

/* The stages of hift_inference, for parity tests and streaming: */
/* ConvRNNF0Predictor: mel [1, 80, T] -> f0 [1, T]. */
struct tensor *hift_f0(struct arena *a, const struct hift *h, const struct tensor *mel);
/* f0_upsamp + SourceModuleHnNSF (sine_merge only): f0 [1, T] ->
 * s [1, 1, 480*T]; draws as hift_inference. */
struct tensor *hift_source(struct arena *a, const struct hift *h, const struct tensor *f0,
                           uint64_t seed);
/* HiFTGenerator.decode: mel [1, 80, T] + source s [1, 1, 480*T] ->
 * wav [1, 480*T]. */
struct tensor *hift_decode(struct arena *a, const struct hift *h, const struct tensor *mel,
                           const struct tensor *source);

#endif
