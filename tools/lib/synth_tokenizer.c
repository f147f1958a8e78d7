/* synth_tokenizer.c - the synthetic English tokenizer.json (see
 * synth_tokenizer.h). The merges come from a tiny BPE trainer run over
 * CORPUS below: words are the runs of ASCII letters and digits, weighted by
 * their count; each step merges the most frequent adjacent pair (ties:
 * smaller left string, then smaller right string, by strcmp) in every
 * word, left to right. A pair whose concatenation is already a token is
 * still a merge rule but takes no new id. */
#include "synth_tokenizer.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/atomic_file.h"

#define N_IDS SYNTH_ENGLISH_TEXT_VOCAB
#define MAX_TOKEN 64

static const char CORPUS[] =
    "The quick brown fox jumps over the lazy dog. She sells sea shells by the sea shore, "
    "and the shells she sells are surely sea shells. Peter Piper picked a peck of pickled "
    "peppers. How much wood would a woodchuck chuck if a woodchuck could chuck wood? "
    "In the beginning there was nothing but the sound of the ocean and the wind in the trees. "
    "Please remember to call me tomorrow morning at 9 or 10, before the meeting starts. "
    "We are going to the station, then to the market, and finally back home for dinner. "
    "This is a test of the text to speech system; it should speak clearly and naturally. "
    "Thank you for listening, and have a wonderful day with your family and friends. "
    "Interesting things happen when nobody is watching, especially in the evening. "
    "Reading, writing and thinking are the foundations of every good education. "
    "They were walking together along the river when it started raining heavily. "
    "Information, communication and transportation changed the world in 1990 and 2024. "
    "I think that we should probably leave now, otherwise we will be late again. "
    "What time is it? It is almost three o'clock, and the train leaves at four. "
    "Hello there! Welcome to our little show about voices, sounds and stories. "
    "Everything that can be measured should be measured carefully and honestly. "
    "My grandmother used to tell wonderful stories about her childhood in the country. "
    "The children played outside until the sun went down behind the mountains. "
    "Would you like some coffee or tea with your breakfast this morning? "
    "Scientists believe that the universe is expanding faster than ever before. "
    "Their neighbours were extremely friendly, helpful and generous people. "
    "Running, swimming and cycling are the three parts of a triathlon competition. "
    "Questions and answers: there are 100 questions, 365 days, 24 hours and 60 minutes. "
    "Notwithstanding the weather, the performance continued without interruption.";

struct vocab {
    char tok[N_IDS][MAX_TOKEN];
    int n;                 /* ids in use: 0 .. n-1, with holes at reserved ids */
    bool used[N_IDS];
};

static int find(const struct vocab *v, const char *s)
{
    for (int i = 0; i < N_IDS; i++)
        if (v->used[i] && !strcmp(v->tok[i], s)) return i;
    return -1;
}

/* Next free id; -1 when the table is full. */
static int add(struct vocab *v, const char *s)
{
    for (int i = 0; i < N_IDS; i++)
        if (!v->used[i]) {
            v->used[i] = true;
            snprintf(v->tok[i], MAX_TOKEN, "%s", s);
            v->n++;
            return i;
        }
    return -1;
}

static void add_cp(struct vocab *v, uint32_t c)
{
    char u[5] = {0};
    if (c < 0x80) u[0] = (char)c;
    else if (c < 0x800) { u[0] = (char)(0xc0 | c >> 6); u[1] = (char)(0x80 | (c & 63)); }
    else { u[0] = (char)(0xe0 | c >> 12); u[1] = (char)(0x80 | (c >> 6 & 63)); u[2] = (char)(0x80 | (c & 63)); }
    add(v, u);
}

struct word { int sym[MAX_TOKEN]; int n, count; };

struct merges { char (*pair)[2 * MAX_TOKEN + 2]; int n; };

