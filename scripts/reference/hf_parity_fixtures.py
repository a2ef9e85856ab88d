#!/usr/bin/env python3
"""Tiny random models of each family specx runs, with HF transformers' own logits.

For each family (Llama 3 with llama3 RoPE scaling, Qwen3 with its q/k norms, Mistral with a
sliding window, Qwen2 with its biases) this builds a small model with transformers' modelling code on the CPU, float32, eager
attention; loads seeded random weights into it (numpy's generator, so the weights do not depend
on the torch version); and writes:

    FAMILY/config.json, model.safetensors   save_pretrained's HF directory
    FAMILY/model-f32.gguf (and -q8_0.gguf)  the same weights as llama.cpp's converter lays them
                                            out (gguf-py: names, the llama q/k permutation,
                                            rope_freqs.weight for llama3 scaling, Q8_0 blocks)
    FAMILY/tokenizer.json                   a character-level tokenizer (printable ASCII)
    FAMILY/logits.bin                       HF's logits at every position of `tokens`, f32 LE
    FAMILY/logits-q8_0.bin                  the same on the Q8_0 file's decoded weights
    FAMILY/reference.json                   tokens, HF's greedy continuation of a prefix, shapes,
                                            and a user turn under the chat template, rendered
    FAMILY/tokenizer_config.json            the chat template (Llama 3 and Qwen3), also in the GGUF
    manifest.json                           versions of torch, transformers and gguf; sha256s

The RoPE scaling uses a short original context (64) so that scaled frequencies matter within
the 192 positions compared. specx's test (crates/decoder/tests/hf_parity.rs) loads each
directory and GGUF and compares. Running this again with the versions in manifest.json rebuilds
every file byte for byte:

    python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install torch transformers gguf numpy
    /tmp/refenv/bin/python scripts/reference/hf_parity_fixtures.py crates/decoder/tests/fixtures/hf-parity
"""
import hashlib
import json
import math
import os
import sys

import numpy as np
import torch
import transformers
import gguf
from importlib.metadata import version

VOCAB = 98  # the character tokenizer below: tiny models then run over real prompt sets
SEQ = 192
PROMPT = 150  # greedy continuation from this prefix: positions past the original context
# (Mistral's from 80: its 128-position window is where specx stops)
NEW = 40

# Chat templates in the style of Llama 3's and Qwen3's (a system turn by default, `| trim`,
# Python's `.strip()`, `raise_exception`, `tools`, `is defined`), rendered by transformers'
# `apply_chat_template` for USER: specx's rendering of the HF directory's and the GGUF's must
# equal it.
LLAMA3_TEMPLATE = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "You are a helpful assistant." %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" + system_message + "<|eot_id|>" }}
{%- for message in messages %}
    {%- if message['role'] not in ['user', 'assistant'] %}
        {{- raise_exception('Conversation roles must be user or assistant') }}
    {%- endif %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'].strip() + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""
QWEN3_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\n# Tools\n' }}{{- tools | tojson }}{{- '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"""
USER = "  Write a haiku about\nspeculative decoding.  "

FAMILIES = {
    "llama3": dict(
        cls="LlamaForCausalLM", arch="llama", seed=11, quants=["q8_0"], template=LLAMA3_TEMPLATE,
        config=dict(
            model_type="llama", vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
            rope_theta=10000.0, max_position_embeddings=512, rms_norm_eps=1e-5,
            tie_word_embeddings=True, attention_bias=False, hidden_act="silu",
            rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                              high_freq_factor=4.0, original_max_position_embeddings=64),
            bos_token_id=None, eos_token_id=VOCAB - 1,
        ),
    ),
    "qwen3": dict(
        cls="Qwen3ForCausalLM", arch="qwen3", seed=22, quants=[], template=QWEN3_TEMPLATE,
        config=dict(
            model_type="qwen3", vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            rope_theta=1000000.0, max_position_embeddings=512, rms_norm_eps=1e-6,
            tie_word_embeddings=True, attention_bias=False, hidden_act="silu",
            use_sliding_window=False, bos_token_id=None, eos_token_id=VOCAB - 1,
        ),
    ),
    "mistral": dict(
        cls="MistralForCausalLM", arch="llama", seed=14, quants=[], prompt=80,
        config=dict(
            model_type="mistral", vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
            rope_theta=10000.0, max_position_embeddings=512, rms_norm_eps=1e-5,
            tie_word_embeddings=False, hidden_act="silu", sliding_window=128,
            bos_token_id=None, eos_token_id=VOCAB - 1,
        ),
    ),
    "qwen2": dict(
        cls="Qwen2ForCausalLM", arch="qwen2", seed=13, quants=[],
        config=dict(
            model_type="qwen2", vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            rope_theta=1000000.0, max_position_embeddings=512, rms_norm_eps=1e-6,
            tie_word_embeddings=False, hidden_act="silu", use_sliding_window=False,
            bos_token_id=None, eos_token_id=VOCAB - 1,
        ),
    ),
}


