#!/usr/bin/env python3
"""Compare `tq tokenize` with llama.cpp's tokenizer on random texts, for any GGUF vocabulary.

The oracle is llama.cpp as wrapped by llama-cpp-python (the vocabulary loaded with
vocab_only, llama_tokenize with add_special off). The texts are valid UTF-8 (llama.cpp turns
invalid bytes into U+FFFD, where we keep the bytes: doc/tokenizer.md): ASCII words and
contractions, white space of every kind (U+0085, U+00A0, U+3000, ...), digits of several
scripts, Greek, CJK, Hangul, emoji, combining marks, special-token text, and strings of random
code points. Prints each mismatch and the count; exit 1 on any mismatch.

Not used by any test (the C tests check llama.cpp's own test vectors, ../shared/data/vocab).

  .venv-ref/bin/python scripts/reference/tokenizer_vs_llamacpp.py \\
      ../shared/data/vocab/ggml-vocab-qwen2.gguf models/smollm2-135m-instruct-q4_1.gguf \\
      --n 300 --parse-special

Usage: tokenizer_vs_llamacpp.py GGUF [GGUF...] [--tq build/tq] [--n 300] [--seed 1]
                                [--parse-special]
"""

import argparse
import ctypes
import os
import random
import subprocess
import sys

import llama_cpp

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

POOL = [" ", " ", " ", "\n", "\r", "\t", "\x0b", "\x85", "\xa0", "\u3000", "\u2009", "'", "s", "S",
        "t", "l", "e", "A", "z", "0", "7", "9", ".", ",", "!", "?", "(", "$", "~", "|", "-", "\xe9",
        "\xc4", "\u03b1", "\u03a9", "\u4e2d", "\u6587", "\uac00", "\u0663", "\u0967", "\uff11",
        "\u2126", "\u212a", "\U0001f600", "\U0001f44d", "\u200b", "\ufeff", "\u0301", "\xb5",
        "\u1fbe", "\uff01", "\u3001", "\u3002", "\u1680", "\u0800", "\xbd", "\u2160", "\xb2", "ll",
        "re", "'S", "'Ll", "   ", "\n\n", " \n", "the", " the", "123456", "<|endoftext|>", "<s>",
        "</s>", "<|im_start|>", "\ufffd"]


def random_text(rng):
    if rng.random() < 0.25:
        cps = [rng.randrange(0x80, 0x30000) for _ in range(rng.randrange(1, 30))]
        return "".join(chr(c) if not 0xD800 <= c < 0xE000 else "a" for c in cps)
    return "".join(rng.choice(POOL) for _ in range(rng.randrange(50)))


def llama_ids(vocab, text, parse_special):
    b = text.encode()
    cap = 4 * len(b) + 16
    buf = (llama_cpp.llama_token * cap)()
    n = llama_cpp.llama_tokenize(vocab, b, len(b), buf, cap, False, parse_special)
    return list(buf[:n])


def tq_ids(tq, path, text, parse_special):
    cmd = [tq, "tokenize", "-m", path, "--stdin", "--ids", "--no-bos"]
    if not parse_special:
        cmd.append("--no-parse-special")
    out = subprocess.run(cmd, input=text.encode(), capture_output=True, check=True).stdout.decode()
    inner = out.strip()[1:-1].strip()
    return [int(x) for x in inner.split(",")] if inner else []


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf", nargs="+")
    ap.add_argument("--tq", default=os.path.join(ROOT, "build", "tq"))
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--parse-special", action="store_true")
    a = ap.parse_args()
    llama_cpp.llama_backend_init()
    bad_total = 0
    for path in a.gguf:
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        model = llama_cpp.llama_model_load_from_file(path.encode(), params)
        if not model:
            sys.exit(f"llama.cpp cannot load {path}")
        vocab = llama_cpp.llama_model_get_vocab(model)
        rng = random.Random(a.seed)
        bad = 0
        for _ in range(a.n):
            text = random_text(rng)
            want = llama_ids(vocab, text, a.parse_special)
            got = tq_ids(a.tq, path, text, a.parse_special)
            if want != got:
                bad += 1
                print(f"{path}: {text!r}\n  llama.cpp {want}\n  tq        {got}")
        print(f"{path}: {a.n - bad} of {a.n} texts give llama.cpp's ids")
        llama_cpp.llama_model_free(model)
        bad_total += bad
    sys.exit(1 if bad_total else 0)


if __name__ == "__main__":
    main()
