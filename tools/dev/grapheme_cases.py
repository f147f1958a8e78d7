#!/usr/bin/env python3
"""grapheme_cases.py - expected ids for the grapheme tokenizer test.

Dev tool (not part of the product). Runs the real Hugging Face `tokenizers`
library over the synthetic English tokenizer.json (tests/data/english/
tokenizer.json, which tests/text/test_grapheme.c checks is byte-identical
to what `chatterbox synth english` writes) and writes:

  tests/data/english/tokenizer_cases.json
      cases: text -> punc_norm (English rules, spec/overview.md §6) ->
      " " -> "[SPACE]" -> Tokenizer.encode(...).ids, as EnTokenizer does;
      variant_cases: raw Tokenizer.encode ids with tokenizer_variant.json
  tests/data/english/tokenizer_variant.json
      the same tokenizer with merges in the [a, b] array form, fuse_unk true
      and extra added tokens (normalized and not, special and not), ids as
      the library assigns them
  tests/data/english/tokenizer_mtl_shape.json
      a multilingual-shaped file of the real size (2454 ids, language tags
      and [cj_*] letters as added tokens), with mtl_shape_cases: texts as
      MTLTokenizer hands them to Tokenizer.encode
  tests/data/english/pretokenizer_classes.json
      the Whitespace pre-tokenizer's \\w and \\s as code point ranges,
      measured by running it on "a" + c + "a" for every code point

    python3 -m venv /work/venv-cjk && /work/venv-cjk/bin/pip install tokenizers
    /work/venv-cjk/bin/pip install chatterbox-tts --no-deps   # punc_norm: upstream's own
    /work/venv-cjk/bin/python tools/dev/grapheme_cases.py

The synthetic tokenizer.json itself comes from the C writer: when it
changes, test_grapheme fails, printing where it wrote the new file; copy
that to tests/data/english/tokenizer.json and rerun this tool.
"""
import argparse
import itertools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import upstream_src  # noqa: E402

import tokenizers
from tokenizers import Tokenizer
from tokenizers.pre_tokenizers import Whitespace

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "english")

SENTENCES = [
    "Hello world",
    "the quick brown fox jumps over the lazy dog.",
    "Peter Piper picked a peck of pickled peppers!",
    "Numbers: 1990, 2024 and 3.14159 - or 100%?",
    "\u201cSmart quotes\u201d and \u2018single ones\u2019 \u2014 with dashes \u2013 too\u2026",
    "Wait... what?! Really;  yes: really.",
    "Emoji \U0001F600 and \U0001F44D\U0001F3FD and \U0001F468\u200d\U0001F469\u200d\U0001F467 family",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac: \u03b1\u03b2\u03b3 \u03b4\u03ad\u03bb\u03c4\u03b1 and \u03a9mega",
    "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442 \u0438 \u4e2d\u6587 and "
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "Caf\u00e9, na\u00efve, fa\u00e7ade, \u00dcberma\u00df, sm\u00f8rrebr\u00f8d",
    "Tabs\tand\nnewlines   and    repeated     spaces",
    "[laughter] That was funny [sigh] okay",
    "[cough] unknown tag and [SPACE] literal and [UNK] literal",
    "[START] and [STOP] markers[laughter][sigh]",
    "snake_case_identifier and CamelCaseWord",
    "e-mail: someone@example.com, url https://example.org/path?q=1&r=2",
    "Price: \u20ac100, \u00a350 or $25.99 \u00a1Hola! \u00bfQu\u00e9 tal?",
    "\u24b6\u24b7\u24b8 circled and \u216b roman and \u00bd fractions and x\u00b2 powers",
    "Non-breaking\u00a0space and ideographic\u3000space",
    "combining e\u0301 accent and zero\u200bwidth space",
    "",
    "   leading and trailing   ",
    "ALL CAPS SHOUTING IS FUN",
    "interesting information, communication and transportation",
    "\u00abGuillemets\u00bb and \u00b0degrees\u00b0",
    "\u00df at the start",
    "mixed123numbers456and789letters",
    "(parentheses) [brackets] {braces} <angles>",
    "a",
    "!!!",
    "It's a dog's life, isn't it? I'd've thought so.",
    "Thinking, reading and writing are wonderful things - aren't they?",
    "go\U0001F44Dgo and tea\u2019s ready",
    "Everything that can be measured should be measured carefully and honestly. " * 3,
]

