/* test_alignment.c - the alignment guard's rules (t3/alignment.h, spec
 * t3.md §10) on constructed attention maps: each case feeds
 * alignment_step rows whose text-column peaks are chosen (values that
 * are multiples of 1/64, so the mean of three equal heads is exact) and
 * asserts the processed logits of every step, printing what the analyzer
 * reported:
 *  - early-stop suppression: the stop logit is -32768 while the newest
 *    row's argmax is before S - 3 (S > 5), untouched for S <= 5;
 *  - the monotonic mask (columns after the frame count are zeroed) and
 *    discontinuities (a jump outside -4 < d < 7 leaves the text position
 *    where it was);
 *  - false start: tracked only, the logits stay as they are;
 *  - long tail: >= 5 of attention on the last 3 columns after completion
 *    forces the stop (and not one step earlier);
 *  - alignment repetition: row maxima of the early columns summing to > 5
 *    after completion force the stop (and not at exactly 5);
 *  - token repetition: three equal most-recent ids force the stop, two do
 *    not (upstream's code stopped on two);
 *  - the three heads are averaged; the prefill's two rows, the newest
 *    decides. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "t3/alignment.h"
#include "testutil.h"

enum { V = 10, EOS = 7, I0 = 3, LD = 64 }; /* text columns start at key I0 */
static float l[V];

/* A fresh logit row: l[t] = t - 4.5 (all distinct, the stop token not the
 * largest). */
static void fresh(void)
{
    for (int t = 0; t < V; t++) l[t] = (float)t - 4.5f;
}

/* What the logits must be after a step: untouched, the stop token
 * suppressed, or the stop forced. */
enum want { KEEP, SUPPRESS, FORCE };
static bool logits_are(enum want w)
{
    for (int t = 0; t < V; t++) {
        float e = (float)t - 4.5f;
        if (w == FORCE) e = t == EOS ? 32768.0f : -32768.0f;
        else if (w == SUPPRESS && t == EOS) e = -32768.0f;
        if (memcmp(&l[t], &e, sizeof e)) return false;
    }
    return true;
}

static const char *want_name(enum want w) { return w == KEEP ? "kept" : w == SUPPRESS ? "stop suppressed" : "stop forced"; }

/* One step: rows[r] lists (text column, value) peaks, identical in the
 * three heads; checks the logits. */
struct peak { int col; float v; };
static struct alignment_report step(const char *what, struct alignment *al, int n_rows, const struct peak *pk,
                                    int n_pk, int32_t token, enum want w)
{
    static float map[2 * LD];
    memset(map, 0, sizeof map);
    for (int k = 0; k < n_pk; k++) map[(n_rows - 1) * LD + I0 + pk[k].col] = pk[k].v;
    const float *heads[ALIGNMENT_N_HEADS] = {map, map, map};
    fresh();
    const int frame = al->frame;
    struct alignment_report r = alignment_step(al, heads, n_rows, LD, token, l, V, EOS);
    const bool ok = logits_are(w);
    printf("%-34s frame %2d: cur %2d pos %2d%s%s%s%s%s%s -> logits %s (want %s) %s\n", what, frame, r.cur,
           r.text_position, r.discontinuity ? " discontinuity" : "", r.false_start ? " false_start" : "",
           r.complete ? " complete" : "", r.long_tail ? " long_tail" : "",
           r.alignment_repetition ? " alignment_repetition" : "", r.token_repetition ? " token_repetition" : "",
           r.eos_forced ? "forced" : r.eos_suppressed ? "suppressed" : "kept", want_name(w), ok ? "ok" : "FAIL");
    CHECK(ok, "%s frame %d: logits not %s", what, frame, want_name(w));
    return r;
}

static struct alignment make(int S)
{
    struct alignment al;
    char err[ERR_MAX];
    CHECK(alignment_init(&al, I0, S, err) == CBX_OK, "alignment_init S %d: %s", S, err);
    return al;
}

/* distinct tokens, so the token rule stays quiet */
static int32_t tok(int k) { return 100 + k; }