/* Train merges on CORPUS until every id is used or no pair is left. */
static bool train(struct vocab *v, struct merges *mg)
{
    struct word *w = calloc(sizeof CORPUS, sizeof *w);
    int nw = 0;
    bool ok = w != NULL;
    for (const char *p = CORPUS; ok && *p;) {
        const char *b = p;
        while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')) p++;
        if (p == b) { p++; continue; }
        int len = (int)(p - b) < MAX_TOKEN ? (int)(p - b) : MAX_TOKEN - 1;
        int k = 0;
        for (; k < nw; k++)
            if (w[k].n == len) {
                int j = 0;
                while (j < len && !strcmp(v->tok[w[k].sym[j]], (char[2]){b[j], 0})) j++;
                if (j == len) break;
            }
        if (k == nw) {
            for (int j = 0; j < len; j++) w[nw].sym[j] = find(v, (char[2]){b[j], 0});
            w[nw++].n = len;
        }
        w[k].count++;
    }
    /* cnt[a * N_IDS + b]: weighted count of pair (a, b); only the entries
     * of pairs present are touched, and cleared again after each step */
    int *cnt = ok ? calloc((size_t)N_IDS * N_IDS, sizeof *cnt) : NULL;
    ok = ok && cnt;
    while (ok && v->n < N_IDS) {
        for (int k = 0; k < nw; k++)
            for (int j = 0; j + 1 < w[k].n; j++) cnt[w[k].sym[j] * N_IDS + w[k].sym[j + 1]] += w[k].count;
        int best = -1;
        for (int k = 0; k < nw; k++)
            for (int j = 0; j + 1 < w[k].n; j++) {
                int i = w[k].sym[j] * N_IDS + w[k].sym[j + 1];
                if (best < 0 || cnt[i] > cnt[best]) { best = i; continue; }
                if (cnt[i] < cnt[best] || i == best) continue;
                int c = strcmp(v->tok[i / N_IDS], v->tok[best / N_IDS]);
                if (c < 0 || (c == 0 && strcmp(v->tok[i % N_IDS], v->tok[best % N_IDS]) < 0)) best = i;
            }
        for (int k = 0; k < nw; k++)
            for (int j = 0; j + 1 < w[k].n; j++) cnt[w[k].sym[j] * N_IDS + w[k].sym[j + 1]] = 0;
        if (best < 0) break;
        int a = best / N_IDS, b = best % N_IDS;
        char cat[2 * MAX_TOKEN];
        snprintf(cat, sizeof cat, "%s%s", v->tok[a], v->tok[b]);
        if (strlen(cat) >= MAX_TOKEN) break;
        int id = find(v, cat);
        if (id < 0) id = add(v, cat);
        snprintf(mg->pair[mg->n++], sizeof mg->pair[0], "%s %s", v->tok[a], v->tok[b]);
        for (int k = 0; k < nw; k++) {
            int o = 0;
            for (int j = 0; j < w[k].n; j++) {
                if (j + 1 < w[k].n && w[k].sym[j] == a && w[k].sym[j + 1] == b) { w[k].sym[o++] = id; j++; }
                else w[k].sym[o++] = w[k].sym[j];
            }
            w[k].n = o;
        }
    }
    free(cnt);
    free(w);
    return ok;
}

static cJSON *added_token(int id, const char *content)
{
    cJSON *a = cJSON_CreateObject();
    if (!a) return NULL;
    bool ok = cJSON_AddNumberToObject(a, "id", id) && cJSON_AddStringToObject(a, "content", content) &&
              cJSON_AddFalseToObject(a, "single_word") && cJSON_AddFalseToObject(a, "lstrip") &&
              cJSON_AddFalseToObject(a, "rstrip") && cJSON_AddFalseToObject(a, "normalized") &&
              cJSON_AddTrueToObject(a, "special");
    if (!ok) { cJSON_Delete(a); return NULL; }
    return a;
}

