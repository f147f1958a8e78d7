/* fft_plans.h - the process's FFTW plan cache (cpu/spectral.c). FFTW's
 * planner is not thread-safe, so every user in the process (the spectral
 * kernels, the Kaldi fbank of voice/campplus.c) takes its plans from here,
 * under one lock. Plans live for the process; executing them on new
 * 64-byte aligned arrays (fftwf_execute_dft_r2c/c2r) is thread-safe. */
#ifndef CBX_FFT_PLANS_H
#define CBX_FFT_PLANS_H

#include <fftw3.h>
#include <stdbool.h>

/* The out-of-place r2c and c2r plans of size n (FFTW_ESTIMATE), made on
 * first use; false when FFTW or malloc fails. */
bool fft_plans_get(int n, fftwf_plan *r2c, fftwf_plan *c2r);

#endif