static void suppression(void)
{
    struct alignment al = make(10);
    const struct peak p0 = {0, 1.0f};
    step("suppress: S 10, prefill", &al, 2, &p0, 1, 6561, SUPPRESS);
    for (int f = 1; f <= 7; f++) { /* diagonal: cur = f; suppressed while cur < S - 3 = 7 */
        const struct peak p = {f, 1.0f};
        step("suppress: S 10, diagonal", &al, 1, &p, 1, tok(f), f < 7 ? SUPPRESS : KEEP);
    }
    alignment_free(&al);
    al = make(5); /* S <= 5: never suppressed */
    step("suppress: S 5, prefill", &al, 2, &p0, 1, 6561, KEEP);
    alignment_free(&al);
}

static void mask_and_discontinuity(void)
{
    struct alignment al = make(20);
    /* frame 0 sees column 0 alone: a peak at 5 is masked, argmax 0 */
    const struct peak far = {5, 1.0f};
    struct alignment_report r = step("mask: frame 0, peak at 5", &al, 2, &far, 1, 6561, SUPPRESS);
    CHECK(r.cur == 0, "mask: cur %d, want 0", r.cur);
    for (int f = 1; f <= 8; f++) {
        const struct peak p = {f, 0.5f};
        step("discontinuity: diagonal", &al, 1, &p, 1, tok(f), SUPPRESS);
    }
    /* position 8: back to 4 (d = -4) is a discontinuity, ignored */
    const struct peak back = {4, 0.5f};
    r = step("discontinuity: jump back 4", &al, 1, &back, 1, tok(20), SUPPRESS);
    CHECK(r.discontinuity && r.text_position == 8, "jump back 4: position %d, want 8 kept", r.text_position);
    /* back 3 (d = -3) is followed */
    const struct peak back3 = {5, 0.5f};
    r = step("discontinuity: back 3", &al, 1, &back3, 1, tok(21), SUPPRESS);
    CHECK(!r.discontinuity && r.text_position == 5, "back 3: position %d, want 5", r.text_position);
    /* (a step in place, so that frame 12 sees column 12) then forward 7
     * (d = 7) ignored, forward 6 followed */
    step("discontinuity: stay", &al, 1, &back3, 1, tok(24), SUPPRESS);
    const struct peak fw7 = {12, 0.5f}, fw6 = {11, 0.5f};
    r = step("discontinuity: forward 7", &al, 1, &fw7, 1, tok(22), SUPPRESS);
    CHECK(r.discontinuity && r.text_position == 5, "forward 7: position %d, want 5 kept", r.text_position);
    r = step("discontinuity: forward 6", &al, 1, &fw6, 1, tok(23), SUPPRESS);
    CHECK(!r.discontinuity && r.text_position == 11, "forward 6: position %d, want 11", r.text_position);
    alignment_free(&al);
}

static void false_start(void)
{
    struct alignment al = make(4); /* S <= 5: no suppression in the way */
    /* weak attention on the first columns: a false start, logits kept */
    const struct peak weak = {0, 0.25f};
    struct alignment_report r = step("false start: weak first columns", &al, 2, &weak, 1, 6561, KEEP);
    CHECK(r.false_start && !al.started, "weak start: false_start %d started %d", r.false_start, al.started);
    /* a strong first column, nothing at the end: started */
    const struct peak strong = {1, 0.75f};
    r = step("false start: strong column 1", &al, 1, &strong, 1, tok(1), KEEP);
    CHECK(!r.false_start && al.started && al.started_at == 3, "strong start: false_start %d started_at %d", r.false_start,
          al.started_at);
    alignment_free(&al);
    /* a strong first column but activation in the last 2 rows x 2 columns */
    al = make(4);
    step("false start: prefill", &al, 2, &weak, 1, 6561, KEEP);
    step("false start: frame 1", &al, 1, &weak, 1, tok(1), KEEP);
    const struct peak both[2] = {{0, 0.75f}, {2, 0.125f}};
    r = step("false start: corner activation", &al, 1, both, 2, tok(2), KEEP);
    CHECK(r.false_start, "corner 0.125 > 0.1: false_start %d", r.false_start);
    alignment_free(&al);
}

/* diagonal rows until the text position reaches S - 3 (complete) */
static void complete(struct alignment *al, const char *what, int S)
{
    const struct peak p0 = {0, 1.0f};
    step(what, al, 2, &p0, 1, 6561, SUPPRESS);
    for (int f = 1; f <= S - 3; f++) {
        const struct peak p = {f, 1.0f};
        step(what, al, 1, &p, 1, tok(f), f < S - 3 ? SUPPRESS : KEEP);
    }
    CHECK(al->complete && al->completed_at == S - 1, "%s: complete %d at row %d, want row %d", what, al->complete,
          al->completed_at, S - 1);
}

