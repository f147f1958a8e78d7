/* elementwise.c - cpu kernels of the elementwise group (see ops.h). */
#include "../backend.h"

void cpu_register_elementwise(struct kernels *k)
{
    (void)k;
}
