/* fuzz_torch_pt.c - io_pt_read_mem on arbitrary bytes: the zip layer
 * (libzip), the restricted unpickler and tensor materialisation. Every
 * returned tree is walked and its tensor bytes touched, so a wrong size or
 * a dangling pointer shows up under the sanitizers. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "io/torch_pt.h"

static int touch(void *user, const char *name, const struct pt_value *v)
{
    const struct pt_tensor *t = pt_as_tensor(v);
    uint8_t *acc = user;
    for (size_t i = 0; t && i < t->nbytes; i += 61) *acc ^= ((const uint8_t *)t->data)[i];
    if (t && t->nbytes) *acc ^= ((const uint8_t *)t->data)[t->nbytes - 1];
    *acc ^= (uint8_t)strlen(name);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[ERR_MAX];
    struct pt_value *v = NULL;
    if (io_pt_read_mem(data, size, "fuzz", &v, err) == CBX_OK) {
        volatile uint8_t acc = 0;
        uint8_t a = 0;
        pt_foreach_tensor(v, touch, &a);
        acc = a;
        (void)acc;
        (void)pt_get_path(v, "t3.speaker_emb");
    }
    pt_value_free(v);
    return 0;
}
