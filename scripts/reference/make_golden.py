#!/usr/bin/env python3
"""Build the golden reference data for a real model (Gemma 3 270M, SmolLM2 135M), with llama.cpp
as the oracle.

The oracle is llama.cpp as wrapped by llama-cpp-python (CPU build, f16 KV cache, no flash
attention). The script is run once, by hand, and its outputs are committed; the C tests read
only the JSON files it writes and never need Python.

Outputs (in --out, default tests/golden/), for --model-name gemma3 (the default):
  tokenizer_ref.json   token ids for ~50 strings, detokenized text, special ids, vocab size
  gemma3_logits.json   4 prompts: per position top-20 ids/logits, logsumexp, 16 fixed logits;
                       32-token greedy continuation with the same data at every decode step
  gemma3_ppl.json      llama-perplexity-style perplexity on WikiText-2 raw test at ctx 512,
                       first 40 chunks: per-chunk NLL sums and token counts, final PPL
and for --model-name smollm2: smollm2_tokenizer.json, smollm2_logits.json and smollm2_ppl.json,
the same records for SmolLM2-135M-Instruct (its own prompts, special tokens and strings: see
MODELS), the PPL file also holding the ids of the scored chunks ("chunk_tokens"), so the C test
needs no tokenizer of its own (doc/smollm2.md).

Set up (see doc/gemma3.md §9, "Golden data and how to regenerate it"):
  python3 -m venv .venv-ref
  CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 19 .venv-ref/bin/pip install llama-cpp-python gguf numpy
  .venv-ref/bin/python scripts/reference/make_golden.py [--model-name smollm2]

Usage: make_golden.py [--model-name gemma3|smollm2] [--model M] [--text T] [--out DIR]
                      [--only tok,logits,ppl]
                      [--ctx 512] [--chunks 40] [--threads 2]
"""

import argparse
import ctypes
import hashlib
import json
import os
import platform
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data", "wikitext-2-raw-test.txt")
DEFAULT_OUT = os.path.join(ROOT, "tests", "golden")

TOP_K = 20
N_GREEDY = 32


def f32(x):
    """A float32 value as the shortest decimal that round-trips through float32."""
    return float(np.format_float_positional(np.float32(x), unique=True, trim="-"))


