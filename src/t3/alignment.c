/* alignment.c - the alignment guard (AlignmentStreamAnalyzer of chatterbox
 * before commit 3f35dfc), rules in upstream order; spec/t3.md §10 and
 * alignment.h. A itself is not kept: every rule reads its last two rows
 * or a running reduction (max of the first 4 columns, the column sums and
 * row-maximum sum since completed_at), accumulated in float32 as torch's
 * reductions of a float32 tensor are. */
#include "alignment.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const int alignment_heads[ALIGNMENT_N_HEADS][2] = {{12, 15}, {13, 11}, {9, 2}};

/* (±2**15 is safe for all dtypes >= 16bit), as upstream */
#define BIG 32768.0f

cbx_status alignment_init(struct alignment *al, int text_start, int S, char *err)
{
    memset(al, 0, sizeof *al);
    if (text_start < 0 || S < 1)
        return err_setf(err, CBX_ERR_INVALID_ARG, "alignment guard: a text of %d tokens at position %d", S,
                        text_start);
    al->i = text_start;
    al->S = S;
    al->started_at = al->completed_at = -1;
    al->first_max = -INFINITY;
    al->last = malloc(sizeof(float) * 4 * (size_t)S);
    if (!al->last) return err_setf(err, CBX_ERR_NOMEM, "alignment guard: out of memory for %d text columns", S);
    al->chunk = al->last + 2 * S;
    return CBX_OK;
}

void alignment_free(struct alignment *al)
{
    if (!al) return;
    free(al->last);
    memset(al, 0, sizeof *al);
}

/* Row `row` appended to A: the running reductions, then the last rows. */
static void append_row(struct alignment *al, const float *row)
{
    const int S = al->S;
    for (int c = 0; c < S && c < 4; c++)
        if (row[c] > al->first_max) al->first_max = row[c];
    if (al->complete) { /* the row lies in A[completed_at:] */
        const int c0 = S > 3 ? S - 3 : 0;
        for (int c = c0; c < S; c++) al->tail[c - c0] += row[c];
        if (S > 5) {
            float mx = row[0];
            for (int c = 1; c < S - 5; c++)
                if (row[c] > mx) mx = row[c];
            al->rep += mx;
        }
    }
    if (al->n_last == 2) memcpy(al->last, al->last + S, sizeof(float) * (size_t)S);
    else al->n_last++;
    memcpy(al->last + (size_t)(al->n_last - 1) * S, row, sizeof(float) * (size_t)S);
    al->T++;
}

struct alignment_report alignment_step(struct alignment *al, const float *const heads[ALIGNMENT_N_HEADS],
                                       int n_rows, int64_t ld, int32_t last_token, float *l, int64_t V,
                                       int32_t eos)
{
    struct alignment_report r;
    memset(&r, 0, sizeof r);
    const int S = al->S;
    /* aligned_attn = mean of the three maps; the chunk is its new rows
     * over the text columns, A_chunk[:, curr_frame_pos + 1:] = 0 */
    for (int q = 0; q < n_rows; q++) {
        float *row = al->chunk + (size_t)q * S;
        for (int c = 0; c < S; c++) {
            const int64_t k = q * ld + al->i + c;
            float sum = heads[0][k];
            for (int h = 1; h < ALIGNMENT_N_HEADS; h++) sum += heads[h][k];
            row[c] = c >= al->frame + 1 ? 0.0f : sum / ALIGNMENT_N_HEADS;
        }
    }
    for (int q = 0; q < n_rows; q++) append_row(al, al->chunk + (size_t)q * S);
    /* cur_text_posn = A_chunk[-1].argmax() (the first of equal maxima) */
    const float *newest = al->chunk + (size_t)(n_rows - 1) * S;
    int cur = 0;
    for (int c = 1; c < S; c++)
        if (newest[c] > newest[cur]) cur = c;
    const int d = cur - al->text_position;
    r.discontinuity = !(-4 < d && d < 7);
    if (!r.discontinuity) al->text_position = cur;
    /* false_start = not started and (A[-2:, -2:].max() > 0.1 or A[:, :4].max() < 0.5) */
    float corner = -INFINITY;
    for (int q = 0; q < al->n_last; q++)
        for (int c = S > 2 ? S - 2 : 0; c < S; c++)
            if (al->last[(size_t)q * S + c] > corner) corner = al->last[(size_t)q * S + c];
    r.false_start = !al->started && (corner > 0.1f || al->first_max < 0.5f);
    al->started = !r.false_start;
    if (al->started && al->started_at < 0) al->started_at = al->T;
    al->complete = al->complete || al->text_position >= S - 3;
    if (al->complete && al->completed_at < 0) al->completed_at = al->T;
    /* sums over A[completed_at:] (empty on the step that completes: 0) */
    float tail_max = al->tail[0];
    for (int c = 1; c < 3; c++)
        if (al->tail[c] > tail_max) tail_max = al->tail[c];
    r.long_tail = al->complete && tail_max >= 5;
    r.alignment_repetition = al->complete && al->rep > 5;
    /* the last 8 ids of generated_ids */
    if (al->n_tokens == 8) {
        memmove(al->tokens, al->tokens + 1, sizeof al->tokens[0] * 7);
        al->n_tokens--;
    }
    al->tokens[al->n_tokens++] = last_token;
    const int n = al->n_tokens;
    /* three equal most-recent ids (upstream's code: two; alignment.h) */
    r.token_repetition = n >= 3 && al->tokens[n - 1] == al->tokens[n - 2] && al->tokens[n - 2] == al->tokens[n - 3];
    if (cur < S - 3 && S > 5 && eos >= 0 && eos < V) { /* suppress an early stop */
        l[eos] = -BIG;
        r.eos_suppressed = true;
        al->n_suppressed++;
    }
    if (r.long_tail || r.alignment_repetition || r.token_repetition) { /* force the stop */
        for (int64_t t = 0; t < V; t++) l[t] = -BIG;
        if (eos >= 0 && eos < V) l[eos] = BIG;
        r.eos_forced = true;
        al->n_forced++;
    }
    al->frame++;
    r.cur = cur;
    r.text_position = al->text_position;
    r.complete = al->complete;
    al->last_report = r;
    return r;
}
