/* fuzz_serve_request.c - speech_req_parse (tools/serve/request.c), the
 * body of POST /v1/audio/speech, on arbitrary bytes: it must either fail
 * with an HTTP 4xx/5xx status, a NUL-terminated message and a zeroed
 * request, or return a request whose every field is in its documented
 * range (valid UTF-8 input within the limit, a safe voice name, a known
 * format, finite numbers in range). The error body must be valid JSON. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct speech_req r;
    struct api_error e;
    memset(&e, 0, sizeof e);
    static const struct speech_req zero;
    const int st = speech_req_parse((const char *)data, size, 64, &r, &e);
    if (st) {
        if (st < 400 || st > 599 || e.http != st || !memchr(e.message, 0, sizeof e.message) || !e.message[0] ||
            memcmp(&r, &zero, sizeof r))
            __builtin_trap();
        char *j = api_error_json(&e);
        if (!j) return 0; /* out of memory only */
        cJSON *back = cJSON_Parse(j);
        if (!back || !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(back, "error"))) __builtin_trap();
        cJSON_Delete(back);
        free(j);
        return 0;
    }
    if (!r.input || !r.input[0] || r.input_chars == 0 || r.input_chars > 64 || strlen(r.input) > 4 * 64 ||
        !serve_name_valid(r.voice) || (unsigned)r.format > SERVE_OPUS || (unsigned)r.stream > SERVE_STREAM_SSE ||
        !(r.speed >= 0.25 && r.speed <= 4.0) || !memchr(r.model, 0, sizeof r.model) ||
        !memchr(r.language, 0, sizeof r.language))
        __builtin_trap();
    if ((r.set & REQ_TEMPERATURE) && !(r.temperature > 0 && r.temperature <= 100)) __builtin_trap();
    if ((r.set & REQ_TOP_P) && !(r.top_p >= 0 && r.top_p <= 1)) __builtin_trap();
    if ((r.set & REQ_TOP_K) && (r.top_k < 0 || r.top_k > 1000000)) __builtin_trap();
    if ((r.set & REQ_MAX_TOKENS) && (r.max_tokens < 1 || r.max_tokens > 100000)) __builtin_trap();
    if ((r.set & REQ_TIMEOUT) && !(r.timeout > 0 && isfinite(r.timeout))) __builtin_trap();
    /* the voice name can only name a file inside the voices directory */
    if (strchr(r.voice, '/') || strchr(r.voice, '.')) __builtin_trap();
    speech_req_free(&r);
    return 0;
}
