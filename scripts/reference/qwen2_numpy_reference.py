#!/usr/bin/env python3
"""Independent reference logits for specx's parity test.

A from-scratch Qwen2 forward pass in float64 numpy, reading the GGUF with llama.cpp's own
`gguf` Python package (its reader and its dequantizers), tokenizing with HF `tokenizers`.
Nothing here shares code with specx. It writes a small JSON fixture: for every position of a
fixed prompt, the top-32 logits, the logits of 64 fixed probe ids and the log-sum-exp.

With --q8 every product with a quantized weight first rounds its activations to 8 bits as
llama.cpp's integer dot products do (per 256 values for the K-quants, Q8_K; per 32 for the
32-wide formats, Q8_0; scale max|x|/127, round half to even), still in float64: the numbers
specx's `--weights q8` should give, up to rounding ties.

Run it in a throwaway virtualenv, outside the repository:
    python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install numpy gguf tokenizers
    /tmp/refenv/bin/python scripts/reference/qwen2_numpy_reference.py \
        --gguf ~/.cache/specx/models/qwen2.5-coder-0.5b-instruct/model.gguf \
        --tokenizer ~/.cache/specx/models/qwen2.5-coder-0.5b-instruct/tokenizer.json \
        --out crates/decoder/tests/fixtures/qwen2.5-coder-0.5b-reference.json
    (and the same for qwen2.5-coder-1.5b-instruct, each with and without --q8, the output
    named qwen2.5-coder-1.5b-reference.json / -q8-reference.json)
"""
import argparse
import hashlib
import json

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
from tokenizers import Tokenizer

PROMPT = "<|im_start|>user\nWrite a function that reverses a linked list.<|im_end|>\n<|im_start|>assistant\n"
TOP = 32
PROBES = 64


def field(reader, key):
    return reader.fields[key].contents()


K_QUANTS = {"Q4_K", "Q5_K", "Q6_K"}
BLOCK32 = {"Q4_0", "Q5_0", "Q8_0"}


def load(reader):
    tensors, types = {}, {}
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))  # ggml order -> row-major
        arr = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(shape)
        tensors[t.name] = arr
        types[t.name] = t.tensor_type.name
    return tensors, types


def round8(x, block):
    """x rounded to 8 bits per `block` values: scale max|x|/127, round half to even."""
    xb = x.reshape(x.shape[0], -1, block)
    d = np.abs(xb).max(-1, keepdims=True) / 127.0
    q = np.round(np.divide(xb, d, out=np.zeros_like(xb), where=d > 0))
    return (q * d).reshape(x.shape)


class Weights:
    """The model's tensors; `mm(x, name)` is x @ W.T with x rounded as the weight's integer
    kernel rounds it when `q8` is set."""

    def __init__(self, tensors, types, q8):
        self.t, self.types, self.q8 = tensors, types, q8

    def __getitem__(self, name):
        return self.t[name]

    def get(self, name, default):
        return self.t.get(name, default)

    def mm(self, x, name):
        ty = self.types[name]
        if self.q8 and ty in K_QUANTS:
            x = round8(x, 256)
        elif self.q8 and ty in BLOCK32:
            x = round8(x, 32)
        return x @ self.t[name].T


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, pos, theta):
    # x: [heads, n, d]; rotate-half (NEOX) layout, as llama.cpp uses for qwen2.
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang), np.cos(ang)], -1)
    sin = np.concatenate([np.sin(ang), np.sin(ang)], -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + np.concatenate([-x2, x1], -1) * sin


def forward(t, ids, cfg):
    n = len(ids)
    x = t["token_embd.weight"][ids]
    pos = np.arange(n, dtype=np.float64)
    H, KV, d = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(cfg["layers"]):
        p = f"blk.{l}."
        h = rmsnorm(x, t[p + "attn_norm.weight"], cfg["eps"])
        q = t.mm(h, p + "attn_q.weight") + t.get(p + "attn_q.bias", 0)
        k = t.mm(h, p + "attn_k.weight") + t.get(p + "attn_k.bias", 0)
        v = t.mm(h, p + "attn_v.weight") + t.get(p + "attn_v.bias", 0)
        q = rope(q.reshape(n, H, d).transpose(1, 0, 2), pos, cfg["theta"])
        k = rope(k.reshape(n, KV, d).transpose(1, 0, 2), pos, cfg["theta"])
        v = v.reshape(n, KV, d).transpose(1, 0, 2)
        k = np.repeat(k, H // KV, axis=0)
        v = np.repeat(v, H // KV, axis=0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(d) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(n, H * d)
        x = x + t.mm(a, p + "attn_output.weight")
        h = rmsnorm(x, t[p + "ffn_norm.weight"], cfg["eps"])
        g = t.mm(h, p + "ffn_gate.weight")
        u = t.mm(h, p + "ffn_up.weight")
        x = x + t.mm((g / (1 + np.exp(-g))) * u, p + "ffn_down.weight")
    x = rmsnorm(x, t["output_norm.weight"], cfg["eps"])
    return t.mm(x, "output.weight" if "output.weight" in t.t else "token_embd.weight")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--q8", action="store_true", help="round activations to 8 bits before each quantized weight")
    a = ap.parse_args()
    sha = hashlib.sha256(open(a.gguf, "rb").read()).hexdigest()
    r = GGUFReader(a.gguf)
    arch = field(r, "general.architecture")
    cfg = {
        "heads": int(field(r, f"{arch}.attention.head_count")),
        "kv_heads": int(field(r, f"{arch}.attention.head_count_kv")),
        "layers": int(field(r, f"{arch}.block_count")),
        "eps": float(field(r, f"{arch}.attention.layer_norm_rms_epsilon")),
        "theta": float(field(r, f"{arch}.rope.freq_base")),
    }
    cfg["head_dim"] = int(field(r, f"{arch}.embedding_length")) // cfg["heads"]
    ids = Tokenizer.from_file(a.tokenizer).encode(PROMPT, add_special_tokens=False).ids
    t = Weights(*load(r), a.q8)
    logits = forward(t, np.array(ids), cfg)
    vocab = logits.shape[1]
    probes = [(i * 2371 + 17) % vocab for i in range(PROBES)]
    positions = []
    for row in logits:
        top = np.argsort(-row)[:TOP]
        m = row.max()
        positions.append({
            "top_ids": [int(i) for i in top],
            "top_logits": [float(row[i]) for i in top],
            "probe_logits": [float(row[i]) for i in probes],
            "logsumexp": float(m + np.log(np.exp(row - m).sum())),
        })
    out = {
        "generator": "scripts/reference/qwen2_numpy_reference.py (float64 numpy, gguf-py dequantization"
        + (", activations rounded to 8 bits as q8)" if a.q8 else ")"),
        "model_sha256": sha,
        "prompt": PROMPT,
        "token_ids": [int(i) for i in ids],
        "probe_ids": probes,
        "positions": positions,
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {a.out}: {len(ids)} positions, argmax per position {[p['top_ids'][0] for p in positions]}")


if __name__ == "__main__":
    main()
