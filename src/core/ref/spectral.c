/* spectral.c - ref kernels of the spectral group (see ops.h). */
#include "../backend.h"

void ref_register_spectral(struct kernels *k)
{
    (void)k;
}
