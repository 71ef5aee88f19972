#!/usr/bin/python3
"""Golden data for loom::Gpt2Bpe (tests/unit/test_gpt2_bpe.cpp), made without downloads.

Run: /usr/bin/python3 scripts/make_bpe_golden.py      (stdlib + the `regex` module only)

Writes, deterministically, to tests/data/bpe/:
  vocab.json   symbol -> id: the 256 byte symbols of bytes_to_unicode() in byte order (ids 0..255),
               then each new merge result in merge order, then "<|endoftext|>" last.
  merges.txt   GPT-2's format: "#version: 0.2", then one "a b" merge per line, rank order.
  cases.jsonl  one {"text": str, "ids": [int]} per line: text (valid UTF-8) encoded by the faithful
               re-implementation of OpenAI's encoder.py below.
  cases_invalid_utf8.jsonl  one {"hex": str, "ids": [int]} per line: raw bytes that are not valid
               UTF-8. encoder.py only sees Python str, so these define Loom's extension: the bytes
               are decoded with errors="surrogateescape" (each invalid byte becomes a lone surrogate,
               which the pattern treats like punctuation: not \\s, \\p{L} or \\p{N}) and each piece
               is turned back into its original bytes with the same error handler.

The vocabulary is learnt here by plain BPE training (~300 merges, most frequent pair first, ties
to the smallest pair) on pre-tokenised text from /usr/share/games/fortunes/ (first 16 KB of each
file, sorted file order, *.dat and *.u8 skipped).
Format version: 1 (bump it if the layout of these files changes).
"""
import json
import os
import random
import sys

import regex

FORTUNES = "/usr/share/games/fortunes"
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "bpe")
N_MERGES = 300
BYTES_PER_FILE = 16 * 1024
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


# ---- OpenAI's gpt-2/src/encoder.py, re-implemented faithfully (same algorithm, same names) ----

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2**8):
        if b not in bs:
            bs.append(b)
            cs.append(2**8 + n)
            n += 1
    cs = [chr(n) for n in cs]
    return dict(zip(bs, cs))


def get_pairs(word):
    pairs = set()
    prev_char = word[0]
    for char in word[1:]:
        pairs.add((prev_char, char))
        prev_char = char
    return pairs


class Encoder:
    def __init__(self, encoder, bpe_merges, errors="strict"):
        self.encoder = encoder
        self.errors = errors  # how str <-> bytes treats lone surrogates ("surrogateescape": raw bytes)
        self.byte_encoder = bytes_to_unicode()
        self.bpe_ranks = dict(zip(bpe_merges, range(len(bpe_merges))))
        self.cache = {}
        self.pat = regex.compile(GPT2_PATTERN)

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = get_pairs(word)
        if not pairs:
            return token
        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                    new_word.extend(word[i:j])
                    i = j
                except ValueError:
                    new_word.extend(word[i:])
                    break
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        word = " ".join(word)
        self.cache[token] = word
        return word

    def encode(self, text):
        bpe_tokens = []
        for token in regex.findall(self.pat, text):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8", self.errors))
            bpe_tokens.extend(self.encoder[bpe_token] for bpe_token in self.bpe(token).split(" "))
        return bpe_tokens


# ---- corpus and BPE training ----

def corpus_files():
    names = sorted(os.listdir(FORTUNES))
    return [os.path.join(FORTUNES, n) for n in names
            if not n.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(FORTUNES, n))
            and not os.path.islink(os.path.join(FORTUNES, n))]


def read_corpus():
    texts = []
    for path in corpus_files():
        with open(path, "rb") as f:
            texts.append(f.read(BYTES_PER_FILE).decode("utf-8", "replace"))
    return texts


