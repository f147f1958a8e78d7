/* alignment.h - the alignment guard of the Llama T3 (English,
 * multilingual): upstream's AlignmentStreamAnalyzer (chatterbox
 * models/t3/inference/alignment_stream_analyzer.py, removed in commit
 * 3f35dfc), as spec/t3.md §10 describes it. Off by default; asked for with
 * t3_gen_params.alignment_guard (say/tokens --alignment-guard, the C API's
 * cbx_synth_params.alignment_guard).
 *
 * Per decode step, on the CFG-combined logits before the repetition
 * penalty, it reads the attention probabilities of three (layer, head)
 * pairs of the conditional row, (12, 15), (13, 11) and (9, 2), averages
 * them, and keeps an alignment matrix A (speech rows x S text columns,
 * S = text tokens with start/stop): the forward's new query rows (the two
 * start-of-speech rows after the prefill, one row per step after that)
 * over the text key columns [i, i + S), i = the conditioning length,
 * with columns >= frame + 1 zeroed (upstream's crude monotonic mask; frame
 * counts steps from 0). Then, with cur the argmax of the newest row:
 *   - text position: cur when -4 < cur - position < 7 (otherwise a
 *     "discontinuity", ignored);
 *   - false_start = not started and (max of A's last 2 rows x last 2
 *     columns > 0.1 or max of A's first 4 columns < 0.5); started = not
 *     false_start. It only tracks state: upstream reads neither flag
 *     afterwards, and neither does this port;
 *   - complete once position >= S - 3 (completed_at: A's row count then);
 *   - long_tail = complete and some of the last 3 columns sums to >= 5
 *     over the rows after completed_at;
 *   - alignment_repetition = complete and the row maxima of columns
 *     [0, S - 5) sum to > 5 over the rows after completed_at (0 when
 *     S <= 5, where upstream's empty slice would raise);
 *   - token_repetition: the last 8 ids of generated_ids are kept (the
 *     most recent one is passed each step: 6561 at the first); true when
 *     at least 3 are stored and the THREE most recent are equal;
 *   - cur < S - 3 and S > 5: the stop-token logit becomes -32768 (no
 *     early stop);
 *   - long_tail, alignment_repetition or token_repetition: every logit
 *     becomes -32768 and the stop token's +32768 (forced stop).
 * One deliberate difference from upstream: its code fired the token rule
 * on TWO equal most-recent tokens although its own comment says three
 * ("3x same token in a row"); two equal speech tokens are ordinary speech
 * (a held phoneme), and the two-token rule is a likely cause of reported
 * mid-sentence cut-offs. This port fires on three.
 * Thread safety: an analyzer belongs to one sequence. */
#ifndef CBX_T3_ALIGNMENT_H
#define CBX_T3_ALIGNMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"

#define ALIGNMENT_N_HEADS 3
/* The (layer, head) pairs read, upstream's LLAMA_ALIGNED_HEADS. */
extern const int alignment_heads[ALIGNMENT_N_HEADS][2];

/* What one step saw and did. */
struct alignment_report {
    int cur;                    /* argmax of the newest row (text column) */
    int text_position;
    bool discontinuity, false_start, complete;
    bool long_tail, alignment_repetition, token_repetition;
    bool eos_suppressed, eos_forced;
};

struct alignment {
    int i, S;              /* text key columns [i, i + S) */
    int frame;             /* curr_frame_pos: steps so far */
    int T;                 /* rows of A so far */
    int text_position;
    bool started, complete;
    int started_at, completed_at; /* A's row count when set; -1: not yet */
    float *last;           /* A's last two rows [2][S], last + S the newest */
    int n_last;            /* rows of A kept there (0..2) */
    float *chunk;          /* the step's rows [2][S] */
    float first_max;       /* max of A[:, :4] */
    float tail[3];         /* column sums of A[completed_at:, S-3:] */
    float rep;             /* sum of the row maxima of A[completed_at:, :S-5] */
    int32_t tokens[8];     /* the most recent ids, oldest first */
    int n_tokens;
    struct alignment_report last_report;
    int n_suppressed, n_forced; /* steps that suppressed / forced the stop */
};

/* An analyzer for a text of S tokens (start/stop included) whose first
 * token sits at key position text_start. On failure al is zeroed. */
cbx_status alignment_init(struct alignment *al, int text_start, int S, char *err);
void alignment_free(struct alignment *al); /* no-op on a zeroed one */

/* AlignmentStreamAnalyzer.step: heads[h] holds pair h's probabilities for
 * the n_rows (1 or 2) new query rows of the forward the logits came from,
 * row r at heads[h] + r * ld, indexed by key position (at least i + S
 * keys). last_token: the most recent id of generated_ids. l: the V
 * CFG-combined logits, changed in place; eos: the stop token. */
struct alignment_report alignment_step(struct alignment *al, const float *const heads[ALIGNMENT_N_HEADS],
                                       int n_rows, int64_t ld, int32_t last_token, float *l, int64_t V,
                                       int32_t eos);

#endif
