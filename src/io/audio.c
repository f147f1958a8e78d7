/* audio.c - audio files in and out through libsndfile (see audio.h).
 *
 * Reading never trusts the frame count in a header: samples are decoded in
 * chunks into a growing buffer, so memory follows the data actually
 * present, and the decoded length is capped (max_frames) against files
 * that expand enormously (FLAC constant subframes, forged headers). */
#include "audio.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sndfile.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK 4096 /* frames decoded per sf_readf_float call */

void io_audio_free(struct audio *a)
{
    if (!a) return;
    free(a->pcm);
    memset(a, 0, sizeof *a);
}

/* ---- reading ------------------------------------------------------------ */

/* Decode an opened file into *out (mono float). */
static cbx_status decode(SNDFILE *sf, const SF_INFO *info, const char *name,
                         int64_t max_frames, struct audio *out, char *err)
{
    cbx_status rc = CBX_OK;
    float *chunk = NULL, *pcm = NULL;
    int64_t n = 0, cap = 0;
    const int ch = info->channels;
    if (ch < 1 || ch > 1024)
        return err_setf(err, CBX_ERR_FORMAT, "%s: %d channels (allowed 1..1024)", name, ch);
    if (info->samplerate < AUDIO_MIN_RATE || info->samplerate > AUDIO_MAX_RATE)
        return err_setf(err, CBX_ERR_FORMAT, "%s: sample rate %d Hz (allowed %d..%d)", name,
                        info->samplerate, AUDIO_MIN_RATE, AUDIO_MAX_RATE);
    if (max_frames <= 0) max_frames = (int64_t)AUDIO_MAX_SECONDS * info->samplerate;

    chunk = malloc((size_t)CHUNK * (size_t)ch * sizeof *chunk);
    if (!chunk) { rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", name); goto cleanup; }
    /* the header's count is only a hint for the first allocation */
    cap = info->frames > 0 && info->frames <= max_frames && info->frames <= (1 << 22)
              ? info->frames : 1 << 16;
    pcm = malloc((size_t)cap * sizeof *pcm);
    if (!pcm) { rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", name); goto cleanup; }
    for (;;) {
        sf_count_t got = sf_readf_float(sf, chunk, CHUNK);
        if (got <= 0) break;
        if (n + got > max_frames) {
            rc = err_setf(err, CBX_ERR_FORMAT, "%s: longer than %lld samples (%.0f s at %d Hz)",
                          name, (long long)max_frames,
                          (double)max_frames / info->samplerate, info->samplerate);
            goto cleanup;
        }
        if (n + got > cap) {
            int64_t nc = cap * 2 > n + got ? cap * 2 : n + got;
            if (nc > max_frames) nc = max_frames;
            float *p = realloc(pcm, (size_t)nc * sizeof *p);
            if (!p) { rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", name); goto cleanup; }
            pcm = p;
            cap = nc;
        }
        for (sf_count_t i = 0; i < got; i++) {
            const float *fr = chunk + i * ch;
            float s = fr[0];
            for (int c = 1; c < ch; c++) s += fr[c];
            float v = ch == 1 ? s : s / (float)ch; /* numpy mean over channels */
            if (!isfinite(v)) {
                rc = err_setf(err, CBX_ERR_FORMAT, "%s: sample %lld is not finite", name,
                              (long long)(n + i));
                goto cleanup;
            }
            pcm[n + i] = v;
        }
        n += got;
    }
    if (sf_error(sf) != SF_ERR_NO_ERROR) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: decoding failed after %lld samples (libsndfile: "
                      "%s)", name, (long long)n, sf_strerror(sf));
        goto cleanup;
    }
    if (n == 0) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: zero-length audio (no samples)", name);
        goto cleanup;
    }
    out->pcm = pcm;
    out->n = n;
    out->sample_rate = info->samplerate;
    out->channels = ch;
    pcm = NULL;
cleanup:
    free(pcm);
    free(chunk);
    return rc;
}

cbx_status io_audio_read(const char *path, struct audio *out, char *err)
{
    cbx_status rc;
    SNDFILE *sf = NULL;
    SF_INFO info = {0};
    struct stat st;
    int fd = -1;
    if (out) memset(out, 0, sizeof *out);
    if (!path || !out) return err_setf(err, CBX_ERR_INVALID_ARG, "io_audio_read: NULL argument");
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_setf(err, CBX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        rc = err_setf(err, CBX_ERR_IO, "%s: is a directory, not an audio file", path);
        goto cleanup;
    }
    sf = sf_open_fd(fd, SFM_READ, &info, 0);
    if (!sf) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: not a readable audio file (libsndfile: %s)", path,
                      sf_strerror(NULL));
        goto cleanup;
    }
    rc = decode(sf, &info, path, 0, out, err);
