#!/usr/bin/env python3
"""Dump the tokenizer vocabulary of a GGUF model to a small binary file (dev-only helper).

The tokenizer tests read it through the environment variable TQ_VOCAB_DUMP until they can
get the vocab through the engine's own GGUF reader.

Usage: .venv/bin/python scripts/dump_vocab.py models/gemma3-270m-q4_k_m.gguf /tmp/gemma3.vocab

Format (all integers little-endian):
    magic            8 bytes  b"TQVOCAB1"
    n_vocab          u32
    bos, eos, unk, pad  i32 each, -1 = absent
    add_bos, add_eos, add_space_prefix, reserved   u8 each
    model_len        u32, then model_len bytes (tokenizer.ggml.model, e.g. "llama")
    n_vocab times:   u32 len, len bytes of token text, f32 score, i32 token type
add_space_prefix is written as 1 when the GGUF lacks the key (llama.cpp's SPM default).
"""
import struct
import sys

import gguf


def field_value(reader, key, default):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: dump_vocab.py MODEL.gguf OUT.vocab")
    r = gguf.GGUFReader(sys.argv[1])
    tf = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(tf.parts[i]) for i in tf.data]
    n = len(tokens)
    scores = field_value(r, "tokenizer.ggml.scores", [0.0] * n)
    types = field_value(r, "tokenizer.ggml.token_type", [1] * n)
    model = str(field_value(r, "tokenizer.ggml.model", "llama")).encode()

    def ident(key):
        v = field_value(r, key, -1)
        return int(v)

    out = bytearray(b"TQVOCAB1")
    out += struct.pack("<I", n)
    out += struct.pack("<4i", ident("tokenizer.ggml.bos_token_id"),
                       ident("tokenizer.ggml.eos_token_id"),
                       ident("tokenizer.ggml.unknown_token_id"),
                       ident("tokenizer.ggml.padding_token_id"))
    out += struct.pack("<4B", int(bool(field_value(r, "tokenizer.ggml.add_bos_token", True))),
                       int(bool(field_value(r, "tokenizer.ggml.add_eos_token", False))),
                       int(bool(field_value(r, "tokenizer.ggml.add_space_prefix", True))), 0)
    out += struct.pack("<I", len(model)) + model
    for t, s, ty in zip(tokens, scores, types):
        out += struct.pack("<I", len(t)) + t + struct.pack("<fi", float(s), int(ty))
    with open(sys.argv[2], "wb") as f:
        f.write(out)
    print(f"{sys.argv[2]}: {n} tokens, model {model.decode()}, {len(out)} bytes")


if __name__ == "__main__":
    main()