def random_state(model, seed, embed_scale):
    """Seeded weights: linear maps uniform in +-sqrt(3/fan_in), embeddings in +-embed_scale,
    norms near 1, biases in +-0.5: outputs of unit scale, so the logits are sharp enough to
    rank. A tied head scores a row against the embeddings, which a large embedding of the last
    token would win at every step: tied models take small embeddings, so that their greedy
    continuations move."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, p in sorted(model.state_dict().items()):
        shape = tuple(p.shape)
        u = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        if name.endswith("norm.weight"):
            v = 1.0 + 0.2 * u
        elif name.endswith(".bias"):
            v = 0.5 * u
        elif "embed_tokens" in name:
            v = u * np.float32(embed_scale)
        else:
            v = u * np.float32(math.sqrt(3.0 / shape[1]))
        state[name] = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32))
    return state


def permute(w, n_head):
    # llama.cpp's convert_hf_to_gguf.py, LlamaModel.permute (n_head already the kv count for k).
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg):
    # llama.cpp's convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors.
    s = cfg["rope_scaling"]
    base, dim = cfg["rope_theta"], cfg["head_dim"]
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor, low, high, old = s["factor"], s["low_freq_factor"], s["high_freq_factor"], s["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


LAYER_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def gguf_name(name):
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if name in fixed:
        return fixed[name]
    layer, rest = name[len("model.layers."):].split(".", 1)
    module, suffix = rest.rsplit(".", 1)
    return f"blk.{layer}.{LAYER_NAMES[module]}.{suffix}"


def write_gguf(path, arch, cfg, state, tokens, quant, template):
    w = gguf.GGUFWriter(path, arch)
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_eos_token_id(cfg["eos_token_id"])
    if template:
        w.add_bos_token_id(0)
        w.add_chat_template(template)
    if "rope_scaling" in cfg:
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(cfg))
    if cfg.get("sliding_window"):
        w.add_sliding_window(cfg["sliding_window"])
    for name, t in state.items():
        if name == "lm_head.weight" and cfg["tie_word_embeddings"]:
            continue
        t = t.numpy()
        if arch == "llama" and ".q_proj." in name:
            t = permute(t, n_head)
        elif arch == "llama" and ".k_proj." in name:
            t = permute(t, n_kv)
        t = np.ascontiguousarray(t, dtype=np.float32)
        if quant == "q8_0" and t.ndim == 2:
            qt = gguf.GGMLQuantizationType.Q8_0
            w.add_tensor(gguf_name(name), gguf.quants.quantize(t, qt), raw_dtype=qt)
        else:
            w.add_tensor(gguf_name(name), t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def char_tokens():
    """`<unk>` (0), the 95 printable ASCII characters (1-95), newline (96), `</s>` (97): the
    layout of specx's `synthetic::char_tokenizer_json`."""
    return ["<unk>"] + [chr(c) for c in range(32, 127)] + ["\n", "</s>"]


def char_tokenizer(tokens):
    vocab = {t: i for i, t in enumerate(tokens)}
    eos = {"id": 97, "content": "</s>", "single_word": False, "lstrip": False, "rstrip": False,
           "normalized": False, "special": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [eos], "normalizer": None,
            "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "[\\s\\S]"}, "behavior": "Isolated",
                              "invert": False},
            "post_processor": None, "decoder": None,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}


