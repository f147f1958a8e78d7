/* window.h - analysis windows for the spectral ops, filled on the host.
 *
 * hann: torch.hann_window(n, periodic) and scipy.signal.get_window('hann',
 * n) (periodic, i.e. fftbins=True) / scipy.signal.windows.hann(n, sym=True)
 * (symmetric). Values are computed in double and rounded once to float, as
 * scipy does before upstream converts them to a float32 tensor; torch's own
 * float32 computation can differ from this by one ulp.
 * Thread safety: any thread, concurrently. */
#ifndef CBX_WINDOW_H
#define CBX_WINDOW_H

#include <stdbool.h>

/* dst[i] = 0.5 - 0.5 cos(2 pi i / M), M = n (periodic) or n - 1
 * (symmetric); n == 1 gives {1}. n <= 0 writes nothing. */
void window_hann(float *dst, int n, bool periodic);

#endif
