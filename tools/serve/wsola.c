/* wsola.c - WSOLA time-scale modification (see wsola.h).
 * Invariants: frame k is written to out[k*Hs, k*Hs + W) from
 * in[src, src + W) with src = round(k*Hs*speed) + offset; after frame k
 * the output below (k+1)*Hs is final (later frames start there). */
#include "wsola.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int wsola_init(struct wsola *w, double speed, int rate)
{
    memset(w, 0, sizeof *w);
    w->speed = speed;
    w->W = rate / 25;           /* 40 ms */
    w->W -= w->W % 2;
    w->Hs = w->W / 2;           /* 20 ms */
    w->delta = rate / 100;      /* 10 ms */
    if (!(w->win = malloc(sizeof *w->win * (size_t)w->W))) return -1;
    for (int i = 0; i < w->W; i++) /* periodic Hann: overlaps at W/2 sum to 1 */
        w->win[i] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * i / w->W));
    w->prev_src = -1;
    return 0;
}

static int grow(float **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 8192;
    while (c < need) c *= 2;
    float *b = realloc(*buf, sizeof *b * c);
    if (!b) return -1;
    *buf = b;
    *cap = c;
    return 0;
}

static float at(const struct wsola *w, long i)
{
    return i >= 0 && (size_t)i < w->n_in ? w->in[i] : 0.0f;
}

/* frames while their input (search range included) is there, or all of
 * them up to the end of the input when flushing */
static int run(struct wsola *w)
{
    const size_t total_out = (size_t)llround((double)w->n_in / w->speed);
    for (;;) {
        const long c = lround((double)w->k * w->Hs * w->speed);
        /* the search reads up to c + delta + W, and the template (the
         * previous frame's continuation) up to prev_src + Hs + W */
        const long need = (c + w->delta > w->prev_src + w->Hs ? c + w->delta : w->prev_src + w->Hs) + w->W;
        if (!w->flushed && (size_t)need > w->n_in) return 0;
        if (w->flushed && (size_t)w->k * (size_t)w->Hs >= total_out) break;
        long src = c;
        if (w->k > 0) {
            /* the offset whose frame best continues the previous one */
            const long t = w->prev_src + w->Hs;
            double best = -INFINITY;
            for (long off = -w->delta; off <= w->delta; off++) {
                const long s = c + off;
                if (s < 0) continue;
                double acc = 0;
                for (int i = 0; i < w->W; i += 2) acc += (double)at(w, t + i) * (double)at(w, s + i);
                if (acc > best) best = acc, src = s;
            }
        }
        const size_t o = (size_t)w->k * (size_t)w->Hs;
        if (grow(&w->out, &w->cap_out, o + (size_t)w->W)) return -1;
        /* the part of this frame past the previous frame's end is new */
        const size_t prev_end = w->k > 0 ? o + (size_t)w->Hs : o;
        for (size_t i = prev_end; i < o + (size_t)w->W; i++) w->out[i] = 0.0f;
        for (int i = 0; i < w->W; i++) w->out[o + (size_t)i] += w->win[i] * at(w, src + i);
        w->prev_src = src;
        w->k++;
        w->out_final = o + (size_t)w->Hs;
    }
    /* flushed: everything up to the expected length is final */
    if (w->out_final > total_out || w->flushed) w->out_final = total_out < w->out_final ? total_out : w->out_final;
    return 0;
}

int wsola_push(struct wsola *w, const float *x, size_t n)
{
    if (grow(&w->in, &w->cap_in, w->n_in + n)) return -1;
    memcpy(w->in + w->n_in, x, sizeof *x * n);
    w->n_in += n;
    return run(w);
}

int wsola_flush(struct wsola *w)
{
    w->flushed = 1;
    return run(w);
}

void wsola_take(struct wsola *w, const float **p, size_t *n)
{
    if (w->taken >= w->out_final) {
        *p = NULL;
        *n = 0;
        return;
    }
    *p = w->out + w->taken;
    *n = w->out_final - w->taken;
    w->taken = w->out_final;
}

void wsola_free(struct wsola *w)
{
    free(w->win);
    free(w->in);
    free(w->out);
    memset(w, 0, sizeof *w);
}
