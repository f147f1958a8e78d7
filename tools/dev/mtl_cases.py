#!/usr/bin/env python3
"""mtl_cases.py - expected ids for the multilingual text front end test.

Dev tool (not part of the product). Runs the real pipeline of MTLTokenizer
(spec/tokenizers.md §3, overview.md §6) in Python: punc_norm (multilingual
rules) -> str.lower() -> unicodedata.normalize("NFKD") -> the language step
(Korean: korean_normalize; others: unchanged) -> "[xx]" tag -> " " ->
"[SPACE]" -> the Hugging Face `tokenizers` library's Tokenizer.encode, over
a synthetic multilingual tokenizer built from
tests/data/english/tokenizer_mtl_shape.json plus every grapheme the cases
need (emoji and a few symbols left out on purpose: they stay [UNK]) and a
few merges per script. Writes under tests/data/mtl-v2/tokenizer/:

  grapheme_mtl_merged_expanded_v1.json  the synthetic tokenizer
  mtl_cases.json                        cases (text, language, ids) and
      Python's Unicode tables (Python's unicodedata version): per code point
      str.lower() and NFKD where they change it, the assigned code points,
      and the Cased / Case_Ignorable sets as str.lower() uses them for the
      Final_Sigma rule (probed through lower() itself)

    /work/venv-tok/bin/python tools/dev/mtl_cases.py
"""
import itertools
import json
import os
import sys
import unicodedata

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


def punc_norm(text):
    """Multilingual punc_norm (mtl_tts.py), spec/overview.md §6."""
    if len(text) == 0:
        text = "You need to add some text for me to talk."
    if text[0].islower():
        text = text[0].upper() + text[1:]
    text = " ".join(text.split())
    for old, new in [("...", ", "), ("\u2026", ", "), (":", ","), (" - ", ", "), (";", ", "),
                     ("\u2014", "-"), ("\u2013", "-"), (" ,", ","), ("\u201c", '"'), ("\u201d", '"'),
                     ("\u2018", "'"), ("\u2019", "'")]:
        text = text.replace(old, new)
    text = text.rstrip(" ")
    if not any(text.endswith(p) for p in [".", "!", "?", "-", ",", "、", "，", "。", "？", "！"]):
        text += "."
    return text


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


def prepare(text, language):
    """MTLTokenizer.encode up to Tokenizer.encode."""
    t = unicodedata.normalize("NFKD", text.lower())
    if language and language.lower() == "ko":
        t = korean_normalize(t)
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
    for c in sorted(chars):
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


def main():
    cases = [(lang, text, prepare(punc_norm(text), lang)) for lang, text in all_cases()]
    src = make_tokenizer([p for _, _, p in cases])
    tok = Tokenizer.from_str(src)
    out = []
    for lang, text, prepared in cases:
        out.append(dict(language=lang, text=text, normalized=punc_norm(text), prepared=prepared,
                        ids=tok.encode(prepared).ids))
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "grapheme_mtl_merged_expanded_v1.json"), "w", encoding="utf-8") as f:
        f.write(src)
    with open(os.path.join(OUT, "mtl_cases.json"), "w", encoding="utf-8") as f:
        json.dump(dict(generator="tools/dev/mtl_cases.py", tokenizers_version=tokenizers.__version__,
                       python=sys.version.split()[0], vocab_size=tok.get_vocab_size(), cases=out,
                       unicode=unicode_tables()), f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{len(out)} cases, {tok.get_vocab_size()} ids (tokenizers {tokenizers.__version__}, "
          f"unicodedata {unicodedata.unidata_version})")


if __name__ == "__main__":
    main()
