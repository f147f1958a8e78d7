/* encode.c - response_format encoders (see encode.h). */
#include "encode.h"

#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- virtual I/O into e->buf ---------------------------------------- */

static sf_count_t v_len(void *u) { return (sf_count_t)((struct enc *)u)->n; }

static sf_count_t v_seek(sf_count_t off, int whence, void *u)
{
    struct enc *e = u;
    sf_count_t p = whence == SEEK_SET ? off : whence == SEEK_CUR ? (sf_count_t)e->pos + off : (sf_count_t)e->n + off;
    if (p < 0) return -1;
    e->pos = (size_t)p;
    return p;
}

static sf_count_t v_read(void *ptr, sf_count_t count, void *u)
{
    struct enc *e = u;
    if (count <= 0 || e->pos >= e->n) return 0;
    size_t k = e->n - e->pos;
    if ((size_t)count < k) k = (size_t)count;
    memcpy(ptr, e->buf + e->pos, k);
    e->pos += k;
    return (sf_count_t)k;
}

static int reserve(struct enc *e, size_t need)
{
    if (need <= e->cap) return 0;
    size_t c = e->cap ? e->cap : 4096;
    while (c < need) c *= 2;
    uint8_t *b = realloc(e->buf, c);
    if (!b) return -1;
    e->buf = b;
    e->cap = c;
    return 0;
}

static sf_count_t v_write(const void *ptr, sf_count_t count, void *u)
{
    struct enc *e = u;
    if (count <= 0) return 0;
    if (reserve(e, e->pos + (size_t)count)) {
        e->failed = true;
        return 0;
    }
    if (e->pos > e->n) memset(e->buf + e->n, 0, e->pos - e->n);
    memcpy(e->buf + e->pos, ptr, (size_t)count);
    e->pos += (size_t)count;
    if (e->pos > e->n) e->n = e->pos;
    return count;
}

static sf_count_t v_tell(void *u) { return (sf_count_t)((struct enc *)u)->pos; }

static int sf_format_of(enum serve_format f)
{
    switch (f) {
    case SERVE_WAV: return SF_FORMAT_WAV | SF_FORMAT_PCM_16;
    case SERVE_FLAC: return SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
    case SERVE_MP3: return SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III;
    case SERVE_OPUS: return SF_FORMAT_OGG | SF_FORMAT_OPUS;
    default: return 0;
    }
}

bool enc_supported(enum serve_format fmt)
{
    if (fmt == SERVE_PCM) return true;
    SF_INFO info;
    memset(&info, 0, sizeof info);
    info.samplerate = 24000;
    info.channels = 1;
    info.format = sf_format_of(fmt);
    return info.format && sf_format_check(&info);
}

/* libsndfile 1.2's WAV float -> short with SFC_SET_CLIPPING, as measured
 * against it: floor(x * 0x8000), clamped to [-32768, 32767] */
static int16_t s16_sndfile(float x)
{
    const float v = floorf(x * 32768.0f);
    if (v >= 32767.0f) return 32767;
    if (v <= -32768.0f) return -32768;
    return (int16_t)v;
}

/* `chatterbox say -o -`'s raw conversion: clip to [-1, 1], times 32767 */
static int16_t s16_raw(float x)
{
    float c = x > 1.0f ? 1.0f : x < -1.0f ? -1.0f : x;
    return (int16_t)lrintf(c * 32767.0f);
}

void enc_s16le(const float *x, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        const int16_t v = s16_raw(x[i]);
        out[2 * i] = (uint8_t)(v & 0xff);
        out[2 * i + 1] = (uint8_t)((uint16_t)v >> 8);
    }
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

int enc_open(struct enc *e, enum serve_format fmt, int rate, bool streaming, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    e->fmt = fmt;
    e->rate = rate;
    e->streaming = streaming;
    if (fmt == SERVE_PCM) return 0;
    if (fmt == SERVE_WAV && streaming) {
        /* RIFF/WAVE, PCM 16-bit mono, sizes unknown: 0xFFFFFFFF */
        uint8_t h[44];
        memcpy(h, "RIFF", 4);
        put32(h + 4, 0xFFFFFFFFu);
        memcpy(h + 8, "WAVEfmt ", 8);
        put32(h + 16, 16);
        h[20] = 1, h[21] = 0, h[22] = 1, h[23] = 0; /* PCM, mono */
        put32(h + 24, (uint32_t)rate);
        put32(h + 28, (uint32_t)rate * 2);
        h[32] = 2, h[33] = 0, h[34] = 16, h[35] = 0;
        memcpy(h + 36, "data", 4);
        put32(h + 40, 0xFFFFFFFFu);
        if (reserve(e, sizeof h)) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        memcpy(e->buf, h, sizeof h);
        e->n = e->pos = sizeof h;
        return 0;
    }
    SF_INFO info;
    memset(&info, 0, sizeof info);
    info.samplerate = rate;
    info.channels = 1;
    info.format = sf_format_of(fmt);
    if (!sf_format_check(&info)) {
        snprintf(err, errlen, "this libsndfile cannot write %s", serve_format_name(fmt));
        return -1;
    }
    SF_VIRTUAL_IO io = {v_len, v_seek, v_read, v_write, v_tell};
    SNDFILE *sf = sf_open_virtual(&io, SFM_WRITE, &info, e);
    if (!sf) {
        snprintf(err, errlen, "cannot start the %s encoder: %s", serve_format_name(fmt), sf_strerror(NULL));
        free(e->buf);
        e->buf = NULL;
        return -1;
    }
    if (fmt == SERVE_WAV || fmt == SERVE_FLAC) sf_command(sf, SFC_SET_CLIPPING, NULL, SF_TRUE);
    if (fmt == SERVE_MP3) {
        /* constant bit rate: a stream's length follows from its size (a
         * streamed file has no valid Xing tag, and readers such as
         * libsndfile's estimate a VBR stream's length from its first frame) */
        int mode = SF_BITRATE_MODE_CONSTANT;
        sf_command(sf, SFC_SET_BITRATE_MODE, &mode, sizeof mode);
        double level = 0.5; /* 0: best; libsndfile maps it to LAME's bit rates */
        sf_command(sf, SFC_SET_COMPRESSION_LEVEL, &level, sizeof level);
    }
    e->sf = sf;
    return 0;
}