def train_bpe(texts, n_merges):
    """Standard BPE training on byte symbols; returns the merges [(a, b)] in rank order."""
    byte_encoder = bytes_to_unicode()
    pat = regex.compile(GPT2_PATTERN)
    counts = {}
    for text in texts:
        for piece in pat.findall(text):
            counts[piece] = counts.get(piece, 0) + 1
    words = [[byte_encoder[b] for b in piece.encode("utf-8")] for piece in sorted(counts)]
    freqs = [counts[piece] for piece in sorted(counts)]
    pair_count, where = {}, {}

    def add_word(w, sign):
        for pair in zip(words[w], words[w][1:]):
            pair_count[pair] = pair_count.get(pair, 0) + sign * freqs[w]
            if sign > 0:
                where.setdefault(pair, set()).add(w)

    for w in range(len(words)):
        add_word(w, +1)
    merges = []
    for _ in range(n_merges):
        live = [(-c, p) for p, c in pair_count.items() if c > 0]
        if not live:
            break
        count, best = min(live)
        if -count < 2:
            break
        merges.append(best)
        a, b = best
        for w in sorted(where.pop(best)):
            add_word(w, -1)
            old, new, i = words[w], [], 0
            while i < len(old):
                if i < len(old) - 1 and old[i] == a and old[i + 1] == b:
                    new.append(a + b)
                    i += 2
                else:
                    new.append(old[i])
                    i += 1
            words[w] = new
            add_word(w, +1)
    return merges


def build_vocab(merges):
    vocab = {}
    for b in range(256):
        vocab[bytes_to_unicode()[b]] = len(vocab)
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return vocab


# ---- test strings ----

def fortune_lines(texts, rng, n):
    lines = sorted({ln for t in texts for ln in t.split("\n") if 0 < len(ln) <= 120 and ln != "%"})
    return rng.sample(lines, n)


def fortune_paragraphs(texts, rng, n):
    paras = sorted({p for t in texts for p in t.split("\n%\n") if 0 < len(p) <= 400})
    return rng.sample(paras, n)


HANDWRITTEN = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t x", "a  b", "a   b", "a\t\tb",
    "trailing   ", "trailing \t", "  leading", "\n\nnew paragraph", "x \n\n y", " \u00a0 x",
    "ends with newline\n", "many\n\n\n\nnewlines", "tabs\tand\tspaces \t mixed",
    "it's", "don't", "we're", "they've", "I'm", "we'll", "he'd", "IT'S", "DON'T", "it'S",
    "she'll've", "'s", "''s", "'ss", " 's", "y'all", "rock 'n' roll", "o'clock", "'twas",
    "the dog's bone's color", "\u2019s curly apostrophe isn\u2019t a contraction",
    "0", "42", "3.14159", "1,000,000", "2024-01-31", "x1y2z3", " 123 456", "12345678901234567890",
    "\u00bd \u2153 \u00b2 \u2163 \u0663\u0664", "Call 555-1234 now!",
    "!!!", "?!?!", "...", "---", "--> <--", "((()))", "a.b.c", "#include <stdio.h>", "$$$ 100%",
    "foo@bar.com", "https://example.com/path?q=1&r=2", "@#$%^&*()_+-=[]{}|;:,.<>/?`~", " ... ",
    "caf\u00e9", "na\u00efve r\u00e9sum\u00e9", "Stra\u00dfe", "\u03a9 \u03c9mega", "\u0394\u03b5\u03bb\u03c4\u03b1",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!", "\u4f60\u597d\u4e16\u754c",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "\ud55c\uad6d\uc5b4", "\u0639\u0631\u0628\u064a",
    "\u05e2\u05d1\u05e8\u05d9\u05ea", "\u0939\u093f\u0928\u094d\u0926\u0940",
    "\U0001F600", "emoji \U0001F600\U0001F680 run", "\U0001F468\u200d\U0001F469\u200d\U0001F467",
    "flag \U0001F1EB\U0001F1F7", "\u2764\ufe0f", "e\u0301", "cafe\u0301 combining", "a\u0308\u0304",
    "\u0915\u094d\u0937", "x\u200by zero width", "\ufeffBOM", "\u00a0nbsp", "ideographic\u3000space",
    "nel\u0085line", "line\u2028sep", "para\u2029sep", "mongolian\u180eseparator", "ctrl\x1c\x1d\x1e\x1f",
    "nul\x00byte", "bell\x07", "del\x7f", "\u00ff\u00fe\u0100", "\U00010000\U0010fffd",
    "<|endoftext|>", "before<|endoftext|>after", "a <|endoftext|> b", "<|endoftext|><|endoftext|>",
    "antidisestablishmentarianism", "pneumonoultramicroscopicsilicovolcanoconiosis",
    "a" * 200, "ab" * 150, " " * 100, "!" * 80, "9" * 60, "\u00e9" * 50, "\u4e00" * 40,
    "Supercalifragilisticexpialidocious is a long word, isn't it?",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG.",
    "def f(x):\n    return x ** 2  # square\n",
    "if (a && b) { return c; }\n\telse { d++; }",
    "Mixed: caf\u00e9 \u4f60\u597d 123 !!! it's \U0001F600\n\n  end  ",
]

