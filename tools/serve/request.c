/* request.c - POST /v1/audio/speech bodies (see request.h). Unknown fields
 * are ignored (OpenAI clients send some we have no use for, such as
 * "instructions"); known fields must have the right type and range. */
#include "request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int api_error_set(struct api_error *e, int http, const char *type, const char *param, const char *code,
                  const char *fmt, ...)
{
    e->http = http;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return http;
}

char *api_error_json(const struct api_error *e)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *o = root ? cJSON_AddObjectToObject(root, "error") : NULL;
    if (!o) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(o, "param", e->param);
    else cJSON_AddNullToObject(o, "param");
    if (e->code) cJSON_AddStringToObject(o, "code", e->code);
    else cJSON_AddNullToObject(o, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

bool serve_name_valid(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        const char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
        if (n >= SERVE_NAME_MAX) return false;
    }
    return n > 0;
}

static const char *const format_names[] = {"wav", "pcm", "flac", "mp3", "opus"};
static const char *const format_mimes[] = {"audio/wav", "audio/pcm", "audio/flac", "audio/mpeg", "audio/ogg"};

const char *serve_format_name(enum serve_format f)
{
    return (unsigned)f < 5 ? format_names[f] : "?";
}

const char *serve_format_mime(enum serve_format f)
{
    return (unsigned)f < 5 ? format_mimes[f] : "application/octet-stream";
}

#define BAD(param, ...) api_error_set(e, 400, "invalid_request_error", param, "invalid_value", __VA_ARGS__)

/* UTF-8 code points of s, or (size_t)-1 when s is not valid UTF-8 */
static size_t utf8_chars(const unsigned char *s)
{
    size_t n = 0;
    while (*s) {
        unsigned c = *s;
        int k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
        if (k < 0 || (k == 1 && c < 0xc2) || (k == 3 && c > 0xf4)) return (size_t)-1;
        s++;
        for (int i = 0; i < k; i++, s++)
            if ((*s & 0xc0) != 0x80) return (size_t)-1;
        n++;
    }
    return n;
}

/* A number field in [lo, hi]; integer: a whole number. 0 ok, else 400. */
static int num_field(const cJSON *v, const char *name, double lo, double hi, bool integer, double *out,
                     struct api_error *e)
{
    if (!cJSON_IsNumber(v)) return BAD(name, "'%s' must be a number", name);
    const double x = v->valuedouble;
    if (!isfinite(x) || x < lo || x > hi) return BAD(name, "'%s' must be in [%g, %g], got %g", name, lo, hi, x);
    if (integer && x != floor(x)) return BAD(name, "'%s' must be an integer, got %g", name, x);
    *out = x;
    return 0;
}