def run(model, ids, prompt):
    """HF's logits at every position of `ids`, and its greedy continuation of `ids[:prompt]`
    (a full forward a token: no cache to differ from)."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float().numpy()
        seq = list(ids[:prompt])
        for _ in range(NEW):
            seq.append(int(torch.argmax(model(torch.tensor([seq])).logits[0, -1])))
    return logits, seq[prompt:]


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def build(out, family, spec):
    d = os.path.join(out, family)
    os.makedirs(d, exist_ok=True)
    cfg = dict(spec["config"])
    config = transformers.AutoConfig.for_model(**cfg)
    torch.manual_seed(0)
    model = getattr(transformers, spec["cls"])(config).eval()
    model.config._attn_implementation = "eager"
    state = random_state(model, spec["seed"], 0.25 if cfg["tie_word_embeddings"] else 1.0)
    if cfg["tie_word_embeddings"]:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]  # one tensor: the same values
    model.load_state_dict(state)
    # The GGUF is written from what the model holds, not from what was handed to it.
    state = {k: v.detach().clone() for k, v in sorted(model.state_dict().items())}
    model.save_pretrained(d, safe_serialization=True)
    for extra in ["generation_config.json"]:
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    tokens = char_tokens()
    assert len(tokens) == VOCAB
    json.dump(char_tokenizer(tokens), open(os.path.join(d, "tokenizer.json"), "w"), indent=1)
    template = spec.get("template")
    write_gguf(os.path.join(d, "model-f32.gguf"), spec["arch"], cfg, state, tokens, None, template)
    for q in spec["quants"]:
        write_gguf(os.path.join(d, f"model-{q}.gguf"), spec["arch"], cfg, state, tokens, q, template)
    ids = np.random.default_rng(100 + spec["seed"]).integers(0, VOCAB, size=SEQ).tolist()
    prompt = spec.get("prompt", PROMPT)
    logits, greedy = run(model, ids, prompt)
    np.ascontiguousarray(logits, dtype="<f4").tofile(os.path.join(d, "logits.bin"))
    ref = {"tokens": ids, "positions": SEQ, "vocab": VOCAB, "prompt": prompt, "greedy": greedy}
    # HF on each quantized file's own weights (its matrices decoded): what specx's exact path
    # on that file must reproduce.
    for q in spec["quants"]:
        qt = gguf.GGMLQuantizationType[q.upper()]
        decoded = {k: torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(v.numpy(), qt), qt).copy())
                   if v.ndim == 2 else v for k, v in state.items()}
        model.load_state_dict(decoded)
        q_logits, q_greedy = run(model, ids, prompt)
        np.ascontiguousarray(q_logits, dtype="<f4").tofile(os.path.join(d, f"logits-{q}.bin"))
        ref[f"greedy-{q}"] = q_greedy
    if template:
        special = {"bos_token": "<unk>", "eos_token": "</s>"}
        json.dump({**special, "chat_template": template}, open(os.path.join(d, "tokenizer_config.json"), "w"), indent=1)
        tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"), **special)
        tok.chat_template = template
        messages = [{"role": "user", "content": USER}]
        ref["chat"] = {"user": USER, "rendered": tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)}
    json.dump(ref, open(os.path.join(d, "reference.json"), "w"))
    files = sorted(os.listdir(d))
    return {f: sha256(os.path.join(d, f)) for f in files}


def main():
    out = sys.argv[1]
    torch.set_num_threads(1)  # one summation order for the reference logits
    manifest = {
        "generator": "scripts/reference/hf_parity_fixtures.py",
        "torch": torch.__version__, "transformers": transformers.__version__, "gguf": version("gguf"),
        "numpy": np.__version__, "families": {},
    }
    for family, spec in FAMILIES.items():
        manifest["families"][family] = build(out, family, spec)
        print(f"{family}: {len(manifest['families'][family])} files")
    json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