def f64(x):
    return float(x)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as fp:
        for block in iter(lambda: fp.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_ids(ids):
    return hashlib.sha256(np.asarray(ids, dtype="<i4").tobytes()).hexdigest()


class Oracle:
    """llama.cpp through llama-cpp-python, with fixed and recorded settings."""

    def __init__(self, model_path, n_ctx, n_threads, no_extra_bufts=False):
        import llama_cpp
        import llama_cpp.llama as llama_py
        from llama_cpp import Llama

        self.llama_cpp = llama_cpp
        self.settings = dict(
            n_ctx=n_ctx,
            n_batch=n_ctx,
            n_ubatch=n_ctx,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            logits_all=True,
            flash_attn=False,
            n_gpu_layers=0,
            seed=1234,
        )
        # --no-extra-bufts: model parameter use_extra_bufts = false (no CPU "extra" buffer types:
        # the repacked and AMX weight layouts). Llama() has no argument for it, so the default
        # model parameters are wrapped while it loads. Needed on CPUs with AMX, where llama.cpp
        # of llama-cpp-python 0.3.36 crashes in llama_decode with them (both models).
        default_params = llama_py.llama_cpp.llama_model_default_params
        if no_extra_bufts:
            def params_without_extra_bufts():
                p = default_params()
                p.use_extra_bufts = False
                return p
            llama_py.llama_cpp.llama_model_default_params = params_without_extra_bufts
        try:
            self.llm = Llama(model_path=model_path, verbose=False, **self.settings)
        finally:
            llama_py.llama_cpp.llama_model_default_params = default_params
        if no_extra_bufts:
            self.settings["use_extra_bufts"] = False
        cp = self.llm.context_params
        ggml_type = {0: "f32", 1: "f16", 8: "q8_0", 30: "bf16"}
        self.settings.update(
            type_k=ggml_type.get(cp.type_k, str(cp.type_k)),
            type_v=ggml_type.get(cp.type_v, str(cp.type_v)),
            swa_full=bool(cp.swa_full),
            flash_attn_type=int(cp.flash_attn_type),
            kv_cache_cleared_between_sequences=True,
        )
        self.vocab = self.llm._model.vocab
        self.n_vocab = self.llm.n_vocab()

    def info(self):
        lc = self.llama_cpp
        return {
            "llama_cpp_python_version": lc.__version__,
            "llama_cpp_system_info": lc.llama_print_system_info().decode("utf-8", "replace").strip(),
            "python": sys.version.split()[0],
            "numpy": np.__version__,
            "machine": platform.machine(),
            "settings": self.settings,
        }

    # ---- tokenizer ---------------------------------------------------------------------------
    def tokenize(self, data: bytes, add_special: bool, parse_special: bool):
        lc = self.llama_cpp
        cap = len(data) + 16
        while True:
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
            if n >= 0:
                return [int(t) for t in buf[:n]]
            cap = -n

    def detokenize(self, ids, remove_special: bool, unparse_special: bool) -> bytes:
        lc = self.llama_cpp
        arr = (lc.llama_token * max(1, len(ids)))(*ids)
        cap = 64 + 64 * len(ids)
        while True:
            buf = ctypes.create_string_buffer(cap)
            n = lc.llama_detokenize(self.vocab, arr, len(ids), buf, cap, remove_special, unparse_special)
            if n >= 0:
                return buf.raw[:n]
            cap = -n + 1

    def piece(self, tok: int, special: bool) -> bytes:
        lc = self.llama_cpp
        buf = ctypes.create_string_buffer(256)
        n = lc.llama_token_to_piece(self.vocab, tok, buf, 256, 0, special)
        return buf.raw[:n]

    # ---- evaluation --------------------------------------------------------------------------
    def eval_fresh(self, ids):
        """Clear the KV cache, evaluate ids as one batch from position 0, return float32 logits
        (len(ids) x n_vocab)."""
        self.llm.reset()
        self.llm.eval(ids)
        return np.array(self.llm.scores[: len(ids)], dtype=np.float32, copy=True)

    def eval_next(self, tok):
        """Evaluate one more token on top of the current KV cache; return its logits row."""
        self.llm.eval([tok])
        return np.array(self.llm.scores[self.llm.n_tokens - 1], dtype=np.float32, copy=True)


def lse64(row):
    x = row.astype(np.float64)
    m = x.max()
    return m + np.log(np.exp(x - m).sum())


def top_k(row, k):
    # sort by logit descending, ties by lower id first (stable on the negated values)
    order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
    return [int(i) for i in order], [f32(row[i]) for i in order]


def position_record(row, fixed_ids):
    ids, vals = top_k(row, TOP_K)
    return {
        "top_ids": ids,
        "top_logits": vals,
        "logsumexp": f64(lse64(row)),
        "fixed_logits": [f32(row[i]) for i in fixed_ids],
    }


# ------------------------------------------------------------------------------------------------
# a. tokenizer


def wikitext_lines(text_path, n=4):
    with open(text_path, "rb") as fp:
        lines = fp.read().split(b"\n")
    picked = []
    # a title line, a plain paragraph (cut at 300 bytes on a space), and lines with @-@, @,@ marks
    for ln in lines:
        if ln.startswith(b" = ") and not picked:
            picked.append(ln + b"\n")
            break
    for ln in lines:
        if len(ln) > 400 and b"@-@" not in ln:
            cut = ln[:300]
            cut = cut[: cut.rfind(b" ")]
            picked.append(cut)
            break
    for ln in lines:
        if b"@-@" in ln and b"@,@" in ln and len(ln) > 100:
            i = ln.find(b"@,@")
            seg = ln[max(0, i - 120): i + 60]
            seg = seg[seg.find(b" "): seg.rfind(b" ")]  # whole words; keeps the leading space
            picked.append(seg)
            break
    for ln in lines:
        if ln.startswith(b" = = ") and len(picked) < n:
            picked.append(ln + b"\n")
            break
    return picked


TOKENIZER_STRINGS = [
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "   three leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "multiple   internal    spaces  here",
    "line one\nline two",
    "\n\nstarts with newlines",
    "ends with newlines\n\n\n",
    "tab\tseparated\tvalues",
    "\t\tindented with tabs",
    "mixed \t \n whitespace \r\n CRLF line\r\n",
    "1234567890",
    "3.14159 and 2,718 and -42 and 1e-10",
    "Year 2024, the 1st of 12 months; 100% done.",
    "Punctuation!?... ;:--- (brackets) [square] {curly} \"double\" 'single' `tick` ~^|\\/",
    "def f(x):\n    return x**2 + 1\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "for (int i = 0; i < n; ++i) { a[i] += b[i] * c; }",
    "Café, naïve, résumé, façade, Ångström, Straße",
    "El niño comió en São Paulo. Żółć, čeština, Ελληνικά, русский язык",
    "日本語のテキストです。",
    "中文分词测试：你好，世界！",
    "한국어 문장입니다.",
    "Emoji: 😀🎉👍🏽 and 🇫🇷 flags",
    "❤️ ✨ 🚀",
    "Private use \ue000 and \U000f0000 and a bell \x07 end",
    "non\u00a0breaking and zero\u200bwidth",
] + [None] + [  # None: the model's special-token strings (MODELS[...]["special_strings"])
    "HTML <table><tr><td>cell</td></tr></table> <b>bold</b>",
    "URL https://example.com/path?query=1&x=y#frag",
    "email: someone@example.org",
    "ALLCAPS lowercase CamelCase snake_case kebab-case",
    "",
    " ",
    "a",
]

# token texts whose presence makes a string worth tokenizing with special=False too
SPECIAL_MARKERS = ["<", "[multimodal]"]


def make_tokenizer(oracle, text_path, meta_common):
    strings = []
    for s in TOKENIZER_STRINGS:
        strings += M["special_strings"] if s is None else [s]
    cases = [s.encode("utf-8") for s in strings + M["extra_strings"]] + wikitext_lines(text_path)
    out_cases = []
    for data in cases:
        text = data.decode("utf-8")
        ids = oracle.tokenize(data, add_special=False, parse_special=True)
        case = {
            "text": text,
            "utf8_hex": data.hex(),
            "ids": ids,
            "detok": oracle.detokenize(ids, False, False).hex(),
            "detok_special": oracle.detokenize(ids, False, True).hex(),
        }
        if any(m in text for m in SPECIAL_MARKERS):
            ids_ns = oracle.tokenize(data, add_special=False, parse_special=False)
            case["ids_nospecial"] = ids_ns
            case["detok_nospecial"] = oracle.detokenize(ids_ns, False, False).hex()
            case["detok_nospecial_special"] = oracle.detokenize(ids_ns, False, True).hex()
        out_cases.append(case)

    add_bos_examples = []
    for s in ["Hello world", "", M["special_strings"][1]]:
        data = s.encode()
        add_bos_examples.append({
            "text": s,
            "ids_add_special_parse_special": oracle.tokenize(data, True, True),
            "ids_add_special_no_parse_special": oracle.tokenize(data, True, False),
        })

    lc = oracle.llama_cpp
    v = oracle.vocab
    special_ids = {
        "bos": int(lc.llama_vocab_bos(v)),
        "eos": int(lc.llama_vocab_eos(v)),
        "eot": int(lc.llama_vocab_eot(v)),
        "pad": int(lc.llama_vocab_pad(v)),
        "nl": int(lc.llama_vocab_nl(v)),
    }
    pieces = {}
    for t in M["piece_ids"]:
        pieces[str(t)] = {"piece": oracle.piece(t, False).hex(), "piece_special": oracle.piece(t, True).hex()}

    return {
        "description": (
            "Token ids from llama.cpp (llama_tokenize) for each string. 'ids': add_special=false "
            "(no BOS), parse_special=true. 'ids_nospecial': add_special=false, parse_special=false "
            "(only for strings containing '<' or '[multimodal]'). Detokenized text is UTF-8 as hex "
            "from llama_detokenize(remove_special=false, unparse_special=false) ('detok*') and "
            "unparse_special=true ('*_special'). 'utf8_hex' is the exact input byte string; 'text' "
            "is the same, for reading. The last cases are lines of WikiText-2 raw test."
        ),
        **meta_common,
        "vocab_size": oracle.n_vocab,
        "add_bos_default": bool(lc.llama_vocab_get_add_bos(v)),
        "add_eos_default": bool(lc.llama_vocab_get_add_eos(v)),
        "special_ids": special_ids,
        "pieces": pieces,
        "pieces_note": "llama_token_to_piece(lstrip=0) bytes as hex, special=false / special=true",
        "add_bos_examples": add_bos_examples,
        "cases": out_cases,
    }


# ------------------------------------------------------------------------------------------------
# b. logits

LOGIT_PROMPTS = [
    ("short", "The quick brown fox jumps over the"),
    ("chat", None),  # MODELS[...]["chat_prompt"]
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n"),
    ("long", "The lighthouse at the northern end of the island was built in 1871 from granite "
             "quarried on the mainland. For more than a century its keepers recorded the weather "
             "twice a day, and their logbooks are now one of the longest continuous climate records "
             "in the region. In 1994 the light was automated, and"),
]


def fixed_token_ids(oracle):
    ids = list(M["fixed_ids"])
    for w in [" the", " The", ".", ",", " and"]:
        t = oracle.tokenize(w.encode(), False, False)
        if len(t) == 1 and t[0] not in ids:
            ids.append(t[0])
    ids.append(oracle.n_vocab - 1)
    k = 1000
    while len(ids) < 16:
        if k not in ids:
            ids.append(k)
        k += 1000
    return ids[:16]


def make_logits(oracle, meta_common):
    fixed = fixed_token_ids(oracle)
    prompts = []
    add_bos = bool(oracle.llama_cpp.llama_vocab_get_add_bos(oracle.vocab))
    for name, text in LOGIT_PROMPTS:
        text = M["chat_prompt"] if text is None else text
        ids = oracle.tokenize(text.encode(), add_special=True, parse_special=True)[:64]
        assert not add_bos or ids[0] == int(oracle.llama_cpp.llama_vocab_bos(oracle.vocab))
        logits = oracle.eval_fresh(ids)
        positions = [position_record(logits[p], fixed) for p in range(len(ids))]
        # greedy continuation, one token at a time on top of the KV cache
        gen = []
        steps = []
        row = logits[-1]
        for i in range(N_GREEDY):
            nxt = int(np.argmax(row))  # first maximum: lowest id on ties
            gen.append(nxt)
            if i == N_GREEDY - 1:
                break
            row = oracle.eval_next(nxt)
            steps.append(position_record(row, fixed))
        prompts.append({
            "name": name,
            "text": text,
            "ids": ids,
            "n_tokens": len(ids),
            "positions": positions,
            "greedy_ids": gen,
            "greedy_text_hex": oracle.detokenize(gen, False, False).hex(),
            "greedy_steps": steps,
        })
        print(f"logits: {name}: {len(ids)} tokens, greedy {gen[:8]}...", file=sys.stderr)
    return {
        "description": (
            "Logits from llama.cpp for 4 prompts (token ids starting with BOS), evaluated as one "
            "batch from position 0 on an empty KV cache. positions[p] describes the logits row "
            "produced at position p (the prediction of token p+1): top_ids/top_logits = the 20 "
            "largest logits, descending (ties: lower id first); logsumexp = log(sum(exp(logits))) "
            "over the full vocabulary, computed in float64 from the float32 logits; fixed_logits "
            "= logits of fixed_token_ids. greedy_ids: 32 tokens chosen by argmax (lowest id on "
            "ties, EOS not treated specially): greedy_ids[0] is argmax of the last prompt position; "
            "each next token is decoded one at a time on top of the KV cache, and greedy_steps[i] "
            "is the logits row after feeding greedy_ids[i] (31 steps; greedy_ids[i+1] is its "
            "argmax). Logits are float32 printed as the shortest round-trip decimal."
        ),
        **meta_common,
        "top_k": TOP_K,
        "n_greedy": N_GREEDY,
        "fixed_token_ids": fixed,
        **({} if add_bos else {"bos_note": (
            "This vocabulary does not add BOS (tokenizer.ggml.add_bos_token = false), so the prompts "
            "start with their first text token, as llama.cpp evaluates them.")}),
        "prompts": prompts,
    }


# ------------------------------------------------------------------------------------------------
# c. perplexity


def read_perplexity_text(text_path):
    """Exactly as llama-perplexity's -f: every byte of the file (no newline translation, CRLF kept),
    then a single trailing '\\n' removed if present."""
    with open(text_path, "rb") as fp:
        data = fp.read()
    stripped = False
    if data.endswith(b"\n"):
        data = data[:-1]
        stripped = True
    return data, stripped


def make_ppl(oracle, text_path, n_ctx, n_chunks_want, meta_common):
    data, stripped = read_perplexity_text(text_path)
    tokens = oracle.tokenize(data, add_special=True, parse_special=False)
    bos = int(oracle.llama_cpp.llama_vocab_bos(oracle.vocab))
    add_bos = bool(oracle.llama_cpp.llama_vocab_get_add_bos(oracle.vocab))
    n_chunk_max = len(tokens) // n_ctx
    n_chunk = min(n_chunks_want, n_chunk_max)
    first = n_ctx // 2
    chunks = []
    nll_total = 0.0
    count = 0
    chunk0_nll = None
    print(f"ppl: {len(tokens)} tokens, {n_chunk_max} chunks available, doing {n_chunk}", file=sys.stderr)
    for i in range(n_chunk):
        start = i * n_ctx
        orig = tokens[start: start + n_ctx]
        batch = list(orig)
        if add_bos:  # llama-perplexity: the chunk's first token becomes BOS only if the vocab adds one
            batch[0] = bos
        tc = time.time()
        logits = oracle.eval_fresh(batch)
        rows = logits[first: n_ctx - 1].astype(np.float64)  # positions first .. n_ctx-2
        targets = np.asarray(orig[first + 1: n_ctx])         # tokens first+1 .. n_ctx-1
        m = rows.max(axis=1)
        lse = m + np.log(np.exp(rows - m[:, None]).sum(axis=1))
        nll = lse - rows[np.arange(len(targets)), targets]
        s = float(nll.sum())
        nll_total += s
        count += len(targets)
        if i == 0:
            chunk0_nll = [f64(x) for x in nll]
        chunks.append({
            "index": i,
            "start": start,
            "n_scored": int(len(targets)),
            "nll_sum": s,
            "ppl_chunk": float(np.exp(s / len(targets))),
            "ppl_running": float(np.exp(nll_total / count)),
            "first_token_original": int(orig[0]),
            "token_id_sum": int(sum(orig)),
            "tokens_sha256": sha256_ids(orig),
        })
        print(f"ppl: [{i + 1}/{n_chunk}] {np.exp(nll_total / count):.4f} ({time.time() - tc:.1f}s)",
              file=sys.stderr)
    ppl = float(np.exp(nll_total / count))
    return {
        "description": (
            "Perplexity the way llama.cpp's llama-perplexity computes it (default mode, no stride): "
            "the whole file is read as bytes (CRLF kept), one trailing '\\n' is removed, the text is "
            "tokenized once with add_special=true (so one BOS at the very start) and "
            "parse_special=false; the token list is cut into consecutive chunks of n_ctx tokens "
            "(the remainder after the last full chunk is dropped); in each chunk the first token is "
            "replaced by BOS, the chunk is evaluated from position 0 on an empty KV cache, and only "
            "the logits at positions n_ctx/2 .. n_ctx-2 are scored, each against the next original "
            "token (n_ctx/2 - 1 = 255 tokens per chunk at ctx 512). NLL = logsumexp(logits) - "
            "logit[target] in float64. ppl = exp(sum of all chunk nll_sum / sum of n_scored). "
            "token_id_sum and tokens_sha256 (sha256 of the chunk's original int32 little-endian ids) "
            "let a tokenizer be checked chunk by chunk. chunk0_nll: the 255 per-token NLLs of chunk 0."
        ),
        **meta_common,
        "text_file": os.path.basename(text_path),
        "text_sha256": sha256_file(text_path),
        "text_bytes_file": os.path.getsize(text_path),
        "text_bytes_tokenized": len(data),
        "trailing_newline_stripped": stripped,
        "tokenize": {"add_special": True, "parse_special": False},
        "n_tokens_file": len(tokens),
        "tokens_sha256": sha256_ids(tokens),
        "first_tokens": tokens[:64],
        "last_tokens": tokens[-64:],
        "n_ctx": n_ctx,
        "first_scored_position": first,
        "n_chunks_available": n_chunk_max,
        "n_chunks": n_chunk,
        "n_scored_total": count,
        "nll_total": nll_total,
        "mean_nll": nll_total / count,
        "ppl": ppl,
        "chunks": chunks,
        "chunk0_nll": chunk0_nll,
        **({} if add_bos else {"bos_note": (
            "This vocabulary does not add BOS (tokenizer.ggml.add_bos_token = false): the text is "
            "tokenized without one and llama-perplexity leaves each chunk's first token as it is.")}),
        **({"chunk_tokens": [int(t) for t in tokens[: n_chunk * n_ctx]],
            "chunk_tokens_note": "the token ids of the n_chunks chunks, n_chunks * n_ctx ids in order "
                                 "(tokens[0 : n_chunks * n_ctx] of the file's tokens)"}
           if M["store_chunk_tokens"] else {}),
    }


# ------------------------------------------------------------------------------------------------
# the models: what differs between them (files, special tokens, prompts)

CHATML_SPECIAL_STRINGS = [
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\n",
    "<|endoftext|>Text after a literal endoftext",
    "text with <|im_end|> in the middle",
    "<repo_name>turboquant<file_sep>src/main.c<filename>",
    "<jupyter_start><jupyter_code>print(1)<jupyter_output>",
]

MODELS = {
    "gemma3": dict(
        model="gemma3-270m-q4_k_m.gguf",
        files=("tokenizer_ref.json", "gemma3_logits.json", "gemma3_ppl.json"),
        special_strings=[
            "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n",
            "<start_of_turn>user\n",
            "<bos>Text after a literal bos",
            "text with <eos> in the middle",
            "<pad><unk><mask> and <unused0>",
            "<start_of_image> [multimodal] <end_of_image>",
        ],
        extra_strings=[],
        piece_ids=[0, 1, 2, 3, 4, 5, 105, 106, 107, 108, 138, 238, 248, 255968, 255999, 256000, 236743],
        chat_prompt="<start_of_turn>user\nWrite a short poem about the sea.<end_of_turn>\n<start_of_turn>model\n",
        fixed_ids=[0, 1, 2, 3, 105, 106, 107, 108, 138, 236743],
        store_chunk_tokens=False,
    ),
    "smollm2": dict(
        model="smollm2-135m-instruct-q4_1.gguf",
        files=("smollm2_tokenizer.json", "smollm2_logits.json", "smollm2_ppl.json"),
        special_strings=CHATML_SPECIAL_STRINGS,
        # what byte-level BPE pre-tokenizers split differently: contractions, digit runs,
        # punctuation runs, whitespace before words, compatibility forms, combining marks
        extra_strings=[
            "I'm sure they're here, we've seen it, you'll see, don't worry, it's HE'S",
            "12345678901234567890 and 3.14159265358979",
            "a  b   c    d\n\n\n  e \t f",
            "!!!??? ... ,,, ;;; ---> <=> :)",
            "\ufb01ne \uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 e\u0301 \u00e9",
            "    def indented(self):\n        pass\n",
            "\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd \u0928\u092e\u0938\u094d\u0924\u0947",
        ],
        piece_ids=[0, 1, 2, 3, 16, 17, 28, 198, 216, 260, 355, 1000, 20000, 49151],
        chat_prompt=("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                     "Face<|im_end|>\n<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n"
                     "<|im_start|>assistant\n"),
        fixed_ids=[0, 1, 2, 3, 16, 17, 198, 216, 260, 28, 30],
        store_chunk_tokens=True,
    ),
}
M = MODELS["gemma3"]  # set by main from --model-name


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="ascii") as fp:
        json.dump(obj, fp, ensure_ascii=True, indent=None, separators=(",", ":"))
        fp.write("\n")
    os.replace(tmp, path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-name", choices=sorted(MODELS), default="gemma3")
    ap.add_argument("--model", default=None, help="the GGUF (default: models/ + the model's file)")
    ap.add_argument("--text", default=DEFAULT_TEXT)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only", default="tok,logits,ppl")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-extra-bufts", action="store_true",
                    help="load without llama.cpp's extra CPU buffer types (repack, AMX): needed "
                         "where they crash (CPUs with AMX)")
    args = ap.parse_args()
    what = set(args.only.split(","))
    global M
    M = MODELS[args.model_name]
    if args.model is None:
        args.model = os.path.join(ROOT, "models", M["model"])
    tok_file, logits_file, ppl_file = M["files"]

    model_path = os.path.realpath(args.model)
    oracle = Oracle(model_path, args.ctx, args.threads, args.no_extra_bufts)
    meta_common = {
        "generator": "scripts/reference/make_golden.py",
        "oracle": "llama.cpp via llama-cpp-python (CPU)",
        **oracle.info(),
        "model_file": os.path.basename(args.model),
        "model_sha256": sha256_file(model_path),
        "model_bytes": os.path.getsize(model_path),
    }
    os.makedirs(args.out, exist_ok=True)
    if "tok" in what:
        write_json(os.path.join(args.out, tok_file), make_tokenizer(oracle, args.text, meta_common))
    if "logits" in what:
        write_json(os.path.join(args.out, logits_file), make_logits(oracle, meta_common))
    if "ppl" in what:
        res = make_ppl(oracle, args.text, args.ctx, args.chunks, meta_common)
        write_json(os.path.join(args.out, ppl_file), res)
        print(f"PPL(ctx {args.ctx}, {res['n_chunks']} chunks) = {res['ppl']:.4f}; "
              f"{res['n_tokens_file']} tokens in the file", file=sys.stderr)


if __name__ == "__main__":
    main()
