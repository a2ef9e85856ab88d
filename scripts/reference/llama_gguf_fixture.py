#!/usr/bin/env python3
"""An independent GGUF of the tiny llama model, for specx's GGUF reader test.

llama.cpp's converter permutes the rows of llama's q and k projections (its RoPE pairs
neighbouring values, HF's rotates halves) and names tensors its own way; specx's reader must
undo both. specx's own writer and reader could agree on a wrong permutation, so this script
writes the GGUF with llama.cpp's `gguf` Python package and the permutation as llama.cpp's
convert_hf_to_gguf.py defines it (`LlamaModel.permute`), from the HF directory written by
`cargo run --release --example tiny_llama_hf -p specx-decoder -- DIR`. The test loads both
and requires the same logits. Nothing here shares code with specx.

    python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install numpy gguf
    cargo run --release --example tiny_llama_hf -p specx-decoder -- /tmp/tiny-llama
    /tmp/refenv/bin/python scripts/reference/llama_gguf_fixture.py /tmp/tiny-llama \
        crates/decoder/tests/fixtures/tiny-llama-gqa.gguf
"""
import hashlib
import json
import struct
import sys

import numpy as np
from gguf import GGUFWriter


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", t["dtype"]
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a : 8 + n + b], dtype="<f4").reshape(t["shape"])
    return out, hashlib.sha256(data).hexdigest()


def permute(w, n_head, n_head_kv):
    # convert_hf_to_gguf.py, LlamaModel.permute.
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    src, out = sys.argv[1], sys.argv[2]
    cfg = json.load(open(f"{src}/config.json"))
    tensors, sha = read_safetensors(f"{src}/model.safetensors")
    vocab = json.load(open(f"{src}/tokenizer.json"))["model"]["vocab"]
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = GGUFWriter(out, "llama")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_token_list([t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])])
    w.add_eos_token_id(cfg["eos_token_id"])
    names = {
        "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    }
    for name, t in tensors.items():
        if name == "model.embed_tokens.weight":
            gname = "token_embd.weight"
        elif name == "model.norm.weight":
            gname = "output_norm.weight"
        else:
            layer, rest = name[len("model.layers."):].split(".", 1)
            part = rest.rsplit(".", 1)[0]
            gname = f"blk.{layer}.{names[part]}.weight"
            if part == "self_attn.q_proj":
                t = permute(t, n_head, n_head)
            elif part == "self_attn.k_proj":
                t = permute(t, n_head, n_kv)
        w.add_tensor(gname, np.ascontiguousarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    json.dump({"source_safetensors_sha256": sha, "generator": "scripts/reference/llama_gguf_fixture.py (gguf-py GGUFWriter)"}, open(out + ".json", "w"), indent=1)
    print(f"wrote {out} from {src} (model.safetensors sha256 {sha[:12]})")


if __name__ == "__main__":
    main()
