/* stream.h - chunked S3Gen: speech tokens in as T3 samples them, 24 kHz
 * audio out in chunks as soon as each exists. Upstream has no streaming
 * API (spec/streaming.md §1); this follows the design of CosyVoice 2's
 * streaming token2wav (flow over all tokens so far with finalize=False,
 * HiFT with a cached source, overlapping chunks cross-faded) on top of
 * chatterbox's own building blocks (flow.py finalize flag, HiFT
 * cache_source, hift.md §10).
 *
 * Per chunk k (tokens t[0..n_k)):
 *   1. flow: encoder over prompt + t[0..n_k) (from t[s] on with a bounded
 *      left context, invariant 8) (+ the caller's tail tokens,
 *      Turbo's 3 x S3GEN_SIL, on the final chunk only); except on the final
 *      chunk the last pre_lookahead_len * token_mel_ratio = 6 frames of mu
 *      are dropped (finalize=False: they depend on tokens not seen yet);
 *      the CFM runs over the whole (prompt + generated) length, and only
 *      the frames after the previous chunk's are kept: a mel frame, once
 *      made, is never revised.
 *   2. HiFT over a window of mel frames [E - C, M): C = STREAM_HIFT_CONTEXT
 *      frames already spoken as left context, M the mel frames so far,
 *      E the frames whose audio has been emitted. Audio for [E, M - H) is
 *      emitted (all of [E, M) on the final chunk); the last H =
 *      STREAM_HIFT_HOLD frames are held back and cross-faded with the next
 *      window's rendering of the same frames.
 *   3. trim_fade (960 samples) on the first samples of the stream only.
 *
 * Invariants (asserted or checked):
 *   1. Audio samples are emitted once, in order; concatenating every chunk
 *      gives the whole utterance, 480 samples per generated mel frame.
 *   2. Committed state never changes: mel frames [0, M), f0 and the sine
 *      phase of frames [0, E). A later window uses them as they are.
 *   3. The NSF sine source is phase-continuous across chunks: a window
 *      that starts at frame W0 > 0 gets one extra frame in front whose f0
 *      v = 50 * frac(P(W0)) Hz advances the cumulative phase of the
 *      fundamental (480 v / 24000 = v / 50 cycles) to the committed phase
 *      P(W0) of frame W0, and harmonic h to (h + 1) P(W0); that frame's
 *      samples are dropped. The harmonics' random initial phases come from
 *      the same seed in every window, so they agree too. (This is
 *      upstream's cache_source idea with the phase carried instead of the
 *      samples: the source of the overlap is then the same signal in both
 *      windows, not a splice.) The additive source noise is drawn per
 *      window from counter 0 (as hift_source does), so it is a different
 *      realisation of the same white noise in overlapping regions.
 *   4. Cross-fade: over the H = 5 held frames (2400 samples, 100 ms) the
 *      old rendering fades out with w = (1 + cos(pi (i + 0.5) / 2400)) / 2
 *      and the new one in with 1 - w: gains sum to 1 because both are
 *      renderings of the same mel with the same source phase (coherent, so
 *      no power dip), and the fade starts where the old rendering is the
 *      one already heard, so the seam has no step. Why 5 frames: the f0
 *      predictor sees +-5 frames (five convolutions of kernel 3), so with
 *      5 frames of right context (and C = 8 >= 5 of left context) every
 *      committed f0 is the one the whole utterance would have for the same
 *      mel, and so is the carried phase: f0 errors do not stay local, they
 *      integrate into a phase drift for the rest of the utterance. The
 *      decoder's receptive field is wider (~13 frames), but the fade only
 *      has to cover the difference between two close renderings; a longer
 *      hold adds latency one for one.
 *   5. Noise for the CFM: one persistent layout, not a per-chunk draw.
 *      The initial noise of frame t, channel c is value c * R + t of its
 *      stream ("s3gen.cfm.z" with R = Tp + noise_frames over prompt and
 *      generated frames; meanflow: "s3gen.flow.noised_mels" with
 *      R = noise_frames for the generated frames), read by seeking the
 *      counter, so a frame re-synthesised by a later chunk starts from the
 *      same noise. With noise_frames = 2 n (n tokens incl. the tail) this
 *      is exactly upstream's randn(1, 80, T) layout, so a one-chunk stream
 *      equals S3Gen.inference bit for bit; the engine uses
 *      2 * (max_tokens + tail), a bound it knows before T3 starts.
 *   6. Deterministic: the same tokens, seed and parameters give the same
 *      chunks (same sizes and samples).
 *   7. First-chunk prompt (stream_params.first_prompt_tokens = K > 0): the
 *      first chunk alone is conditioned on the last K prompt tokens (2K
 *      prompt frames) instead of the whole prompt; its noise is the tail
 *      of the same layout (invariant 5), so every generated frame starts
 *      from the noise it would have with the whole prompt. Only the first
 *      chunk's frames (2 first_tokens - 6, 180 ms by default) are made
 *      with less reference; every later chunk sees the whole prompt. The
 *      first chunk then costs what a K-token prompt costs, which bounds
 *      first-audio latency however long the reference is.
 *
 *   8. Bounded left context (stream_params.context_tokens = L > 0): a
 *      chunk's flow runs over prompt + t[s, n_k) with s = max(0, M/2 - L),
 *      M the mel frames made so far (always even), i.e. L tokens before
 *      the first frame it adds; frames [2s, M) are made again and dropped.
 *      The window is shift-invariant (relative positions in the encoder,
 *      none in the CFM) and its noise is the persistent layout's at the
 *      window's absolute frames (invariant 5), so a frame's inputs differ
 *      from the unbounded stream's only by the tokens left out. The left
 *      context's conditioning stays zero as in the whole utterance
 *      (conditioning the CFM on the committed mel there was tried: 0.120
 *      and 0.225 rms(diff)/rms against the whole utterance's mel, vs 0.117
 *      and 0.216 with zeros, parity_turbo_stream at L = 8).
 *
 * Cost: a chunk runs the encoder and CFM over the prompt and its tokens
 * (attention is bidirectional, so nothing of an earlier run can be
 * reused). With L = 0 that is every token so far, so chunks grow
 * (first_tokens, then chunk_tokens doubling up to max_chunk_tokens) to
 * keep the number of chunks logarithmic in short utterances and the
 * re-computation bounded in long ones; with L > 0 a chunk costs at most
 * prompt + L + max_chunk_tokens + 3 tokens however long the utterance is
 * (stream_stats.flow_tokens counts the work). The engine also cuts the
 * prompt (engine_params.stream_prompt_tokens).
 *
 * Thread safety: a stream is used by one thread at a time; any number of
 * streams may share one loaded s3gen. */