cleanup:
    if (sf) sf_close(sf);
    if (fd >= 0) close(fd);
    return rc;
}

/* libsndfile virtual I/O over a read-only memory buffer */
struct membuf {
    const unsigned char *p;
    sf_count_t n, pos;
};

static sf_count_t mem_len(void *u) { return ((struct membuf *)u)->n; }
static sf_count_t mem_tell(void *u) { return ((struct membuf *)u)->pos; }

static sf_count_t mem_seek(sf_count_t off, int whence, void *u)
{
    struct membuf *m = u;
    sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->n;
    if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END) return -1;
    /* reject positions that would overflow or precede the start */
    if ((off > 0 && base > INT64_MAX - off) || base + off < 0) return -1;
    m->pos = base + off;
    return m->pos;
}

static sf_count_t mem_read(void *dst, sf_count_t count, void *u)
{
    struct membuf *m = u;
    if (count <= 0 || m->pos >= m->n) return 0;
    sf_count_t k = m->n - m->pos < count ? m->n - m->pos : count;
    memcpy(dst, m->p + m->pos, (size_t)k);
    m->pos += k;
    return k;
}

static sf_count_t mem_write(const void *src, sf_count_t count, void *u)
{
    (void)src;
    (void)count;
    (void)u;
    return 0; /* read-only */
}

cbx_status io_audio_read_mem(const void *buf, size_t n, const char *name, int64_t max_frames,
                             struct audio *out, char *err)
{
    if (out) memset(out, 0, sizeof *out);
    if (!name) name = "<memory>";
    if (!out || (!buf && n)) return err_setf(err, CBX_ERR_INVALID_ARG, "io_audio_read_mem: NULL argument");
    if (n == 0) return err_setf(err, CBX_ERR_FORMAT, "%s: empty input (0 bytes)", name);
    if (n > (size_t)INT64_MAX) return err_setf(err, CBX_ERR_FORMAT, "%s: input too large", name);
    struct membuf m = {buf, (sf_count_t)n, 0};
    SF_VIRTUAL_IO vio = {mem_len, mem_seek, mem_read, mem_write, mem_tell};
    SF_INFO info = {0};
    SNDFILE *sf = sf_open_virtual(&vio, SFM_READ, &info, &m);
    if (!sf)
        return err_setf(err, CBX_ERR_FORMAT, "%s: not a readable audio file (libsndfile: %s)",
                        name, sf_strerror(NULL));
    cbx_status rc = decode(sf, &info, name, max_frames, out, err);
    sf_close(sf);
    return rc;
}

/* ---- writing ------------------------------------------------------------ */

cbx_status io_audio_format_from_path(const char *path, enum audio_format *fmt, char *err)
{
    if (!path || !fmt)
        return err_setf(err, CBX_ERR_INVALID_ARG, "io_audio_format_from_path: NULL argument");
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash + 1 : path, '.');
    if (!dot)
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: no file extension to choose an audio "
                        "format (use .wav or .flac)", path);
    if (strcasecmp(dot, ".wav") == 0) *fmt = AUDIO_WAV_PCM16;
    else if (strcasecmp(dot, ".flac") == 0) *fmt = AUDIO_FLAC;
    else
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: unknown audio format '%s' (use .wav or "
                        ".flac)", path, dot);
    return CBX_OK;
}

static atomic_uint tmp_counter;

