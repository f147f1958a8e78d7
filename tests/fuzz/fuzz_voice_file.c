/* fuzz_voice_file.c - conds_read_voice_mem on arbitrary bytes: the voice
 * file reader (src/voice/conds.c) must either fail with a one-line message
 * and a zeroed result, or return a complete voice whose every field obeys
 * the format of conds.h. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "voice/conds.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct conds c;
    struct conds_meta m;
    char err[ERR_MAX];
    static const struct conds zero;
    if (conds_read_voice_mem(data, size, "fuzz", &c, &m, err) != CBX_OK) {
        if (memcmp(&c, &zero, sizeof c) || !memchr(err, 0, sizeof err) || !err[0]) __builtin_trap();
        return 0;
    }
    if (c.n_speaker != 256 || c.n_embedding != 192 || !c.has_emotion_adv || !isfinite(c.emotion_adv) ||
        c.n_cond_prompt < 1 || c.n_cond_prompt > CONDS_MAX_PROMPT_TOKENS || c.n_prompt_token < 1 ||
        c.n_prompt_token > CONDS_MAX_PROMPT_TOKENS || c.n_prompt_feat < 1 || c.n_prompt_feat > CONDS_MAX_PROMPT_FRAMES ||
        m.format_version < 1 || m.format_version > CONDS_VOICE_FORMAT_VERSION || !memchr(m.variant, 0, sizeof m.variant) ||
        !memchr(m.source, 0, sizeof m.source) || !memchr(m.tool, 0, sizeof m.tool))
        __builtin_trap();
    for (int64_t i = 0; i < c.n_cond_prompt; i++)
        if (c.cond_prompt_tokens[i] < 0 || c.cond_prompt_tokens[i] >= CONDS_SPEECH_VOCAB) __builtin_trap();
    for (int64_t i = 0; i < c.n_prompt_token; i++)
        if (c.prompt_token[i] < 0 || c.prompt_token[i] >= CONDS_SPEECH_VOCAB) __builtin_trap();
    for (int64_t i = 0; i < c.n_prompt_feat * 80; i++)
        if (!isfinite(c.prompt_feat[i])) __builtin_trap();
    for (int64_t i = 0; i < 256; i++)
        if (!isfinite(c.speaker_emb[i])) __builtin_trap();
    for (int64_t i = 0; i < 192; i++)
        if (!isfinite(c.embedding[i])) __builtin_trap();
    conds_free(&c);
    return 0;
}
