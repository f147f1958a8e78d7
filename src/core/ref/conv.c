/* conv.c - ref kernels of the conv group (see ops.h). */
#include "../backend.h"

void ref_register_conv(struct kernels *k)
{
    (void)k;
}
