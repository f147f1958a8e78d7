/* fuzz_prefix_store.c - prefix_store_parse on arbitrary bytes: the voice
 * prefix file reader (src/pipeline/prefix_store.c) must either refuse the
 * bytes with a one-line message and no result, or return a prefix of
 * exactly the sizes of the model and voice it was asked for.
 *
 * The model is a stand-in with the sizes of a tiny GPT-2 (1 layer, D 32,
 * F16 cache, speaker embedding of 4) and no weights: the parser reads only
 * sizes. The corpus seed valid.cbxpfx is prefix_store_save's file for this
 * model and voice with id FUZZ_ID and values (i % 7) * 0.25. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "pipeline/prefix_store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct t3_model m;
    static const float spk[4] = {0.5f, -1.0f, 2.0f, 0.25f};
    static const int32_t prompt[2] = {1, 2};
    uint8_t id[PREFIX_STORE_ID_SIZE];
    memset(id, 0x11, sizeof id); /* FUZZ_ID */
    m.hp.speaker_embed_size = 4;
    m.tfmr.n_layer = 1;
    m.tfmr.n_head = 1;
    m.tfmr.d_model = 32;
    m.tfmr.kv_type = TYPE_F16;
    const struct t3_cond c = {spk, prompt, 2, 0.0f};
    struct t3_prefix *p = (struct t3_prefix *)&m; /* must become NULL on failure */
    char err[ERR_MAX];
    err[0] = 0;
    if (prefix_store_parse(data, size, id, &m, &c, &p, err) != CBX_OK) {
        if (p || !memchr(err, 0, sizeof err) || !err[0] || strchr(err, '\n')) __builtin_trap();
        return 0;
    }
    if (!p || p->m != &m || p->n != 3 || p->n_prompt != 2 || memcmp(p->speaker_emb, spk, sizeof spk) ||
        memcmp(p->prompt_tokens, prompt, sizeof prompt))
        __builtin_trap();
    /* every value readable (the sanitizers check the reads) */
    uint32_t x = 0;
    const unsigned char *kv = p->kv;
    for (size_t i = 0; i < t3_backbone_kv_bytes(&m.tfmr, 3); i++) x = x * 31 + kv[i];
    if (p->kv_type != m.tfmr.kv_type) __builtin_trap();
    if (p->bytes == 0 && x == 0) __builtin_trap(); /* bytes is always set */
    t3_prefix_free(p);
    return 0;
}