cbx_status io_audio_write(const char *path, const float *pcm, int64_t n, int sample_rate,
                          enum audio_format fmt, char *err)
{
    cbx_status rc = CBX_OK;
    char *tmp = NULL;
    int fd = -1;
    SNDFILE *sf = NULL;
    SF_INFO info = {0};
    if (!path || (!pcm && n > 0))
        return err_setf(err, CBX_ERR_INVALID_ARG, "io_audio_write: NULL argument");
    if (n <= 0)
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: no samples to write (n = %lld)", path,
                        (long long)n);
    if (sample_rate < AUDIO_MIN_RATE || sample_rate > AUDIO_MAX_RATE)
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: sample rate %d Hz (allowed %d..%d)", path,
                        sample_rate, AUDIO_MIN_RATE, AUDIO_MAX_RATE);
    switch (fmt) {
    case AUDIO_WAV_PCM16: info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16; break;
    case AUDIO_WAV_FLOAT: info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT; break;
    case AUDIO_FLAC: info.format = SF_FORMAT_FLAC | SF_FORMAT_PCM_16; break;
    default:
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: unknown audio format %d", path, (int)fmt);
    }
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(pcm[i]))
            return err_setf(err, CBX_ERR_INVALID_ARG, "%s: sample %lld is not finite (%g)", path,
                            (long long)i, (double)pcm[i]);
    info.channels = 1;
    info.samplerate = sample_rate;
    if (!sf_format_check(&info))
        return err_setf(err, CBX_ERR_UNSUPPORTED, "%s: libsndfile cannot write this format at "
                        "%d Hz", path, sample_rate);

    /* an existing target that is not a regular file (/dev/null, a FIFO, a
     * terminal) is written in place: renaming a temporary onto it would
     * replace the device or pipe with a plain file */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode)) return err_setf(err, CBX_ERR_IO, "%s: is a directory", path);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0) return err_setf(err, CBX_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
        sf = sf_open_fd(fd, SFM_WRITE, &info, 0);
        if (!sf) {
            rc = err_setf(err, CBX_ERR_IO, "%s: cannot start writing (libsndfile: %s)", path, sf_strerror(NULL));
        } else {
            if (fmt != AUDIO_WAV_FLOAT) sf_command(sf, SFC_SET_CLIPPING, NULL, SF_TRUE);
            sf_count_t w = sf_writef_float(sf, pcm, n);
            if (w != n)
                rc = err_setf(err, CBX_ERR_IO, "%s: wrote %lld of %lld samples (libsndfile: %s)", path,
                              (long long)w, (long long)n, sf_strerror(sf));
            int e = sf_close(sf);
            if (e != 0 && rc == CBX_OK)
                rc = err_setf(err, CBX_ERR_IO, "%s: finishing the file failed (libsndfile: %s)", path,
                              sf_error_number(e));
        }
        if (close(fd) != 0 && rc == CBX_OK) rc = err_setf(err, CBX_ERR_IO, "%s: closing failed: %s", path, strerror(errno));
        return rc;
    }

    /* a unique name in the target's directory, so rename() is atomic */
    size_t len = strlen(path) + 48;
    tmp = malloc(len);
    if (!tmp) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", path);
    for (int tries = 0; fd < 0; tries++) {
        snprintf(tmp, len, "%s.tmp-%ld-%u", path, (long)getpid(),
                 atomic_fetch_add(&tmp_counter, 1u));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && (errno != EEXIST || tries >= 16)) {
            rc = err_setf(err, CBX_ERR_IO, "%s: cannot create a file there: %s", path,
                          strerror(errno));
            free(tmp);
            return rc;
        }
    }
    sf = sf_open_fd(fd, SFM_WRITE, &info, 0);
    if (!sf) {
        rc = err_setf(err, CBX_ERR_IO, "%s: cannot start writing (libsndfile: %s)", path,
                      sf_strerror(NULL));
        goto cleanup;
    }
    /* float -> int16 saturates instead of wrapping around */
    if (fmt != AUDIO_WAV_FLOAT) sf_command(sf, SFC_SET_CLIPPING, NULL, SF_TRUE);
    sf_count_t w = sf_writef_float(sf, pcm, n);
    if (w != n) {
        rc = err_setf(err, CBX_ERR_IO, "%s: wrote %lld of %lld samples (libsndfile: %s)", path,
                      (long long)w, (long long)n, sf_strerror(sf));
        goto cleanup;
    }
    int e = sf_close(sf);
    sf = NULL;
    if (e != 0) {
        rc = err_setf(err, CBX_ERR_IO, "%s: finishing the file failed (libsndfile: %s)", path,
                      sf_error_number(e));
        goto cleanup;
    }
    if (fsync(fd) != 0 && errno != EINVAL) {
        rc = err_setf(err, CBX_ERR_IO, "%s: cannot flush to disk: %s", path, strerror(errno));
        goto cleanup;
    }
    e = close(fd);
    fd = -1;
    if (e != 0) {
        rc = err_setf(err, CBX_ERR_IO, "%s: closing failed: %s", path, strerror(errno));
        goto cleanup;
    }
    if (rename(tmp, path) != 0) {
        rc = err_setf(err, CBX_ERR_IO, "%s: cannot replace the target: %s", path,
                      strerror(errno));
        goto cleanup;
    }
cleanup:
    if (sf) sf_close(sf);
    if (fd >= 0) close(fd);
    if (rc != CBX_OK) unlink(tmp);
    free(tmp);
    return rc;
}
