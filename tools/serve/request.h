/* request.h - the body of POST /v1/audio/speech (OpenAI's speech request
 * plus chatterbox's extensions) parsed and checked, and OpenAI-style
 * error descriptions. Pure functions of their input: fuzzed by
 * tests/fuzz/fuzz_serve_request.c. */
#ifndef CBX_SERVE_REQUEST_H
#define CBX_SERVE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum serve_format { SERVE_WAV, SERVE_PCM, SERVE_FLAC, SERVE_MP3, SERVE_OPUS };
enum serve_stream { SERVE_STREAM_NONE, SERVE_STREAM_AUDIO, SERVE_STREAM_SSE };

#define SERVE_NAME_MAX 64 /* voice names: 1..64 of [A-Za-z0-9_-] */

/* bits of speech_req.set: the extensions given */
enum {
    REQ_SEED = 1u << 0, REQ_TEMPERATURE = 1u << 1, REQ_TOP_K = 1u << 2, REQ_TOP_P = 1u << 3,
    REQ_MIN_P = 1u << 4, REQ_REPETITION = 1u << 5, REQ_MAX_TOKENS = 1u << 6, REQ_EXAGGERATION = 1u << 7,
    REQ_CFG = 1u << 8, REQ_LANGUAGE = 1u << 9, REQ_TIMEOUT = 1u << 10,
};

struct speech_req {
    char model[64];
    char *input;                 /* UTF-8, owned (speech_req_free) */
    size_t input_chars;          /* code points */
    char voice[SERVE_NAME_MAX + 1];
    enum serve_format format;    /* default wav */
    enum serve_stream stream;    /* default none: the whole file at once */
    double speed;                /* 1.0 */
    unsigned set;                /* REQ_* */
    uint64_t seed;
    double temperature, top_p, min_p, repetition_penalty, exaggeration, cfg_weight;
    int top_k, max_tokens;
    char language[16];
    double timeout;              /* seconds; the server's deadline caps it */
};

/* An OpenAI-style error: {"error":{"message","type","param","code"}}. */
struct api_error {
    int http;           /* 400, 401, ... */
    char message[320];
    const char *type;   /* "invalid_request_error", ... (static) */
    char param[32];     /* "" for null */
    const char *code;   /* static or NULL */
};

/* Fill e; returns e->http. */
int api_error_set(struct api_error *e, int http, const char *type, const char *param, const char *code,
                  const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* e as a JSON body, malloc'd (NULL when out of memory). */
char *api_error_json(const struct api_error *e);

/* Whether s is a valid stored-voice name (1..SERVE_NAME_MAX characters of
 * [A-Za-z0-9_-]): such a name can never leave the voices directory. */
bool serve_name_valid(const char *s);

/* Parse n bytes at body (need not be NUL-terminated). max_input: the most
 * code points input may have. On success 0 and *r is filled (free with
 * speech_req_free); on failure the HTTP status (400, ...) with e filled and
 * *r zeroed. */
int speech_req_parse(const char *body, size_t n, size_t max_input, struct speech_req *r, struct api_error *e);
void speech_req_free(struct speech_req *r);

/* "wav", "pcm", ... and their MIME types. */
const char *serve_format_name(enum serve_format f);
const char *serve_format_mime(enum serve_format f);

#endif