cbx_status synth_english_tokenizer_json(char **out, size_t *n, char *err)
{
    *out = NULL;
    if (n) *n = 0;
    struct vocab *v = calloc(1, sizeof *v);
    struct merges mg = {calloc(N_IDS, sizeof *mg.pair), 0};
    cJSON *root = NULL;
    cbx_status rc = CBX_OK;
    if (!v || !mg.pair) { rc = err_setf(err, CBX_ERR_NOMEM, "synthetic tokenizer: out of memory"); goto cleanup; }

    /* special ids first (T3Config's start 255 and stop 0), then characters */
    static const struct { int id; const char *s; } special[] = {
        {0, "[STOP]"}, {1, "[UNK]"}, {2, "[SPACE]"}, {255, "[START]"}, {256, "[laughter]"}, {257, "[sigh]"}};
    const int n_special = (int)(sizeof special / sizeof special[0]);
    for (int i = 0; i < n_special; i++) {
        v->used[special[i].id] = true;
        snprintf(v->tok[special[i].id], MAX_TOKEN, "%s", special[i].s);
        v->n++;
    }
    for (uint32_t c = 0x21; c <= 0x7e; c++) add_cp(v, c);
    for (uint32_t c = 0xc0; c <= 0xff; c++)
        if (c != 0xd7 && c != 0xf7) add_cp(v, c);
    static const uint32_t signs[] = {0xa1, 0xbf, 0xab, 0xbb, 0x20ac, 0xa3, 0xb0};
    for (size_t i = 0; i < sizeof signs / sizeof signs[0]; i++) add_cp(v, signs[i]);
    for (uint32_t c = 0x3b1; c <= 0x3c9; c++) add_cp(v, c);
    if (!train(v, &mg)) { rc = err_setf(err, CBX_ERR_NOMEM, "synthetic tokenizer: out of memory"); goto cleanup; }
    for (uint32_t c = 0x100; v->n < N_IDS; c++) add_cp(v, c); /* only if the corpus ran out of pairs */

    /* key order as the tokenizers library writes the file */
    root = cJSON_CreateObject();
    bool ok = root && cJSON_AddStringToObject(root, "version", "1.0") && cJSON_AddNullToObject(root, "truncation") &&
              cJSON_AddNullToObject(root, "padding");
    cJSON *a = ok ? cJSON_AddArrayToObject(root, "added_tokens") : NULL;
    ok = a && cJSON_AddNullToObject(root, "normalizer");
    cJSON *pre = ok ? cJSON_AddObjectToObject(root, "pre_tokenizer") : NULL;
    ok = pre && cJSON_AddStringToObject(pre, "type", "Whitespace") && cJSON_AddNullToObject(root, "post_processor") &&
         cJSON_AddNullToObject(root, "decoder");
    cJSON *m = ok ? cJSON_AddObjectToObject(root, "model") : NULL;
    ok = m && cJSON_AddStringToObject(m, "type", "BPE") && cJSON_AddNullToObject(m, "dropout") &&
         cJSON_AddStringToObject(m, "unk_token", "[UNK]") && cJSON_AddNullToObject(m, "continuing_subword_prefix") &&
         cJSON_AddNullToObject(m, "end_of_word_suffix") && cJSON_AddFalseToObject(m, "fuse_unk") &&
         cJSON_AddFalseToObject(m, "byte_fallback") && cJSON_AddFalseToObject(m, "ignore_merges");
    for (int i = 0; ok && i < n_special; i++) {
        cJSON *t = added_token(special[i].id, special[i].s);
        ok = t && cJSON_AddItemToArray(a, t);
        if (!ok) cJSON_Delete(t);
    }
    cJSON *vocab = ok ? cJSON_AddObjectToObject(m, "vocab") : NULL;
    ok = vocab != NULL;
    for (int i = 0; ok && i < N_IDS; i++) ok = cJSON_AddNumberToObject(vocab, v->tok[i], i) != NULL;
    cJSON *merges = ok ? cJSON_AddArrayToObject(m, "merges") : NULL;
    ok = merges != NULL;
    for (int i = 0; ok && i < mg.n; i++) {
        cJSON *s = cJSON_CreateString(mg.pair[i]);
        ok = s && cJSON_AddItemToArray(merges, s);
        if (!ok) cJSON_Delete(s);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    if (!text) rc = err_setf(err, CBX_ERR_NOMEM, "synthetic tokenizer: out of memory");
    *out = text;
    if (n && text) *n = strlen(text);
cleanup:
    cJSON_Delete(root);
    free(mg.pair);
    free(v);
    return rc;
}

cbx_status synth_write_english_tokenizer(const char *path, char *err)
{
    char *text = NULL;
    size_t n = 0;
    struct atomic_file af = {0};
    cbx_status rc = synth_english_tokenizer_json(&text, &n, err);
    if (rc == CBX_OK) rc = atomic_file_open(&af, path, err);
    if (rc == CBX_OK && (fwrite(text, 1, n, af.f) != n || fputc('\n', af.f) == EOF))
        rc = err_setf(err, CBX_ERR_IO, "%s: write failed", path);
    if (rc == CBX_OK) rc = atomic_file_commit(&af, err);
    atomic_file_abort(&af);
    free(text);
    return rc;
}