int enc_write(struct enc *e, const float *x, size_t n)
{
    if (e->failed) return -1;
    if (n == 0) return 0;
    if (e->sf) {
        if (sf_write_float(e->sf, x, (sf_count_t)n) != (sf_count_t)n || e->failed) {
            e->failed = true;
            return -1;
        }
        return 0;
    }
    /* pcm, streamed wav: appended s16le */
    if (reserve(e, e->n + 2 * n)) {
        e->failed = true;
        return -1;
    }
    uint8_t *o = e->buf + e->n;
    if (e->fmt == SERVE_PCM) {
        enc_s16le(x, n, o);
    } else {
        for (size_t i = 0; i < n; i++) {
            const int16_t v = s16_sndfile(x[i]);
            o[2 * i] = (uint8_t)(v & 0xff);
            o[2 * i + 1] = (uint8_t)((uint16_t)v >> 8);
        }
    }
    e->n += 2 * n;
    e->pos = e->n;
    return 0;
}

int enc_close(struct enc *e)
{
    if (e->sf) {
        const int r = sf_close(e->sf);
        e->sf = NULL;
        if (r != 0) e->failed = true;
    }
    return e->failed ? -1 : 0;
}

/* Length of the MPEG audio layer III frame whose header is at h (4 bytes),
 * 0 when h is not one. */
static size_t mp3_frame_len(const uint8_t *h)
{
    static const int br1[15] = {0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320};
    static const int br2[15] = {0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160};
    static const int sr[3][3] = {{11025, 12000, 8000}, {22050, 24000, 16000}, {44100, 48000, 32000}};
    if (h[0] != 0xff || (h[1] & 0xe0) != 0xe0 || ((h[1] >> 1) & 3) != 1) return 0;
    const int ver = (h[1] >> 3) & 3; /* 0: MPEG 2.5, 2: MPEG 2, 3: MPEG 1 */
    const int bi = h[2] >> 4, si = (h[2] >> 2) & 3, pad = (h[2] >> 1) & 1;
    if (ver == 1 || bi == 0 || bi == 15 || si == 3) return 0;
    const int rate = sr[ver == 3 ? 2 : ver == 2 ? 1 : 0][si];
    const int kbps = ver == 3 ? br1[bi] : br2[bi];
    return (size_t)((ver == 3 ? 144 : 72) * kbps * 1000 / rate + pad);
}

void enc_take(struct enc *e, const uint8_t **p, size_t *n)
{
    if (e->fmt == SERVE_MP3 && e->streaming && !e->mp3_checked) {
        if (e->n < 4) {
            *p = NULL;
            *n = 0;
            return;
        }
        const size_t fl = mp3_frame_len(e->buf);
        if (fl && e->n < fl && e->sf) { /* wait for the whole first frame */
            *p = NULL;
            *n = 0;
            return;
        }
        e->mp3_checked = true;
        /* LAME's tag frame: zeros after the header until sf_close writes
         * "Xing"/"Info" and the counts into it */
        bool tag = fl > 4 && fl <= e->n;
        for (size_t i = 4; tag && i < fl; i++) tag = e->buf[i] == 0;
        for (size_t i = 4; fl && !tag && i + 4 <= fl && i < 64; i++)
            tag = !memcmp(e->buf + i, "Xing", 4) || !memcmp(e->buf + i, "Info", 4);
        if (tag) e->taken = fl;
    }
    if (e->taken >= e->n) {
        *p = NULL;
        *n = 0;
        return;
    }
    *p = e->buf + e->taken;
    *n = e->n - e->taken;
    e->taken = e->n;
}

void enc_free(struct enc *e)
{
    if (e->sf) sf_close(e->sf);
    free(e->buf);
    free(e->s16);
    memset(e, 0, sizeof *e);
}

size_t base64_encode(const uint8_t *in, size_t n, char *out)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        const uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = t[v >> 18], out[o++] = t[(v >> 12) & 63], out[o++] = t[(v >> 6) & 63], out[o++] = t[v & 63];
    }
    if (n - i == 1) {
        const uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = t[v >> 18], out[o++] = t[(v >> 12) & 63], out[o++] = '=', out[o++] = '=';
    } else if (n - i == 2) {
        const uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = t[v >> 18], out[o++] = t[(v >> 12) & 63], out[o++] = t[(v >> 6) & 63], out[o++] = '=';
    }
    out[o] = 0;
    return o;
}