static void long_tail(void)
{
    const int S = 8;
    struct alignment al = make(S);
    complete(&al, "long tail: to completion", S);
    /* then 1.0 per step on column S - 2: the column sum reaches 5 at the
     * fifth row after completion */
    const struct peak tail = {S - 2, 1.0f};
    for (int k = 1; k <= 5; k++) step("long tail: last columns", &al, 1, &tail, 1, tok(10 + k), k < 5 ? KEEP : FORCE);
    alignment_free(&al);
}

static void alignment_repetition(void)
{
    const int S = 10;
    struct alignment al = make(S);
    complete(&al, "repetition: to completion", S);
    /* attention back on column 2 (a discontinuity: the position stays);
     * the row maxima over columns [0, S - 5) sum to k: > 5 at k = 6. The
     * newest argmax, 2, is before S - 3: the stop is also suppressed
     * until forced */
    const struct peak back = {2, 1.0f};
    for (int k = 1; k <= 6; k++) step("repetition: early column", &al, 1, &back, 1, tok(10 + k), k < 6 ? SUPPRESS : FORCE);
    alignment_free(&al);
}

static void token_repetition(void)
{
    struct alignment al = make(4);
    const struct peak p0 = {0, 1.0f};
    /* generated_ids: 6561, 5, 9, 9 -> two equal: nothing */
    step("tokens: 6561", &al, 2, &p0, 1, 6561, KEEP);
    step("tokens: 6561 5", &al, 1, &p0, 1, 5, KEEP);
    step("tokens: 6561 5 9", &al, 1, &p0, 1, 9, KEEP);
    struct alignment_report r = step("tokens: 6561 5 9 9 (two equal)", &al, 1, &p0, 1, 9, KEEP);
    CHECK(!r.token_repetition, "two equal ids: token_repetition %d", r.token_repetition);
    r = step("tokens: 6561 5 9 9 9 (three equal)", &al, 1, &p0, 1, 9, FORCE);
    CHECK(r.token_repetition, "three equal ids: token_repetition %d", r.token_repetition);
    alignment_free(&al);
    /* three equal only counts once three ids are stored: 6561 6561 is two */
    al = make(4);
    step("tokens: 6561", &al, 2, &p0, 1, 6561, KEEP);
    step("tokens: 6561 6561", &al, 1, &p0, 1, 6561, KEEP);
    alignment_free(&al);
}

static void heads_and_rows(void)
{
    struct alignment al = make(20);
    static float h[3][2 * LD];
    memset(h, 0, sizeof h);
    /* prefill, two rows: the first row peaks at column 0, the newest at
     * nothing visible but column 0 (frame 0): cur 0 either way */
    for (int e = 0; e < 3; e++) h[e][I0] = h[e][LD + I0] = 0.5f;
    const float *heads[3] = {h[0], h[1], h[2]};
    fresh();
    struct alignment_report r = alignment_step(&al, heads, 2, LD, 6561, l, V, EOS);
    CHECK(r.cur == 0 && al.T == 2 && logits_are(SUPPRESS), "prefill: cur %d, %d rows", r.cur, al.T);
    /* frame 1: head 0 puts 0.75 on column 0, heads 1 and 2 put 0.5 on
     * column 1: the mean is 0.25 vs 0.333, so column 1 wins although head
     * 0's peak is the largest single value */
    memset(h, 0, sizeof h);
    h[0][I0] = 0.75f;
    h[1][I0 + 1] = h[2][I0 + 1] = 0.5f;
    fresh();
    r = alignment_step(&al, heads, 1, LD, 100, l, V, EOS);
    printf("%-34s frame  1: cur %2d (want 1, the mean's argmax) %s\n", "heads: mean of three", r.cur, r.cur == 1 ? "ok" : "FAIL");
    CHECK(r.cur == 1 && logits_are(SUPPRESS), "mean of heads: cur %d, want 1", r.cur);
    alignment_free(&al);
}

int main(void)
{
    suppression();
    mask_and_discontinuity();
    false_start();
    long_tail();
    alignment_repetition();
    token_repetition();
    heads_and_rows();
    char err[ERR_MAX];
    struct alignment al;
    CHECK(alignment_init(&al, I0, 0, err) == CBX_ERR_INVALID_ARG, "no text refused: %s", err);
    printf("no text: %s\n", err);
    return test_summary();
}