# Extra added tokens of the variant file: (content, normalized, special).
# "x<t" (normalized) starts before "<tag>" (not normalized) in "x<tag>":
# the library's first pass takes "<tag>", one leftmost-longest pass over all
# tokens would take "x<t".
VARIANT_ADDED = [("<tag>", False, True), ("x<t", True, False), ("the end", True, False),
                 ("hello", True, False), ("[laughter]", False, True)]

VARIANT_TEXTS = [
    "x<tag> the end",
    "hello the end of the story, hello again",
    "<tag>x<t and x<tx<tag>",
    "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u4e2d\u6587\u4e2d fused unknowns \u0416\u0416a\u0416",
    "the  end and theend and the\u00a0end",
    "Interesting[laughter]information",
    "spaces   inside\ttabs\nnewlines",
    "",
    "   ",
    "\U0001F468\u200d\U0001F469 zwj",
]


# A multilingual-shaped file (spec/tokenizers.md §3): 2454 ids, the English
# synthetic vocabulary plus more scripts (Cyrillic, Hebrew, Arabic,
# Devanagari, combining marks, Hangul jamo, kana), a few Cyrillic merges,
# and as added tokens the 23 language tags and the Cangjie [cj_*] letters.
MTL_IDS = 2454
MTL_LANGS = "ar da de el en es fi fr he hi it ja ko ms nl no pl pt ru sv sw tr zh".split()
MTL_RANGES = [(0x430, 0x44F), (0x451, 0x451), (0x5D0, 0x5EA), (0x621, 0x64A), (0x900, 0x97F), (0x300, 0x36F),
              (0x1100, 0x1112), (0x1161, 0x1175), (0x11A8, 0x11C2), (0x3041, 0x3096), (0x3099, 0x309C),
              (0x30A1, 0x30FA), (0x100, 0x24F), (0x250, 0x2AF), (0x1E00, 0x1EFF), (0x370, 0x3FF),
              (0x4E00, 0x4FFF)]
MTL_MERGES = ["п р", "с т", "н о", "т о", "пр и", "в е", "ст в", "о в"]
MTL_TEXTS = [
    "[fr]bonjour[SPACE]le[SPACE]monde.",
    "[ru]привет,[SPACE]как[SPACE]дела?",
    "[ko]각[SPACE]나.",
    "[ja]こんにちは、が.",
    "[zh][cj_a][cj_b][cj_.][cj_1][cj_2][cj_.][SPACE]一.",
    "[de]große[SPACE]straße[SPACE]über",
    "[he]שלום[SPACE][ar]مرحبا",
    "[hi]नमस्ते[SPACE]😀",
    "[xx]unknown[SPACE]tag[en]",
]


def make_mtl(src):
    j = json.loads(src)
    m = j["model"]
    vocab = m["vocab"]
    n_added = len(MTL_LANGS) + 37
    chars = [chr(c) for lo, hi in MTL_RANGES for c in range(lo, hi + 1)]
    merges = [tuple(x.split(" ")) for x in MTL_MERGES]
    new = [a + b for a, b in merges]
    for t in chars:
        if len(vocab) + len(new) + n_added >= MTL_IDS:
            break
        vocab.setdefault(t, len(vocab))
    for t in new:
        vocab.setdefault(t, len(vocab))
    m["merges"] += [" ".join(x) for x in merges]
    tags = ["[%s]" % lang for lang in MTL_LANGS] + ["[cj_%s]" % c for c in "abcdefghijklmnopqrstuvwxyz0123456789."]
    for t in tags:
        j["added_tokens"].append(dict(id=0, content=t, single_word=False, lstrip=False, rstrip=False,
                                      normalized=False, special=True))
    tok = Tokenizer.from_str(json.dumps(j))
    for a in j["added_tokens"]:
        a["id"] = tok.token_to_id(a["content"])
    assert tok.get_vocab_size() == MTL_IDS, tok.get_vocab_size()
    return json.dumps(j, ensure_ascii=False, indent=2) + "\n"


