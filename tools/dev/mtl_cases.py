#!/usr/bin/env python3
"""mtl_cases.py - expected ids for the multilingual text front end test.

Dev tool (not part of the product). The ids come from upstream's own
tokenizer code: chatterbox-tts's MTLTokenizer (chatterbox 0.1.7,
models/tokenizers/tokenizer.py, imported from the installed package without
its model stack: torch is stubbed when absent, hf_hub_download is pointed at
the synthetic Cangjie5_TC.json, spacy_pkuseg is made unimportable, so
Chinese is unsegmented as in upstream's default install) fed with the
output of punc_norm (multilingual rules, mtl_tts.py; re-typed here as it
sits in the model module). The tool's own pipeline (str.lower() -> NFKD ->
Korean step -> "[xx]" -> "[SPACE]", spec/tokenizers.md §3) gives the
`prepared` text of every case, checked to give the same ids as upstream for
every language but ja and zh, whose `prepared` text comes from upstream's
hiragana_normalize (pykakasi 2.3.0) and ChineseCangjieConverter. The
synthetic multilingual tokenizer is tests/data/english/tokenizer_mtl_shape.json
plus every grapheme the cases need (emoji and a few symbols left out on
purpose: they stay [UNK]), the hiragana and katakana blocks, and a few
merges per script. Writes under tests/data/mtl-v2/tokenizer/:

  grapheme_mtl_merged_expanded_v1.json  the synthetic tokenizer
  Cangjie5_TC.json                      a synthetic Cangjie table in the
      real format (every Han character of the zh cases but a few, on
      purpose without a code, plus filler glyphs; codes shared by up to 14
      glyphs so indices above 0 and above 9 occur, a glyph listed twice
      (the last entry wins), entries with a third field, multi-character
      entries that take a place in their code's list)
  mtl_cases.json                        cases (text, language, ids) and
      Python's Unicode tables (Python's unicodedata version): per code point
      str.lower() and NFKD where they change it, the assigned code points,
      and the Cased / Case_Ignorable sets as str.lower() uses them for the
      Final_Sigma rule (probed through lower() itself)

    python3 -m venv /work/venv-cjk
    /work/venv-cjk/bin/pip install tokenizers==0.23.3 pykakasi==2.3.0
    /work/venv-cjk/bin/pip install --no-deps chatterbox-tts==0.1.7
    /work/venv-cjk/bin/python tools/dev/mtl_cases.py
"""
import importlib.util
import itertools
import json
import os
import random
import sys
import types
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import upstream_src  # noqa: E402

import tokenizers
from tokenizers import Tokenizer

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SRC = os.path.join(ROOT, "tests", "data", "english", "tokenizer_mtl_shape.json")
OUT = os.path.join(ROOT, "tests", "data", "mtl-v2", "tokenizer")

LANGS = "ar da de el en es fi fr he hi it ja ko ms nl no pl pt ru sv sw tr zh".split()

