/* audio.h - audio files in and out through libsndfile.
 *
 * Reading accepts whatever the linked libsndfile decodes (WAV, FLAC,
 * Ogg/Vorbis, Opus, MP3 with libsndfile >= 1.1, AIFF, ...) from a path or
 * from memory, and returns mono float32: channels are mixed by averaging,
 * integer PCM comes back as libsndfile's normalised floats (int16 / 32768).
 * No resampling happens here.
 * Writing produces 16-bit PCM WAV, float WAV or 16-bit FLAC, through a
 * temporary file next to the target that is renamed over it only when
 * everything was written, so a failure never leaves a partial file.
 * Thread safety: independent calls may run concurrently. */
#ifndef CBX_IO_AUDIO_H
#define CBX_IO_AUDIO_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* Sample rates outside this range are refused as absurd. */
#define AUDIO_MIN_RATE 1000
#define AUDIO_MAX_RATE 768000
/* Default cap on decoded length (seconds at the file's rate) so a tiny
 * compressed file cannot expand into gigabytes. */
#define AUDIO_MAX_SECONDS 3600

struct audio {
    float *pcm;      /* mono samples; owned, free with io_audio_free */
    int64_t n;       /* number of samples (> 0 after a successful read) */
    int sample_rate; /* Hz */
    int channels;    /* channels in the source, before the mixdown */
};

/* Read the file at path. On failure *out is zeroed and err says why
 * (missing file, not an audio file, zero-length audio, absurd rate). */
cbx_status io_audio_read(const char *path, struct audio *out, char *err);
/* The same from n bytes at buf (uploads, fuzzing); `name` is used in
 * messages only (NULL: "<memory>"). max_frames > 0 caps the decoded
 * length (longer input fails), <= 0 uses AUDIO_MAX_SECONDS. */
cbx_status io_audio_read_mem(const void *buf, size_t n, const char *name, int64_t max_frames,
                             struct audio *out, char *err);
void io_audio_free(struct audio *a); /* no-op on NULL or an empty struct */

enum audio_format {
    AUDIO_WAV_PCM16, /* clipped to [-1, 1), libsndfile's float -> int16 conversion
                      * with SFC_SET_CLIPPING (as soundfile.write): error < 1/32768 */
    AUDIO_WAV_FLOAT, /* exact float32 */
    AUDIO_FLAC,      /* 16-bit, clipped as PCM16 */
};

/* Write n mono samples (n > 0, all finite) at sample_rate. The target is
 * replaced atomically (rename); on failure nothing is left behind. */
cbx_status io_audio_write(const char *path, const float *pcm, int64_t n, int sample_rate,
                          enum audio_format fmt, char *err);
/* Format from the file name's extension (case-insensitive): .wav ->
 * AUDIO_WAV_PCM16, .flac -> AUDIO_FLAC; anything else fails. */
cbx_status io_audio_format_from_path(const char *path, enum audio_format *fmt, char *err);

#endif