# upstream's own punc_norm (English rules), read from the installed package
punc_norm = upstream_src.function("tts.py", "punc_norm")


def make_variant(src):
    j = json.loads(src)
    m = j["model"]
    m["merges"] = [s.split(" ") for s in m["merges"]]
    m["fuse_unk"] = True
    for content, normalized, special in VARIANT_ADDED:
        j["added_tokens"].append(dict(id=0, content=content, single_word=False, lstrip=False, rstrip=False,
                                      normalized=normalized, special=special))
    # the library ignores the file's ids and assigns its own: store those
    tok = Tokenizer.from_str(json.dumps(j))
    for a in j["added_tokens"]:
        a["id"] = tok.token_to_id(a["content"])
    return json.dumps(j, ensure_ascii=False, indent=2) + "\n"


def classes():
    w = Whitespace()
    cls = []
    for c in range(0x110000):
        if 0xD800 <= c < 0xE000:
            cls.append("x")
            continue
        n = len(w.pre_tokenize_str("a" + chr(c) + "a"))
        cls.append({1: "w", 2: "s", 3: "p"}[n])
    out = {"w": [], "s": []}
    c = 0
    for k, g in itertools.groupby(cls):
        n = len(list(g))
        if k in out:
            out[k].append([c, c + n - 1])
        c += n
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=os.path.join(DATA, "tokenizer.json"))
    ap.add_argument("--out-dir", default=DATA)
    args = ap.parse_args()

    src = open(args.tokenizer, encoding="utf-8").read()
    tok = Tokenizer.from_str(src)
    cases = []
    for text in SENTENCES:
        norm = punc_norm(text)
        ids = tok.encode(norm.replace(" ", "[SPACE]")).ids
        cases.append(dict(text=text, normalized=norm, ids=ids))

    variant = make_variant(src)
    vtok = Tokenizer.from_str(variant)
    vcases = [dict(text=t, ids=vtok.encode(t).ids) for t in VARIANT_TEXTS]

    mtl = make_mtl(src)
    mtok = Tokenizer.from_str(mtl)
    mcases = [dict(text=t, ids=mtok.encode(t).ids) for t in MTL_TEXTS]

    with open(os.path.join(args.out_dir, "tokenizer_variant.json"), "w", encoding="utf-8") as f:
        f.write(variant)
    with open(os.path.join(args.out_dir, "tokenizer_mtl_shape.json"), "w", encoding="utf-8") as f:
        f.write(mtl)
    with open(os.path.join(args.out_dir, "tokenizer_cases.json"), "w", encoding="utf-8") as f:
        json.dump(dict(generator="tools/dev/grapheme_cases.py", tokenizers_version=tokenizers.__version__,
                       tokenizer="tokenizer.json", cases=cases, variant_tokenizer="tokenizer_variant.json",
                       variant_cases=vcases, mtl_shape_tokenizer="tokenizer_mtl_shape.json",
                       mtl_shape_ids=MTL_IDS, mtl_shape_cases=mcases), f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(args.out_dir, "pretokenizer_classes.json"), "w", encoding="utf-8") as f:
        c = classes()
        json.dump(dict(generator="tools/dev/grapheme_cases.py", tokenizers_version=tokenizers.__version__,
                       what="Whitespace pre-tokenizer classes, inclusive code point ranges",
                       word=c["w"], space=c["s"]), f, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} cases, {len(vcases)} variant cases, {len(mcases)} mtl-shape cases (tokenizers {tokenizers.__version__})")


if __name__ == "__main__":
    main()