CASES = {
    "ar": ["مرحبا بالعالم! كيف حالك اليوم؟",
           "لدي 3 كتب و ٤ أقلام: هذا جميل…",
           "العربية مع English و 😀 في جملة واحدة",
           "ﻻ ﷲ ﺑ presentation forms"],
    "da": ["Hej verden, hvordan går det?",
           "Rødgrød med fløde koster 25,50 kr.",
           "ÆBLER og ØL i Århus — 2024!"],
    "de": ["Die Straße ist groß und schön.",
           "STRASSE, Maß und Fuß: 3 × 4 = 12",
           "ß am Anfang; „Anführungszeichen“ und ‚einfache‘",
           "Ärger über Öl im Übermaß 😀"],
    "el": ["ΟΔΥΣΣΕΥΣ και ΣΟΦΙΑ ΣΟΦΟΣ",
           "Καλημέρα σας! Τι κάνετε;",
           "ΑΣ. Σ ΑΣ' ΑΣ-ΒΣ ΑΣΑ Σ1",
           "Ἀθῆναι ᾯ ΐ ΰ ϐ ϑ ϕ ϰ ϱ ϲ",
           "ΜΑΣ΄ ΑΣ\u0301 ΑΣ\u00ad"],
    "en": ["Hello World, this is a Test.",
           "Numbers: 1990, 2024 and 3.14159 - or 100%?",
           "“Smart quotes” and ‘single ones’ — with dashes – too…",
           "ﬁne ﬂowers ﬃ ① ½ x² Ⅻ ™ ℌ"],
    "es": ["¡Hola! ¿Qué tal, señor Muñoz?",
           "El niño comió 12 piñas en Año Nuevo.",
           "ÁÉÍÓÚ Ñ Ü — ¡ESPAÑA!"],
    "fi": ["Hyvää päivää, mitä kuuluu?",
           "Äiti söi 7 jäätelöä Åbossa.",
           "Tämä on ÄÄNEKÄS lause 😀!"],
    "fr": ["Bonjour le monde, ça va ?",
           "L'été à Noël : œufs, cœur et Œuvre…",
           "ÇA COÛTE 15,99 € — déjà vu !",
           "« Guillemets » et ‹ simples › ½"],
    "he": ["שלום עולם, מה שלומך?",
           "יש לי 5 ספרים ו־3 עטים.",
           "עברית עם English ו־😀",
           "בְּרֵאשִׁית בָּרָא"],
    "hi": ["नमस्ते दुनिया, आप कैसे हैं?",
           "मेरे पास १२ किताबें और 3 कलम हैं।",
           "क़ ख़ ग़ ज़ ड़ ढ़ फ़ य़ हिंदी English 😀"],
    "it": ["Ciao mondo, come stai?",
           "Perché è già così? Più tardi, città!",
           "L'ÈRA DELL'ITALIA: 1861–2024"],
    "ja": ["今日はいい天気ですね。",
           "私の名前は田中です。東京に住んでいます。",
           "昨日、友達と一緒に映画を見に行きました。",
           "このコンピューターは２０２４年に買いました！",
           "日本語の文章を読むのは楽しいです。",
           "駅の近くに新しいレストランができました。",
           "すみません、トイレはどこですか？",
           "彼女は毎朝六時に起きて、公園を走ります。",
           "ハンバーガーとコーヒーをください。",
           "春になると、桜の花がとてもきれいです😀",
           "明日の会議は午後三時からです。",
           "子供たちは学校で英語を勉強しています。",
           "この本はとても面白かったので、もう一度読みたい。",
           "母は台所で料理を作っています。",
           "電車が遅れたので、会社に遅刻しました。",
           "ＡＢＣとabcは同じ文字ですか？",
           "富士山は日本で一番高い山です。",
           "夏休みに家族と海へ行く予定です。",
           "部屋の中は暖かくて静かだった。",
           "ありがとうございます！また来てください。",
           "雨が降っているので、傘を持って行きましょう。",
           "新幹線で大阪まで二時間半かかります。",
           "先生、質問があります。",
           "私は毎日、日本語のニュースを聞いています。"],
    "ko": ["안녕하세요, 세계!",
           "한국어 문장입니다. 숫자 123과 English.",
           "  가각갂 힣 ㄱㄴㄷ ㅏㅑ  ",
           "¨앞뒤 공백¨",
           "\ud7a4\ud7af 똠방각하 😀"],
    "ms": ["Selamat pagi, apa khabar?",
           "Saya ada 10 buah buku dan 2 pen.",
           "Bahasa MELAYU sangat INDAH!"],
    "nl": ["Hallo wereld, hoe gaat het?",
           "Het ĳsje kost €2,50 in ’s-Hertogenbosch.",
           "IJSSELMEER en Ĳzer: één, twéé."],
    "no": ["Hei verden, hvordan har du det?",
           "Blåbærsyltetøy koster 39,90 kr.",
           "ÆØÅ æøå: Tromsø og Bodø!"],
    "pl": ["Cześć świecie, jak się masz?",
           "Zażółć gęślą jaźń: 123 złote.",
           "ŁÓDŹ, GDAŃSK i KRAKÓW — Polska!"],
    "pt": ["Olá mundo, tudo bem?",
           "São Paulo tem 12 milhões de habitantes.",
           "AÇÃO, CORAÇÃO e PÃO: ótimo!"],
    "ru": ["Привет, мир! Как дела?",
           "Ёжик в тумане: 2024 год, 15 рублей.",
           "РУССКИЙ текст и English words 😀",
           "Объём съёмки — ЙОД и й"],
    "sv": ["Hej världen, hur mår du?",
           "Smörgåsbord för 99 kronor på Öland.",
           "ÅÄÖ åäö: Göteborg & Malmö!"],
    "sw": ["Habari ya dunia, hujambo?",
           "Nina vitabu 5 na kalamu 3.",
           "KISWAHILI ni lugha NZURI sana!"],
    "zh": ["你好，世界！今天天气很好。",
           "我們明天早上八點在學校門口見面，好嗎？",
           "这本书一共有300页，我已经读了一半。",
           "中文和English混在一起，还有数字2024和表情😀。",
           "「你喜歡吃什麼？」她問道。我說：「我喜歡餃子和麵條！」",
           "日本語のかなは変換されない：ひらがな、カタカナ。",
           "北京、上海、廣州和深圳都是大城市；人口超過一千萬。",
           "電腦、手機與網路改變了我們的生活方式。"],
    "tr": ["Merhaba dünya, nasılsın?",
           "İSTANBUL ve IĞDIR: ılık İçecek.",
           "Iİıi ŞşĞğÇçÖöÜü 2024!",
           "İi̇ noktalı ve noktasız ı"],
}