int speech_req_parse(const char *body, size_t n, size_t max_input, struct speech_req *r, struct api_error *e)
{
    memset(r, 0, sizeof *r);
    cJSON *root = cJSON_ParseWithLength(body, n);
    int st = 0;
    if (!root) return BAD(NULL, "the body is not valid JSON");
    r->speed = 1.0;
    if (!cJSON_IsObject(root)) {
        st = BAD(NULL, "the body must be a JSON object");
        goto out;
    }
    const cJSON *v;
    /* model: optional; any of the names GET /v1/models lists is checked by
     * the server, here only its type */
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "model")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v) || strlen(v->valuestring) >= sizeof r->model) {
            st = BAD("model", "'model' must be a string of at most %zu characters", sizeof r->model - 1);
            goto out;
        }
        memcpy(r->model, v->valuestring, strlen(v->valuestring) + 1);
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "input");
    if (!v) {
        st = api_error_set(e, 400, "invalid_request_error", "input", "missing_required_parameter",
                           "'input' is required");
        goto out;
    }
    if (!cJSON_IsString(v)) {
        st = BAD("input", "'input' must be a string");
        goto out;
    }
    const size_t chars = utf8_chars((const unsigned char *)v->valuestring);
    if (chars == (size_t)-1) {
        st = BAD("input", "'input' is not valid UTF-8");
        goto out;
    }
    if (chars == 0 || !v->valuestring[strspn(v->valuestring, " \t\r\n\f\v")]) {
        st = BAD("input", "'input' is empty");
        goto out;
    }
    if (chars > max_input) {
        st = api_error_set(e, 400, "invalid_request_error", "input", "string_above_max_length",
                           "'input' has %zu characters; at most %zu are allowed", chars, max_input);
        goto out;
    }
    r->input_chars = chars;
    /* voice: a name, or {"id": name} as newer OpenAI clients send */
    v = cJSON_GetObjectItemCaseSensitive(root, "voice");
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "id");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v) || !serve_name_valid(v->valuestring)) {
            st = BAD("voice", "'voice' must be a voice name of 1 to %d letters, digits, '_' or '-'", SERVE_NAME_MAX);
            goto out;
        }
        memcpy(r->voice, v->valuestring, strlen(v->valuestring) + 1);
    } else {
        memcpy(r->voice, "default", 8);
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "response_format")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v)) {
            st = BAD("response_format", "'response_format' must be a string");
            goto out;
        }
        int f = -1;
        for (int k = 0; k < 5; k++)
            if (!strcmp(v->valuestring, format_names[k])) f = k;
        if (f < 0) {
            if (!strcmp(v->valuestring, "aac"))
                st = api_error_set(e, 400, "invalid_request_error", "response_format", "unsupported_value",
                                   "response_format 'aac' is not supported by this server (Debian has no "
                                   "well-kept AAC encoder); use wav, pcm, flac, mp3 or opus");
            else
                st = BAD("response_format", "unknown response_format (wav, pcm, flac, mp3, opus)");
            goto out;
        }
        r->format = (enum serve_format)f;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "stream_format")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v) || (strcmp(v->valuestring, "audio") && strcmp(v->valuestring, "sse"))) {
            st = BAD("stream_format", "'stream_format' must be \"audio\" or \"sse\"");
            goto out;
        }
        r->stream = !strcmp(v->valuestring, "sse") ? SERVE_STREAM_SSE : SERVE_STREAM_AUDIO;
    }
    double x;
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "speed")) && !cJSON_IsNull(v)) {
        if ((st = num_field(v, "speed", 0.25, 4.0, false, &x, e))) goto out;
        r->speed = x;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "seed")) && !cJSON_IsNull(v)) {
        /* a number up to 2^53 (exact in JSON), or a string of digits for
         * any 64-bit seed */
        if (cJSON_IsString(v)) {
            const char *s = v->valuestring;
            char *end;
            if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 20) {
                st = BAD("seed", "'seed' must be a non-negative integer");
                goto out;
            }
            unsigned long long u = strtoull(s, &end, 10);
            if (*end || (strlen(s) == 20 && strcmp(s, "18446744073709551615") > 0)) {
                st = BAD("seed", "'seed' must fit in 64 bits");
                goto out;
            }
            r->seed = u;
        } else {
            if ((st = num_field(v, "seed", 0, 9007199254740992.0, true, &x, e))) goto out;
            r->seed = (uint64_t)x;
        }
        r->set |= REQ_SEED;
    }
    static const struct { const char *name; double lo, hi; bool integer; unsigned bit; } nums[] = {
        {"temperature", 1e-6, 100, false, REQ_TEMPERATURE}, {"top_k", 0, 1000000, true, REQ_TOP_K},
        {"top_p", 0, 1, false, REQ_TOP_P}, {"min_p", 0, 1, false, REQ_MIN_P},
        {"repetition_penalty", 1e-6, 100, false, REQ_REPETITION}, {"max_tokens", 1, 100000, true, REQ_MAX_TOKENS},
        {"exaggeration", 0, 100, false, REQ_EXAGGERATION}, {"cfg_weight", 0, 100, false, REQ_CFG},
        {"timeout", 0.001, 86400, false, REQ_TIMEOUT},
    };
    for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) {
        v = cJSON_GetObjectItemCaseSensitive(root, nums[k].name);
        if (!v || cJSON_IsNull(v)) continue;
        if ((st = num_field(v, nums[k].name, nums[k].lo, nums[k].hi, nums[k].integer, &x, e))) goto out;
        switch (nums[k].bit) {
        case REQ_TEMPERATURE: r->temperature = x; break;
        case REQ_TOP_K: r->top_k = (int)x; break;
        case REQ_TOP_P: r->top_p = x; break;
        case REQ_MIN_P: r->min_p = x; break;
        case REQ_REPETITION: r->repetition_penalty = x; break;
        case REQ_MAX_TOKENS: r->max_tokens = (int)x; break;
        case REQ_EXAGGERATION: r->exaggeration = x; break;
        case REQ_TIMEOUT: r->timeout = x; break;
        default: r->cfg_weight = x; break;
        }
        r->set |= nums[k].bit;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "language")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v) || !v->valuestring[0] || strlen(v->valuestring) >= sizeof r->language ||
            strspn(v->valuestring, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_") != strlen(v->valuestring)) {
            st = BAD("language", "'language' must be a language code such as \"en\"");
            goto out;
        }
        memcpy(r->language, v->valuestring, strlen(v->valuestring) + 1);
        r->set |= REQ_LANGUAGE;
    }
    if (!(r->input = strdup(cJSON_GetObjectItemCaseSensitive(root, "input")->valuestring))) {
        st = api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        goto out;
    }
out:
    cJSON_Delete(root);
    if (st) {
        free(r->input);
        memset(r, 0, sizeof *r);
    }
    return st;
}

void speech_req_free(struct speech_req *r)
{
    free(r->input);
    r->input = NULL;
}