#ifndef CBX_PIPELINE_STREAM_H
#define CBX_PIPELINE_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "s3gen/s3gen.h"

struct arena;
struct backend;

#define STREAM_LOOKAHEAD_FRAMES 6 /* pre_lookahead_len 3 * token_mel_ratio 2 */
#define STREAM_HIFT_CONTEXT 8     /* left context frames of a HiFT window */
#define STREAM_HIFT_HOLD 5        /* frames held back and cross-faded */

struct stream_params {
    int first_tokens;      /* tokens before the first chunk: 10 (first audio
                            * 2 * 10 - 6 - 5 = 9 frames, 180 ms) */
    int chunk_tokens;      /* tokens of the second chunk: 20 */
    int max_chunk_tokens;  /* later chunks double up to this: 80 */
    int noise_frames;      /* generated mel frames the noise layout spans
                            * (invariant 5); must cover 2 * (tokens + tail) */
    int n_cfm_steps;       /* <= 0: the model's */
    uint64_t seed;         /* every run-time stream, as s3gen_params.seed */
    bool bf16;             /* as s3gen_params.bf16 */
    int first_prompt_tokens; /* invariant 7; 0: the whole prompt */
    int context_tokens;    /* invariant 8; 0: every token so far */
    struct arena *ws;      /* working memory (an arena of the stream's
                            * backend, used by no one else until
                            * stream_free, which releases it to its pool
                            * (arena_release)); NULL: the stream's own */
};
struct stream_params stream_default_params(void);

/* Receives n samples (borrowed for the call); nonzero return cancels. */
typedef int (*stream_emit_fn)(void *user, const float *pcm, int64_t n);

struct stream_stats {
    int n_chunks;          /* chunks that emitted audio */
    int64_t n_samples;     /* samples emitted */
    double t_flow, t_hift; /* seconds in the flow and in HiFT */
    double t_first;        /* seconds from stream_create to the first emit */
    int64_t flow_tokens;   /* tokens (prompt + generated) of every flow run */
    int64_t flow_tokens_max; /* of the largest flow run */
};

struct stream; /* opaque */

/* A stream for one utterance with reference ref (host memory borrowed
 * until stream_free) on s3gen s, run on be. *out owned by the caller,
 * stream_free(). */
cbx_status stream_create(const struct s3gen *s, const struct backend *be,
                         const struct s3gen_ref *ref, const struct stream_params *p,
                         stream_emit_fn emit, void *user, struct stream **out, char *err);
void stream_free(struct stream *st); /* no-op on NULL */

/* Append n speech tokens (ids in [0, 6561)); runs every chunk that is due,
 * each calling emit. After an error the stream refuses further calls. */
cbx_status stream_push(struct stream *st, const int32_t *tokens, int64_t n, char *err);

/* The final chunk: all tokens plus tail[n_tail] (not pushed: they only
 * ever appear at the true end), finalize=True, every remaining frame
 * emitted. n_tail may be 0. Fails if no token was given at all. */
cbx_status stream_finish(struct stream *st, const int32_t *tail, int64_t n_tail, char *err);

/* The HiFT half alone (chunked vocoding of a mel stream, e.g. from
 * another flow run): append mel[n][80] (frame-major log-mel frames) to the
 * committed frames and vocode what is due, as step 2 above; final: every
 * frame. Not to be mixed with stream_push on one stream. */
cbx_status stream_push_mel(struct stream *st, const float *mel, int64_t n, bool final, char *err);

/* The committed mel frames so far, [*n_frames][80] frame-major; borrowed
 * from st, valid until its next call. */
const float *stream_mel(const struct stream *st, int64_t *n_frames);

/* Figures so far; borrowed from st. */
const struct stream_stats *stream_get_stats(const struct stream *st);

#endif
