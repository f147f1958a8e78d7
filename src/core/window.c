/* window.c - analysis windows (see window.h). */
#include "window.h"

#include <math.h>

void window_hann(float *dst, int n, bool periodic)
{
    if (n <= 0) return;
    if (n == 1) { dst[0] = 1.0f; return; }
    double m = periodic ? (double)n : (double)(n - 1);
    for (int i = 0; i < n; i++)
        dst[i] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * (double)i / m));
}