# a language as the caller gives it (case-insensitive) and no language
EXTRA = [("FR", "Bonjour ÉTÉ"), ("Ko", "  한국  "), (None, "No language ΣΑΣ İ straße"), (None, "")]

# merges over NFKD-lowered text: (a, b)
MERGES = [("t", "h"), ("th", "e"), ("e", "r"), ("i", "n"), ("a", "n"), ("e", "\u0301"), ("a", "\u0308"),
          ("o", "\u0308"), ("s", "s"), ("\u03c3", "\u03bf"), ("\u03bf", "\u03c2"), ("\u1100", "\u1161"),
          ("\u05e9", "\u05dc"), ("\u0645", "\u0631"), ("\u0915", "\u093e"), ("i", "\u0307"), ("c", "\u0327")]

UNKNOWN = {"\U0001F600", "\u00d7", "\u20ac"}  # left out of the vocabulary: [UNK]

# Han characters of the zh cases left without a Cangjie code: they reach
# the tokenizer as themselves (ChineseCangjieConverter's "no code" branch)
NO_CODE = {"餃", "圳"}
CANGJIE_LETTERS = "abcdefghijklmnopqrstuvwxy"


def cangjie_table():
    """A synthetic Cangjie5_TC.json: list of "glyph\tcode[\tmore]"."""
    rng = random.Random(14)
    han = sorted({c for t in CASES["zh"] for c in unicodedata.normalize("NFKD", t.lower())
                  if unicodedata.category(c) == "Lo" and 0x4E00 <= ord(c) <= 0x9FFF} - NO_CODE)
    filler = [chr(c) for c in range(0x4E00, 0x4E00 + 400) if chr(c) not in han][:260]
    codes, entries = set(), []

    def fresh(n):
        while True:
            c = "".join(rng.choice(CANGJIE_LETTERS) for _ in range(n))
            if c not in codes:
                codes.add(c)
                return c

    # shared codes: groups of 2..14 glyphs mixing filler and case glyphs,
    # so some case glyphs get indices 1..13
    pool = han[:]
    rng.shuffle(pool)
    groups = [14, 12, 11, 3, 2, 2]
    fill = iter(filler)
    for size in groups:
        code = fresh(rng.randint(2, 4))
        members = [next(fill) for _ in range(size - 2)] + [pool.pop(), pool.pop()]
        rng.shuffle(members)
        for g in members:
            entries.append("%s\t%s" % (g, code))
        if size == 12:  # a multi-character entry: a place in the list, never looked up
            entries.insert(len(entries) - 3, "%s%s\t%s" % (members[0], members[1], code))
    for g in pool:
        entries.append("%s\t%s" % (g, fresh(rng.randint(2, 5))))
    for g in fill:
        entries.append("%s\t%s" % (g, fresh(rng.randint(2, 5))))
    # a case glyph listed again later with another code (word2cj: the last
    # wins; its index is its place in that code's list), an extra field,
    # a glyph listed twice under one code (index: the first place)
    g = han[0]
    shared = entries[0].split("\t")[1]
    entries.append("%s\t%s\t%s" % (g, shared, "TC"))
    entries.append("%s\t%s" % (g, shared))
    entries.append("%s\t%s\textra\tfields" % (han[1], fresh(3)))
    return entries


