/* bench_mtl_text.c - cost of the multilingual text front end
 * (text_tokenizer_encode_lang: punc_norm, lower-case, NFKD, the language
 * step, [SPACE], grapheme BPE) per 1,000 characters for Japanese (kakasi)
 * and Chinese (Cangjie), against the same front end on the same text with
 * no language (no language step; the baseline of the same run). The text
 * is a few thousand characters of ordinary sentences, encoded one sentence
 * at a time as the engine does after splitting. Target: <= 5 ms per 1,000
 * characters.
 * Tokenizer: --model DIR (a multilingual snapshot: its grapheme JSON and
 * Cangjie5_TC.json), else the synthetic one of tests/data/mtl-v2/tokenizer.
 * Usage: bench_mtl_text [--model DIR] [--reps N] [--filter ja|zh]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "common.h"
#include "text/tokenizer.h"

static const char *const ja[] = {
    "今日はいい天気ですね。", "私の名前は田中です。東京に住んでいます。",
    "昨日、友達と一緒に映画を見に行きました。", "このコンピューターは２０２４年に買いました！",
    "日本語の文章を読むのは楽しいです。", "駅の近くに新しいレストランができました。",
    "彼女は毎朝六時に起きて、公園を走ります。", "明日の会議は午後三時からです。",
    "子供たちは学校で英語を勉強しています。", "電車が遅れたので、会社に遅刻しました。",
    "富士山は日本で一番高い山です。", "夏休みに家族と海へ行く予定です。",
    "雨が降っているので、傘を持って行きましょう。", "新幹線で大阪まで二時間半かかります。", NULL};
static const char *const zh[] = {
    "你好，世界！今天天气很好。", "我們明天早上八點在學校門口見面，好嗎？",
    "这本书一共有300页，我已经读了一半。", "北京、上海、廣州和深圳都是大城市；人口超過一千萬。",
    "電腦、手機與網路改變了我們的生活方式。", "中文和English混在一起，还有数字2024。", NULL};

static int64_t n_chars(const char *s)
{
    int64_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* Seconds to encode every sentence of set (repeated to >= min_chars);
 * -1 after a message on stderr. */
static double run(const struct text_tokenizer *t, const char *const *set, const char *lang, int64_t min_chars,
                  int64_t *chars)
{
    char err[ERR_MAX];
    double t0 = bench_now();
    *chars = 0;
    while (*chars < min_chars) {
        for (int i = 0; set[i]; i++) {
            int32_t *ids = NULL;
            int64_t n = 0;
            if (text_tokenizer_encode_lang(t, set[i], lang, &ids, &n, err) != CBX_OK) {
                fprintf(stderr, "bench_mtl_text: %s\n", err);
                return -1;
            }
            free(ids);
            *chars += n_chars(set[i]);
        }
    }
    return bench_now() - t0;
}

int main(int argc, char **argv)
{
    const char *dir = bench_take_model(&argc, argv);
    struct bench_opts opt;
    if (!bench_parse(argc, argv, &opt, 10)) return 2;
    if (!dir) dir = CBX_BENCH_MTL_TOKENIZER;
    char err[ERR_MAX];
    struct text_tokenizer *t = NULL;
    if (text_tokenizer_load_dir(TEXT_TOK_GRAPHEME_MTL, dir, &t, err) != CBX_OK) {
        fprintf(stderr, "bench_mtl_text: %s\n", err);
        return 1;
    }
    static const struct { const char *lang; const char *const *set; } cases[] = {{"ja", ja}, {"zh", zh}};
    int status = 0;
    for (size_t c = 0; c < 2 && !status; c++) {
        if (!bench_selected(&opt, cases[c].lang)) continue;
        double *v = calloc((size_t)opt.reps, sizeof *v), *b = calloc((size_t)opt.reps, sizeof *b);
        int64_t chars = 0, chars_b = 0;
        if (!v || !b) { fprintf(stderr, "bench_mtl_text: out of memory\n"); status = 1; }
        for (int r = -1; r < opt.reps && !status; r++) { /* r = -1: warm-up (kakasi's dictionary) */
            double s = run(t, cases[c].set, cases[c].lang, 5000, &chars);
            double s0 = run(t, cases[c].set, NULL, 5000, &chars_b);
            if (s < 0 || s0 < 0) { status = 1; break; }
            if (r >= 0) {
                v[r] = 1e3 * s / ((double)chars / 1000);
                b[r] = 1e3 * s0 / ((double)chars_b / 1000);
            }
        }
        if (!status) {
            struct bench_stats sv = bench_stats(v, opt.reps), sb = bench_stats(b, opt.reps);
            const int64_t shape[1] = {chars};
            bench_emit("mtl_text", cases[c].lang, shape, 1, 1, opt.reps, "ms/1000 chars", sv, "no language step",
                       sb.median);
            fprintf(stderr, "mtl_text %s: %.3f ms per 1,000 characters (p10 %.3f, p90 %.3f; %lld characters), "
                    "%.3f without the language step (x%.1f); target <= 5 ms: %s\n",
                    cases[c].lang, sv.median, sv.p10, sv.p90, (long long)chars, sb.median,
                    sb.median > 0 ? sv.median / sb.median : 0.0, sv.median <= 5 ? "met" : "missed");
        }
        free(v);
        free(b);
    }
    text_tokenizer_free(t);
    return status;
}