SCRIPTS = ["abcxyzABC", "\u00e9\u00df\u00f1\u00fc", "\u03b1\u03b2\u03a9", "\u0430\u0431\u0416",
           "\u4e00\u4e8c\u6587", "\u3042\u30a2", "0123456789", "\u0661\u0662", " ", "  ", "\t", "\n",
           "\u00a0", "\u3000", ".,;:!?", "'s", "'t", "'ll", "'S", "-_/\\", "\u0301", "\u200d",
           "\U0001F600", "\u2019", "<|endoftext|>"]


def random_cases(rng):
    printable = [chr(c) for c in range(32, 127)] + ["\t", "\n"]
    out = []
    for _ in range(40):
        out.append("".join(rng.choice(printable) for _ in range(rng.randint(1, 80))))
    for _ in range(30):
        out.append("".join(rng.choice(SCRIPTS) for _ in range(rng.randint(1, 20))))
    return out


def invalid_utf8_cases(rng):
    cases = [b"\xff", b"\x80", b"abc\xffdef", b"a \xfe b", b"\xc3", b"caf\xc3", b"\xc3(",
             b"\xe2\x82", b"\xe2\x82a", b"\xf0\x9f\x98", b"\xf0\x9f\x98 x", b"\xed\xa0\x80",
             b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80",
             b"!!\xff!!", b"it\xff's", b"12\x8034", b"  \xff  ", b"x\n\xff\n", b"\xff\xfe\xfd",
             "\u00e9\u4f60".encode() + b"\x80" + "\U0001F600".encode()[:3] + b" ok"]
    for _ in range(20):
        n = rng.randint(1, 30)
        cases.append(bytes(rng.choice([rng.randrange(256), rng.randrange(32, 127)]) for _ in range(n)))
    return [c for c in cases if not is_utf8(c)]


def is_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def main():
    texts = read_corpus()
    merges = train_bpe(texts, N_MERGES)
    vocab = build_vocab(merges)
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(OUT_DIR, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")

    rng = random.Random(1234)
    cases = HANDWRITTEN + fortune_lines(texts, rng, 120) + fortune_paragraphs(texts, rng, 20) + random_cases(rng)
    enc = Encoder(vocab, merges)
    with open(os.path.join(OUT_DIR, "cases.jsonl"), "w", encoding="utf-8") as f:
        for text in cases:
            f.write(json.dumps({"text": text, "ids": enc.encode(text)}) + "\n")
    raw = invalid_utf8_cases(rng)
    enc_raw = Encoder(vocab, merges, errors="surrogateescape")
    with open(os.path.join(OUT_DIR, "cases_invalid_utf8.jsonl"), "w", encoding="utf-8") as f:
        for b in raw:
            ids = enc_raw.encode(b.decode("utf-8", "surrogateescape"))
            f.write(json.dumps({"hex": b.hex(), "ids": ids}) + "\n")
    print(f"{len(merges)} merges, vocab {len(vocab)}, {len(cases)} cases, {len(raw)} invalid-UTF-8 cases "
          f"-> {os.path.normpath(OUT_DIR)}", file=sys.stderr)


if __name__ == "__main__":
    main()
