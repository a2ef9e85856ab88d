#!/usr/bin/env python3
"""The GPU check's memory bound: the GPU's peak read bandwidth from its memory clock and bus
width (PyTorch's device properties: two transfers per clock, bus width in bits), and a
device-to-device copy of --mib MiB timed with PyTorch (read + write bytes over the median of
--reps copies) as what a kernel can reach. Writes JSON; what cannot be read is null, with why.
"""
import argparse
import json
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="JSON output")
    ap.add_argument("--mib", type=int, default=1024, help="size of the copied buffer, MiB")
    ap.add_argument("--reps", type=int, default=10, help="timed copies (the median is kept)")
    a = ap.parse_args()
    out = {"device": None, "peak_gb_s": None, "peak_source": None, "copy_gb_s": None, "error": None}
    try:
        import torch

        p = torch.cuda.get_device_properties(0)
        out["device"] = p.name
        clock_khz, bus_bits = getattr(p, "memory_clock_rate", None), getattr(p, "memory_bus_width", None)
        if clock_khz and bus_bits:
            out["peak_gb_s"] = clock_khz * 1e3 * 2 * bus_bits / 8 / 1e9
            out["peak_source"] = f"memory clock {clock_khz / 1e3:.0f} MHz x 2 x {bus_bits}-bit bus"
        else:
            out["peak_source"] = f"this PyTorch ({torch.__version__}) reports no memory clock or bus width"
        n = a.mib * 2**20 // 4
        src = torch.empty(n, dtype=torch.float32, device="cuda")
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        times = []
        for _ in range(a.reps):
            torch.cuda.synchronize()
            t = time.perf_counter()
            dst.copy_(src)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        out["copy_gb_s"] = 2 * n * 4 / statistics.median(times) / 1e9
    except Exception as e:  # noqa: BLE001 - the report says why there is no bound
        out["error"] = f"{type(e).__name__}: {e}"
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
