/* synth_tokenizer.c - the synthetic grapheme tokenizers and Cangjie table
 * (see synth_tokenizer.h). One writer serves both tokenizers, driven by a
 * spec: fixed added tokens, an alphabet of code point ranges, a corpus.
 * The merges come from a tiny BPE trainer run over the corpus (after NFKD
 * when the spec says so, as MTLTokenizer decomposes its input): words are
 * the runs of letters, marks and digits (Unicode categories L*, M*, N*)
 * whose characters are in the alphabet, weighted by their count; each step
 * merges the most frequent adjacent pair (ties: smaller left string, then
 * smaller right string, by strcmp) in every word, left to right. A pair
 * whose concatenation is already a token is still a merge rule but takes
 * no new id. */
#include "synth_tokenizer.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "io/atomic_file.h"
#include "io/variant.h"

#define MAX_TOKEN 96  /* bytes of a token string, NUL included */
#define WORD_SYMS 64  /* symbols kept of a corpus word */

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

/* A tokenizer to write: added tokens at fixed ids (negative: counted
 * from the end, n_ids + id), characters (inclusive code point ranges, in
 * id order), the corpus the merges are learnt from, and where to take
 * further single characters from should the corpus run out of pairs. */
struct added { int id; const char *content; };
struct spec {
    int n_ids;
    const struct added *added;
    int n_added;
    const uint32_t (*chars)[2];
    int n_chars;
    const char *corpus;
    bool nfkd;
    uint32_t fill_from;
};

struct vocab {
    char (*tok)[MAX_TOKEN];
    bool *used;
    int n_ids;
    int n;                 /* ids in use, with holes at reserved ids */
};

static int find(const struct vocab *v, const char *s)
{
    for (int i = 0; i < v->n_ids; i++)
        if (v->used[i] && !strcmp(v->tok[i], s)) return i;
    return -1;
}

/* Next free id; -1 when the table is full. */
static int add(struct vocab *v, const char *s)
{
    for (int i = 0; i < v->n_ids; i++)
        if (!v->used[i]) {
            v->used[i] = true;
            snprintf(v->tok[i], MAX_TOKEN, "%s", s);
            v->n++;
            return i;
        }
    return -1;
}

static void cp_str(uint32_t c, char u[5])
{
    memset(u, 0, 5);
    utf8proc_encode_char((utf8proc_int32_t)c, (utf8proc_uint8_t *)u);
}

static void add_cp(struct vocab *v, uint32_t c)
{
    char u[5];
    cp_str(c, u);
    add(v, u);
}