def load_upstream(model_dir):
    """chatterbox's tokenizer module, without the model stack."""
    try:
        import torch  # noqa: F401
    except ImportError:
        torch = types.ModuleType("torch")
        torch.Tensor = type("Tensor", (), {})
        torch.IntTensor = lambda *a, **k: None
        sys.modules["torch"] = torch
    sys.modules["spacy_pkuseg"] = None  # not installed: unsegmented Chinese
    pkg = importlib.util.find_spec("chatterbox")
    path = os.path.join(pkg.submodule_search_locations[0], "models", "tokenizers", "tokenizer.py")
    spec = importlib.util.spec_from_file_location("chatterbox_mtl_tokenizer", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.hf_hub_download = lambda repo_id, filename, cache_dir=None: os.path.join(model_dir, filename)
    return mod


# upstream's own punc_norm (Multilingual rules), read from the installed package
punc_norm = upstream_src.function("mtl_tts.py", "punc_norm")


def korean_normalize(text):
    def decompose(c):
        if not ("\uac00" <= c <= "\ud7af"):
            return c
        base = ord(c) - 0xAC00
        initial = chr(0x1100 + base // (21 * 28))
        medial = chr(0x1161 + (base % (21 * 28)) // 28)
        final = chr(0x11A7 + base % 28) if base % 28 > 0 else ""
        return initial + medial + final
    return "".join(decompose(c) for c in text).strip()


def prepare(text, language, up=None, cangjie=None):
    """MTLTokenizer.encode up to Tokenizer.encode (ja, zh: upstream's own
    language step)."""
    t = unicodedata.normalize("NFKD", text.lower())
    if language and language.lower() == "ko":
        t = korean_normalize(t)
    if language and language.lower() == "ja":
        t = up.hiragana_normalize(t)
    if language and language.lower() == "zh":
        t = cangjie(t)
    if language:
        t = "[%s]%s" % (language.lower(), t)
    return t.replace(" ", "[SPACE]")


def all_cases():
    for lang in sorted(CASES):
        for text in CASES[lang]:
            yield lang, text
    yield from EXTRA


def make_tokenizer(prepared):
    j = json.loads(open(SRC, encoding="utf-8").read())
    vocab = j["model"]["vocab"]
    assert sorted(vocab.values()) == list(range(len(vocab)))
    tags = [a for a in j["added_tokens"] if a["content"] not in vocab]
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in vocab]
    tag_names = {a["content"] for a in tags}
    chars = set()
    for p in prepared:
        for name in tag_names | {"[SPACE]"}:
            p = p.replace(name, "")
        chars.update(p)
    kana = {chr(c) for c in list(range(0x3041, 0x3097)) + list(range(0x30A1, 0x30FB))} | {"\u3099", "\u309a", "ー"}
    for c in sorted(chars | kana):
        if c not in UNKNOWN and not c.isspace():
            vocab.setdefault(c, len(vocab))
    for a, b in MERGES:
        vocab.setdefault(a, len(vocab))
        vocab.setdefault(b, len(vocab))
        vocab.setdefault(a + b, len(vocab))
    j["model"]["merges"] += ["%s %s" % m for m in MERGES]
    j["added_tokens"] += tags
    tok = Tokenizer.from_str(json.dumps(j))
    for a in j["added_tokens"]:
        a["id"] = tok.token_to_id(a["content"])
    ids = sorted(list(vocab.values()) + [a["id"] for a in tags])
    assert ids == list(range(len(ids))), "ids not contiguous"
    return json.dumps(j, ensure_ascii=False, indent=2) + "\n"


def ranges(cps):
    out = []
    for _, g in itertools.groupby(enumerate(cps), lambda x: x[1] - x[0]):
        g = list(g)
        out.append([g[0][1], g[-1][1]])
    return out


def unicode_tables():
    def cased(c):
        return c.islower() or c.istitle()

    def ignorable(c):
        if not cased(c):
            return ("A" + c + "\u03a3").lower()[-1] == "\u03c2"
        return ("A\u03a3" + c).lower()[1] == "\u03c2"

    assigned, cas, ign, lower, nfkd = [], [], [], {}, {}
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        if unicodedata.category(c) == "Cn":
            continue
        assigned.append(cp)
        if cased(c):
            cas.append(cp)
        if ignorable(c):
            ign.append(cp)
        if c.lower() != c:
            lower["%x" % cp] = c.lower()
        if not 0xAC00 <= cp <= 0xD7A3 and unicodedata.normalize("NFKD", c) != c:
            nfkd["%x" % cp] = unicodedata.normalize("NFKD", c)
    return dict(unidata_version=unicodedata.unidata_version, assigned=ranges(assigned), cased=ranges(cas),
                case_ignorable=ranges(ign), lower=lower, nfkd=nfkd)


def up_version():
    from importlib.metadata import version
    return version("chatterbox-tts")


def pykakasi_version():
    from importlib.metadata import version
    return version("pykakasi")


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "Cangjie5_TC.json"), "w", encoding="utf-8") as f:
        json.dump(cangjie_table(), f, ensure_ascii=False, indent=0)
        f.write("\n")
    up = load_upstream(OUT)
    cangjie = up.ChineseCangjieConverter(OUT)
    assert cangjie.segmenter is None and len(cangjie.word2cj) > 200
    cases = [(lang, text, prepare(punc_norm(text), lang, up, cangjie)) for lang, text in all_cases()]
    src = make_tokenizer([p for _, _, p in cases])
    with open(os.path.join(OUT, "grapheme_mtl_merged_expanded_v1.json"), "w", encoding="utf-8") as f:
        f.write(src)
    tok = Tokenizer.from_str(src)
    mtl = up.MTLTokenizer(os.path.join(OUT, "grapheme_mtl_merged_expanded_v1.json"))
    out = []
    for lang, text, prepared in cases:
        # mtl_tts.generate: text_to_tokens(punc_norm(text), language_id.lower())
        ids = mtl.encode(punc_norm(text), language_id=lang.lower() if lang else None)
        assert ids == tok.encode(prepared).ids, (lang, text)
        out.append(dict(language=lang, text=text, normalized=punc_norm(text), prepared=prepared, ids=ids))
    with open(os.path.join(OUT, "mtl_cases.json"), "w", encoding="utf-8") as f:
        json.dump(dict(generator="tools/dev/mtl_cases.py", tokenizers_version=tokenizers.__version__,
                       upstream="chatterbox-tts " + up_version(), pykakasi=pykakasi_version(),
                       python=sys.version.split()[0], vocab_size=tok.get_vocab_size(), cases=out,
                       unicode=unicode_tables()), f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{len(out)} cases, {tok.get_vocab_size()} ids (tokenizers {tokenizers.__version__}, "
          f"unicodedata {unicodedata.unidata_version})")


if __name__ == "__main__":
    main()
