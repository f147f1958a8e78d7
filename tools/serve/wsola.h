/* wsola.h - time-scale modification that keeps pitch (WSOLA: waveform
 * similarity overlap-add, Verhelst & Roelands 1993) for the speech
 * request's speed: output about n / speed samples. Streaming: samples go
 * in as they are produced, and the output that no later frame can change
 * comes out. 40 ms Hann frames, 20 ms output hop, +-10 ms search for the
 * input offset most similar to the natural continuation of the previous
 * frame. */
#ifndef CBX_SERVE_WSOLA_H
#define CBX_SERVE_WSOLA_H

#include <stddef.h>

struct wsola {
    double speed;
    int W, Hs, delta;
    float *win;
    float *in;          /* every input sample so far */
    size_t n_in, cap_in;
    float *out;         /* every output sample so far (the tail partial) */
    size_t cap_out, out_final, taken;
    long k;             /* next frame */
    long prev_src;      /* input start of the previous frame */
    int flushed;
};

/* speed in [0.25, 4], rate in Hz. 0 ok, -1 out of memory. */
int wsola_init(struct wsola *w, double speed, int rate);
/* Add n input samples; 0 ok, -1 out of memory. */
int wsola_push(struct wsola *w, const float *x, size_t n);
/* No more input: finish every frame; 0 ok, -1 out of memory. */
int wsola_flush(struct wsola *w);
/* The final output samples not yet taken: *p (borrowed until the next
 * call) and *n. */
void wsola_take(struct wsola *w, const float **p, size_t *n);
void wsola_free(struct wsola *w);

#endif