static bool is_word_char(utf8proc_int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

struct word { int sym[WORD_SYMS]; int n, count; };

struct merges { char (*pair)[2 * MAX_TOKEN + 2]; int n; };

/* Train merges on corpus (NUL-terminated UTF-8) until every id is used
 * or no pair is left (at most n_ids merges: mg->pair's room). */
static bool train(struct vocab *v, struct merges *mg, const char *corpus)
{
    const size_t len = strlen(corpus);
    const int N = v->n_ids;
    struct word *w = calloc(len + 1, sizeof *w);
    int nw = 0;
    bool ok = w != NULL;
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)corpus, *end = p + len;
    while (ok && p < end) {
        struct word cur = {{0}, 0, 0};
        /* one word: a run of word characters of the alphabet */
        while (p < end) {
            utf8proc_int32_t c;
            utf8proc_ssize_t k = utf8proc_iterate(p, end - p, &c);
            if (k <= 0) { p++; break; }
            char u[5];
            cp_str((uint32_t)c, u);
            int id = is_word_char(c) ? find(v, u) : -1;
            p += k;
            if (id < 0) break;
            if (cur.n < WORD_SYMS - 1) cur.sym[cur.n++] = id;
        }
        if (cur.n == 0) continue;
        int k = 0;
        while (k < nw && (w[k].n != cur.n || memcmp(w[k].sym, cur.sym, sizeof(int) * (size_t)cur.n))) k++;
        if (k == nw) w[nw++] = cur;
        w[k].count++;
    }
    /* cnt[a * N + b]: weighted count of pair (a, b); only the entries of
     * pairs present are touched, and cleared again after each step */
    int *cnt = ok ? calloc((size_t)N * (size_t)N, sizeof *cnt) : NULL;
    ok = ok && cnt;
    while (ok && v->n < N && mg->n < N) {
        for (int k = 0; k < nw; k++)
            for (int j = 0; j + 1 < w[k].n; j++) cnt[w[k].sym[j] * N + w[k].sym[j + 1]] += w[k].count;
        int best = -1;
        for (int k = 0; k < nw; k++)
            for (int j = 0; j + 1 < w[k].n; j++) {
                int i = w[k].sym[j] * N + w[k].sym[j + 1];
                if (best < 0 || cnt[i] > cnt[best]) { best = i; continue; }
                if (cnt[i] < cnt[best] || i == best) continue;
                int c = strcmp(v->tok[i / N], v->tok[best / N]);
                if (c < 0 || (c == 0 && strcmp(v->tok[i % N], v->tok[best % N]) < 0)) best = i;
            }
        for (int k = 0; k < nw; k++)
            for (int j = 0; j + 1 < w[k].n; j++) cnt[w[k].sym[j] * N + w[k].sym[j + 1]] = 0;
        if (best < 0) break;
        int a = best / N, b = best % N;
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

/* The tokenizer.json text of spec s; *out owned by the caller. */
static cbx_status grapheme_json(const struct spec *s, const char *what, char **out, size_t *n, char *err)
{
    *out = NULL;
    if (n) *n = 0;
    const int N = s->n_ids;
    struct vocab *v = calloc(1, sizeof *v);
    struct merges mg = {NULL, 0};
    cJSON *root = NULL;
    char *text = NULL;
    cbx_status rc = CBX_OK;
    if (v) {
        v->n_ids = N;
        v->tok = calloc((size_t)N, sizeof *v->tok);
        v->used = calloc((size_t)N, sizeof *v->used);
    }
    if (v && v->tok && v->used) mg.pair = calloc((size_t)N, sizeof *mg.pair);
    if (s->nfkd && mg.pair)
        text = (char *)utf8proc_NFKD((const utf8proc_uint8_t *)s->corpus);
    if (!mg.pair || (s->nfkd && !text)) {
        rc = err_setf(err, CBX_ERR_NOMEM, "synthetic %s: out of memory", what);
        goto cleanup;
    }

    /* the added tokens at their ids (start 255 and stop 0 of T3Config
     * among them), then the characters */
    for (int i = 0; i < s->n_added; i++) {
        int id = s->added[i].id < 0 ? N + s->added[i].id : s->added[i].id;
        if (id < 0 || id >= N || v->used[id]) {
            rc = err_setf(err, CBX_ERR_INVALID_ARG, "synthetic %s: %d ids leave no room for %s at %d", what, N,
                          s->added[i].content, s->added[i].id);
            goto cleanup;
        }
        v->used[id] = true;
        snprintf(v->tok[id], MAX_TOKEN, "%s", s->added[i].content);
        v->n++;
    }
    for (int r = 0; r < s->n_chars; r++)
        for (uint32_t c = s->chars[r][0]; c <= s->chars[r][1] && v->n < N; c++) add_cp(v, c);
    if (!train(v, &mg, text ? text : s->corpus)) {
        rc = err_setf(err, CBX_ERR_NOMEM, "synthetic %s: out of memory", what);
        goto cleanup;
    }
    /* only if the corpus ran out of pairs: further single characters */
    for (uint32_t c = s->fill_from; v->n < N && c < 0x30000; c++) {
        char u[5];
        cp_str(c, u);
        if (utf8proc_category((utf8proc_int32_t)c) != UTF8PROC_CATEGORY_CN && find(v, u) < 0) add(v, u);
    }
    if (v->n < N) {
        rc = err_setf(err, CBX_ERR_INTERNAL, "synthetic %s: only %d of %d ids filled", what, v->n, N);
        goto cleanup;
    }

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
    for (int i = 0; ok && i < s->n_added; i++) {
        int id = s->added[i].id < 0 ? N + s->added[i].id : s->added[i].id;
        cJSON *t = added_token(id, s->added[i].content);
        ok = t && cJSON_AddItemToArray(a, t);
        if (!ok) cJSON_Delete(t);
    }
    cJSON *vocab = ok ? cJSON_AddObjectToObject(m, "vocab") : NULL;
    ok = vocab != NULL;
    for (int i = 0; ok && i < N; i++) ok = cJSON_AddNumberToObject(vocab, v->tok[i], i) != NULL;
    cJSON *merges = ok ? cJSON_AddArrayToObject(m, "merges") : NULL;
    ok = merges != NULL;
    for (int i = 0; ok && i < mg.n; i++) {
        cJSON *t = cJSON_CreateString(mg.pair[i]);
        ok = t && cJSON_AddItemToArray(merges, t);
        if (!ok) cJSON_Delete(t);
    }
    char *json = ok ? cJSON_Print(root) : NULL;
    if (!json) rc = err_setf(err, CBX_ERR_NOMEM, "synthetic %s: out of memory", what);
    *out = json;
    if (n && json) *n = strlen(json);
cleanup:
    cJSON_Delete(root);
    free(text);
    free(mg.pair);
    if (v) {
        free(v->tok);
        free(v->used);
    }
    free(v);
    return rc;
}

/* ---- English (tokenizers.md §2) ----------------------------------------- */

static const struct added english_added[] = {
    {0, "[STOP]"}, {1, "[UNK]"}, {2, "[SPACE]"}, {255, "[START]"}, {256, "[laughter]"}, {257, "[sigh]"}};

/* ASCII '!'..'~', the Latin-1 letters, a few signs, Greek lower case */
static const uint32_t english_chars[][2] = {
    {0x21, 0x7e}, {0xc0, 0xd6}, {0xd8, 0xf6}, {0xf8, 0xff}, {0xa1, 0xa1}, {0xbf, 0xbf}, {0xab, 0xab},
    {0xbb, 0xbb}, {0x20ac, 0x20ac}, {0xa3, 0xa3}, {0xb0, 0xb0}, {0x3b1, 0x3c9}};

cbx_status synth_english_tokenizer_json(char **out, size_t *n, char *err)
{
    const struct spec s = {SYNTH_ENGLISH_TEXT_VOCAB, english_added,
                           (int)(sizeof english_added / sizeof english_added[0]), english_chars,
                           (int)(sizeof english_chars / sizeof english_chars[0]), CORPUS, false, 0x100};
    return grapheme_json(&s, "tokenizer.json", out, n, err);
}

/* ---- multilingual (tokenizers.md §3) ------------------------------------ */

/* Short everyday sentences written for this file, one or two per
 * language of mtl_tts.py, in lower case (MTLTokenizer lower-cases) and
 * decomposed by NFKD before training (as MTLTokenizer's input is), so the
 * merges join base letters with their combining marks, conjoining jamo
 * and kana with their voicing marks. The English corpus above is added. */
static const char MTL_CORPUS[] =
    "ar: صباح الخير يا صديقي، كيف حالك اليوم؟ نحن نذهب إلى السوق ثم إلى البيت. "
    "أحب قراءة الكتب في المساء مع فنجان من القهوة. "
    "da: god morgen, hvordan har du det i dag? vi går til markedet og så hjem igen. "
    "jeg kan godt lide at læse bøger om aftenen med en kop kaffe. "
    "de: guten morgen, wie geht es dir heute? wir gehen zum markt und danach nach hause. "
    "ich lese gern bücher am abend mit einer tasse kaffee, das ist schön und gemütlich. "
    "el: καλημέρα φίλε μου, πώς είσαι σήμερα; πηγαίνουμε στην αγορά και μετά στο σπίτι. "
    "μου αρέσει να διαβάζω βιβλία το βράδυ με έναν καφέ. "
    "es: buenos días, ¿cómo estás hoy? vamos al mercado y después a casa. "
    "me gusta leer libros por la noche con una taza de café, señor niño. "
    "fi: hyvää huomenta, mitä sinulle kuuluu tänään? menemme torille ja sitten kotiin. "
    "luen mielelläni kirjoja illalla kupin kahvia kanssa. "
    "fr: bonjour mon ami, comment ça va aujourd'hui? nous allons au marché puis à la maison. "
    "j'aime lire des livres le soir avec une tasse de café, c'est très agréable. "
    "he: בוקר טוב חבר שלי, מה שלומך היום? אנחנו הולכים לשוק ואחר כך הביתה. "
    "אני אוהב לקרוא ספרים בערב עם כוס קפה. "
    "hi: सुप्रभात मेरे दोस्त, आज आप कैसे हैं? हम बाज़ार जा रहे हैं और फिर घर जाएंगे। "
    "मुझे शाम को चाय के साथ किताबें पढ़ना अच्छा लगता है। "
    "it: buongiorno amico mio, come stai oggi? andiamo al mercato e poi a casa. "
    "mi piace leggere libri la sera con una tazza di caffè, è molto bello. "
    "ja: おはようございます。 きょう は いい てんき です ね。 わたし は がっこう へ いきます。 "
    "コーヒー を のみながら ほん を よむ のが すき です。 テレビ と ラジオ と カメラ。 "
    "ko: 좋은 아침입니다 친구, 오늘 기분이 어때요? 우리는 시장에 갔다가 집으로 갑니다. "
    "저는 저녁에 커피를 마시면서 책을 읽는 것을 좋아합니다. "
    "ms: selamat pagi kawan saya, apa khabar hari ini? kami pergi ke pasar dan kemudian pulang. "
    "saya suka membaca buku pada waktu malam dengan secawan kopi. "
    "nl: goedemorgen mijn vriend, hoe gaat het vandaag? we gaan naar de markt en dan naar huis. "
    "ik lees graag boeken in de avond met een kopje koffie. "
    "no: god morgen min venn, hvordan går det i dag? vi går til torget og så hjem. "
    "jeg liker å lese bøker om kvelden med en kopp kaffe. "
    "pl: dzień dobry przyjacielu, jak się dzisiaj masz? idziemy na targ, a potem do domu. "
    "lubię czytać książki wieczorem przy filiżance kawy, to bardzo miłe. "
    "pt: bom dia meu amigo, como você está hoje? vamos ao mercado e depois para casa. "
    "eu gosto de ler livros à noite com uma xícara de café, não é? "
    "ru: доброе утро, мой друг, как ты сегодня? мы идём на рынок, а потом домой. "
    "я люблю читать книги вечером с чашкой кофе, это очень приятно. "
    "sv: god morgon min vän, hur mår du idag? vi går till torget och sedan hem. "
    "jag tycker om att läsa böcker på kvällen med en kopp kaffe. "
    "sw: habari za asubuhi rafiki yangu, hujambo leo? tunakwenda sokoni kisha nyumbani. "
    "ninapenda kusoma vitabu jioni pamoja na kikombe cha kahawa. "
    "tr: günaydın arkadaşım, bugün nasılsın? pazara gidiyoruz, sonra eve dönüyoruz. "
    "akşamları bir fincan kahve ile kitap okumayı çok seviyorum. "
    "zh: 早上好我的朋友今天你好吗我们去市场然后回家 我喜欢晚上一边喝咖啡一边看书 "
    "en: ";

/* Characters of the 23 languages after str.lower() and NFKD: ASCII,
 * the Latin letters NFKD leaves whole (ß æ ð ø þ ı đ ħ ł ŋ œ) and a few
 * signs, the combining marks, Greek, Cyrillic, Hebrew letters and points,
 * Arabic letters, marks and digits, Devanagari, the conjoining jamo
 * Hangul syllables decompose into, CJK punctuation, hiragana and katakana
 * with the combining (semi-)voiced marks; CJK ideographs are the Cangjie
 * table's glyphs (synth_mtl_tokenizer_json adds them). */
static const uint32_t mtl_chars[][2] = {
    {0x21, 0x7e},     {0xa1, 0xa1},     {0xab, 0xab},     {0xbb, 0xbb},     {0xbf, 0xbf},
    {0xdf, 0xdf},     {0xe6, 0xe6},     {0xf0, 0xf0},     {0xf8, 0xf8},     {0xfe, 0xfe},
    {0x111, 0x111},   {0x127, 0x127},   {0x131, 0x131},   {0x142, 0x142},   {0x14b, 0x14b},
    {0x153, 0x153},   {0x300, 0x36f},   {0x3b1, 0x3c9},   {0x430, 0x45f},   {0x5b0, 0x5c7},
    {0x5d0, 0x5ea},   {0x60c, 0x60c},   {0x61f, 0x61f},   {0x621, 0x63a},   {0x640, 0x655},
    {0x660, 0x669},   {0x67e, 0x67e},   {0x686, 0x686},   {0x6a9, 0x6a9},   {0x6af, 0x6af},
    {0x6cc, 0x6cc},   {0x900, 0x97f},   {0x1100, 0x1112}, {0x1161, 0x1175}, {0x11a8, 0x11c2},
    {0x3001, 0x3002}, {0x300c, 0x300d}, {0x3041, 0x3096}, {0x3099, 0x309a}, {0x30a1, 0x30fa},
    {0x30fb, 0x30fc}};

/* Common CJK characters, each with a code in Cangjie5_TC.json. The first
 * 26 are the Cangjie keys' own radicals (日 a ... 卜 y, 重 z); the others
 * get synthetic codes (cangjie_code). */
static const char CJK_GLYPHS[] =
    "日月金木水火土竹戈十大中一弓人心手口尸廿山女田難卜重"
    "的是不了我在有他这个们来到时说要就出会可也你对生能而子那得于着下自之年过发后作里用道行所然家种事成方多"
    "经么去法学如都同现当没动面起看定天分还进好小部其些主样理她本长把机点从业意明情外间"
    "早上朋友今天吗市场回喜欢晚边喝咖啡书国語語言文字电话车站路门店茶饭";

/* A synthetic Cangjie code for glyph i of CJK_GLYPHS: the radicals their
 * key; the others 2 to 4 letters from a multiplicative hash of the code
 * point, so some codes repeat (Cangjie5_TC.json has glyphs sharing a code,
 * told apart by their index, tokenizers.md §3.1). */
static void cangjie_code(uint32_t cp, int i, char code[8])
{
    memset(code, 0, 8);
    if (i < 26) {
        code[0] = (char)('a' + i);
        return;
    }
    uint32_t h = cp * 2654435761u;
    int len = 2 + (int)(h >> 30) % 3;
    for (int k = 0; k < len; k++) {
        code[k] = (char)('a' + (h >> (5 * k)) % 26);
        if (len == 2 && k == 0) code[k] = (char)('a' + cp % 7); /* short codes collide now and then */
    }
}

/* The code points of CJK_GLYPHS, in order, without repeats. */
static int cjk_glyphs(uint32_t *cps, int cap)
{
    int n = 0;
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)CJK_GLYPHS;
    utf8proc_ssize_t left = (utf8proc_ssize_t)strlen(CJK_GLYPHS);
    while (left > 0 && n < cap) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate(p, left, &c);
        if (k <= 0) break;
        p += k;
        left -= k;
        bool seen = false;
        for (int j = 0; j < n && !seen; j++) seen = cps[j] == (uint32_t)c;
        if (!seen) cps[n++] = (uint32_t)c;
    }
    return n;
}

