/* encode.h - float samples -> the bytes of a response_format, whole or
 * streamed. wav, flac, mp3 and Ogg Opus go through libsndfile's virtual
 * I/O into memory; pcm is raw s16le; a streamed wav is a header with
 * unknown lengths (0xFFFFFFFF) then s16le, since its sizes cannot be
 * known in advance. Samples become 16-bit as libsndfile's clipped
 * conversion does (so wav/flac/pcm equal `chatterbox say` output).
 *
 * Streaming: the bytes the encoder has appended since the last
 * enc_take() are handed out once; a container's later rewrite of bytes
 * already taken (the FLAC STREAMINFO totals) is not resent, which
 * streaming decoders do not need; a streamed MP3 leaves out its first
 * frame, LAME's Xing/Info tag, which is a placeholder of zeros until the
 * end (libmpg123 decodes only part of a stream that starts with it). */
#ifndef CBX_SERVE_ENCODE_H
#define CBX_SERVE_ENCODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "request.h"

struct enc {
    enum serve_format fmt;
    int rate;
    bool streaming;
    void *sf;         /* SNDFILE *, NULL for pcm and streamed wav */
    uint8_t *buf;     /* the bytes so far */
    size_t n, cap, pos, taken;
    int16_t *s16;
    size_t s16_cap;
    bool failed;
    bool mp3_checked; /* streamed mp3: the Xing frame looked for */
};

/* 0 ok; -1 with err (an unsupported format in this libsndfile). */
int enc_open(struct enc *e, enum serve_format fmt, int rate, bool streaming, char *err, size_t errlen);
/* Append n samples; 0 ok, -1 on failure (out of memory, encoder error). */
int enc_write(struct enc *e, const float *x, size_t n);
/* Finish the file (trailers, final headers); 0 ok. */
int enc_close(struct enc *e);
/* The bytes not yet taken: *p (borrowed until the next call) and *n. */
void enc_take(struct enc *e, const uint8_t **p, size_t *n);
void enc_free(struct enc *e);

/* Whether libsndfile can write fmt (wav and pcm always). */
bool enc_supported(enum serve_format fmt);

/* float -> s16le as libsndfile's clipped conversion; out has 2n bytes */
void enc_s16le(const float *x, size_t n, uint8_t *out);

/* base64 (RFC 4648, padded) of n bytes into out (4 * ceil(n / 3) + 1
 * bytes, NUL-terminated); returns the length. */
size_t base64_encode(const uint8_t *in, size_t n, char *out);

#endif
