#!/usr/bin/env python3
"""The GPU check's anchor: HF transformers (PyTorch, eager attention, bf16) on the same
random-weight models specx measures (DIR/draft, DIR/target, written by `specx gpu-check synth`).

Measured as specx measures them (crates/bench/src/runtime.rs, crates/eval/src/profile.rs): prefill of a
`--prompt-tokens` prompt; greedy decode of `--decode-tokens` tokens one at a time with the KV
cache; and the call-cost curve, a forward of r = 1..`--max-rows` new rows after a
`--context`-token cache, the cache cropped back after each (median of `--reps`). Every timing
synchronizes the GPU. Writes JSON; a model that fails is recorded with its error.
"""
import argparse
import json
import statistics
import sys
import time
import traceback


def timed(torch, fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


def measure(torch, model, args):
    dev = model.device
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, min(vocab, 150000), (1, args.prompt_tokens), generator=gen).to(dev)
    from transformers import DynamicCache

    with torch.inference_mode():
        # Warm-up: kernels, allocator.
        for _ in range(2):
            model(prompt, past_key_values=DynamicCache(), use_cache=True)
        prefills = []
        for _ in range(args.reps):
            _, s = timed(torch, lambda: model(prompt, past_key_values=DynamicCache(), use_cache=True))
            prefills.append(s)
        # Greedy decode after the prompt.
        cache = DynamicCache()
        out = model(prompt, past_key_values=cache, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(args.decode_tokens):
            out = model(nxt, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
            nxt.item()  # the host reads the token, as a decoder does
        torch.cuda.synchronize()
        decode_s = time.perf_counter() - t
        # Call-cost curve after a context of args.context tokens.
        ctx_ids = torch.randint(0, min(vocab, 150000), (1, args.context + args.max_rows), generator=gen).to(dev)
        cache = DynamicCache()
        model(ctx_ids[:, : args.context], past_key_values=cache, use_cache=True)
        curve = []
        for r in range(1, args.max_rows + 1):
            reps = []
            for _ in range(args.reps):
                rows = ctx_ids[:, args.context : args.context + r]
                out, s = timed(torch, lambda: model(rows, past_key_values=cache, use_cache=True).logits[:, -1].float().cpu())
                cache.crop(args.context)
                reps.append(s)
            curve.append(statistics.median(reps))
    return {
        "prefill_tokens": args.prompt_tokens,
        "prefill_tokens_per_sec": args.prompt_tokens / statistics.median(prefills),
        "decode_tokens": args.decode_tokens,
        "decode_tokens_per_sec": args.decode_tokens / decode_s,
        "call_rows": list(range(1, args.max_rows + 1)),
        "call_secs": curve,
    }


def measure_compiled(torch, model, args):
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, min(vocab, 150000), (1, args.prompt_tokens), generator=gen).to(model.device)
    model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)

    def run(n):
        kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, cache_implementation="static")
        return timed(torch, lambda: model.generate(prompt, **kw))[1]

    with torch.inference_mode():
        for _ in range(2):  # compiles, then captures the graphs
            run(args.decode_tokens)
        one = statistics.median(run(1) for _ in range(args.reps))
        full = statistics.median(run(args.decode_tokens) for _ in range(args.reps))
    return {
        "prompt_tokens": args.prompt_tokens,
        "decode_tokens": args.decode_tokens,
        "decode_tokens_per_sec": (args.decode_tokens - 1) / (full - one),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", required=True, help="directory with draft/ and target/")
    p.add_argument("--out", required=True)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--max-rows", type=int, default=21)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--compiled", action="store_true", help="static cache and torch.compile, decode only")
    p.add_argument("--roles", default="draft,target", help="which of the models to measure")
    args = p.parse_args()

    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM
    except ImportError as e:  # the report then says why there is no anchor
        with open(args.out, "w") as f:
            json.dump({"runtime": "HF transformers", "error": f"{type(e).__name__}: {e}", "models": []}, f, indent=2)
        raise

    attn = "sdpa" if args.compiled else "eager"
    report = {
        "runtime": "HF transformers",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "dtype": args.dtype,
        "attn_implementation": attn,
        "compiled": args.compiled,
        "context": args.context,
        "models": [],
    }
    if not torch.cuda.is_available():
        report["error"] = "torch sees no CUDA device"
    else:
        for role in args.roles.split(","):
            entry = {"role": role, "path": f"{args.models}/{role}"}
            try:
                model = AutoModelForCausalLM.from_pretrained(entry["path"], torch_dtype=getattr(torch, args.dtype), attn_implementation=attn).to("cuda").eval()
                entry.update((measure_compiled if args.compiled else measure)(torch, model, args))
                del model
                torch.cuda.empty_cache()
            except Exception as e:  # recorded, so the report says why there is no figure
                entry["error"] = f"{type(e).__name__}: {e}"
                traceback.print_exc()
            report["models"].append(entry)
            print(json.dumps({k: v for k, v in entry.items() if k != "call_secs"}), file=sys.stderr)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