#define MAX_GLYPHS 256
#define N_MTL_ADDED (6 + VARIANT_N_LANGUAGES + 37)

cbx_status synth_mtl_tokenizer_json(int n_ids, char **out, size_t *n, char *err)
{
    *out = NULL;
    if (n) *n = 0;
    if (n_ids < 1024 || n_ids > 65536)
        return err_setf(err, CBX_ERR_INVALID_ARG, "synthetic multilingual tokenizer: %d ids, want 1024..65536",
                        n_ids);
    /* [STOP] 0, [UNK] 1, [SPACE] 2, [START] 255 and two tags, as the
     * English file; the language tags and the Cangjie tokens are the
     * last 60 ids, as in the real file's layout */
    char tags[VARIANT_N_LANGUAGES + 37][8];
    struct added added[N_MTL_ADDED] = {
        {0, "[STOP]"}, {1, "[UNK]"}, {2, "[SPACE]"}, {255, "[START]"}, {256, "[laughter]"}, {257, "[sigh]"}};
    const char *const *lang = variant_get(MODEL_MTL_V2)->languages;
    int k = 6, t = 0;
    for (int i = 0; i < VARIANT_N_LANGUAGES; i++, t++) {
        snprintf(tags[t], sizeof tags[t], "[%s]", lang[i]);
        added[k++] = (struct added){t - (VARIANT_N_LANGUAGES + 37), tags[t]};
    }
    for (int i = 0; i < 37; i++, t++) {
        snprintf(tags[t], sizeof tags[t], "[cj_%c]", i < 26 ? 'a' + i : i < 36 ? '0' + (i - 26) : '.');
        added[k++] = (struct added){t - (VARIANT_N_LANGUAGES + 37), tags[t]};
    }
    const int n_fixed = (int)(sizeof mtl_chars / sizeof mtl_chars[0]);
    uint32_t glyphs[MAX_GLYPHS], ranges[sizeof mtl_chars / sizeof mtl_chars[0] + MAX_GLYPHS][2];
    memcpy(ranges, mtl_chars, sizeof mtl_chars);
    const int n_glyphs = cjk_glyphs(glyphs, MAX_GLYPHS);
    for (int i = 0; i < n_glyphs; i++) ranges[n_fixed + i][0] = ranges[n_fixed + i][1] = glyphs[i];
    const size_t nc = strlen(MTL_CORPUS), ne = strlen(CORPUS);
    char *corpus = malloc(nc + ne + 1);
    if (!corpus) return err_setf(err, CBX_ERR_NOMEM, "synthetic multilingual tokenizer: out of memory");
    memcpy(corpus, MTL_CORPUS, nc);
    for (size_t i = 0; i < ne; i++) /* the English corpus, lower-cased */
        corpus[nc + i] = CORPUS[i] >= 'A' && CORPUS[i] <= 'Z' ? (char)(CORPUS[i] - 'A' + 'a') : CORPUS[i];
    corpus[nc + ne] = 0;
    const struct spec s = {n_ids, added, N_MTL_ADDED, (const uint32_t (*)[2])ranges, n_fixed + n_glyphs, corpus, true,
                           0x4e00};
    cbx_status rc = grapheme_json(&s, "grapheme_mtl_merged_expanded_v1.json", out, n, err);
    free(corpus);
    return rc;
}

cbx_status synth_cangjie_json(char **out, size_t *n, char *err)
{
    *out = NULL;
    if (n) *n = 0;
    uint32_t glyphs[MAX_GLYPHS];
    const int n_glyphs = cjk_glyphs(glyphs, MAX_GLYPHS);
    cJSON *list = cJSON_CreateArray();
    bool ok = list != NULL;
    for (int i = 0; ok && i < n_glyphs; i++) {
        char g[5], code[8], line[16];
        cp_str(glyphs[i], g);
        cangjie_code(glyphs[i], i, code);
        snprintf(line, sizeof line, "%s\t%s", g, code);
        cJSON *s = cJSON_CreateString(line);
        ok = s && cJSON_AddItemToArray(list, s);
        if (!ok) cJSON_Delete(s);
    }
    char *json = ok ? cJSON_Print(list) : NULL;
    cJSON_Delete(list);
    if (!json) return err_setf(err, CBX_ERR_NOMEM, "synthetic Cangjie5_TC.json: out of memory");
    *out = json;
    if (n) *n = strlen(json);
    return CBX_OK;
}

/* ---- files -------------------------------------------------------------- */

static cbx_status write_text(const char *path, char *text, size_t n, cbx_status rc, char *err)
{
    struct atomic_file af = {0};
    if (rc == CBX_OK) rc = atomic_file_open(&af, path, err);
    if (rc == CBX_OK && (fwrite(text, 1, n, af.f) != n || fputc('\n', af.f) == EOF))
        rc = err_setf(err, CBX_ERR_IO, "%s: write failed", path);
    if (rc == CBX_OK) rc = atomic_file_commit(&af, err);
    atomic_file_abort(&af);
    free(text);
    return rc;
}

cbx_status synth_write_english_tokenizer(const char *path, char *err)
{
    char *text = NULL;
    size_t n = 0;
    cbx_status rc = synth_english_tokenizer_json(&text, &n, err);
    return write_text(path, text, n, rc, err);
}

cbx_status synth_write_mtl_tokenizer(const char *path, int n_ids, char *err)
{
    char *text = NULL;
    size_t n = 0;
    cbx_status rc = synth_mtl_tokenizer_json(n_ids, &text, &n, err);
    return write_text(path, text, n, rc, err);
}

cbx_status synth_write_cangjie(const char *path, char *err)
{
    char *text = NULL;
    size_t n = 0;
    cbx_status rc = synth_cangjie_json(&text, &n, err);
    return write_text(path, text, n, rc, err);
}
