#!/usr/bin/env python3
"""The PyTorch side of bench/bench_attention.c: torch.nn.functional.scaled_dot_product_attention on bf16
tensors [B, 56, S, 128] (no mask), forward and backward (dq, dk, dv from a bf16 dout), for each backend
PyTorch offers here (cuDNN, flash), CUDA events, median of --reps after --warmup.

  python3 sdpa_bench.py [--reps 10] [--warmup 3] --json FILE
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SS = [12, 925, 1133, 4253, 8349]
BS = [1, 4]
H, D = 56, 128


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def time_it(fn, reps, warmup):
    ts = []
    for r in range(warmup + reps):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        if r >= warmup:
            ts.append(e0.elapsed_time(e1))
    return median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    rows = []
    for B in BS:
        for S in SS:
            g = torch.Generator(device="cuda").manual_seed(S * 10 + B)
            q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
            do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
            for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                try:
                    with sdpa_kernel([be]):
                        fwd = time_it(lambda: F.scaled_dot_product_attention(q, k, v), a.reps, a.warmup)
                        qq, kk, vv = (t.detach().requires_grad_(True) for t in (q, k, v))
                        out = F.scaled_dot_product_attention(qq, kk, vv)

                        def bwd():
                            torch.autograd.grad(out, (qq, kk, vv), do, retain_graph=True)

                        bw = time_it(bwd, a.reps, a.warmup)
                    rows.append({"S": S, "B": B, "backend": name, "forward_ms": fwd, "backward_ms": bw})
                    print(f"S {S:5d} B {B} {name:5s} forward {fwd:8.4f} ms backward {bw:8.4f} ms", flush=True)
                except RuntimeError as e:  # backend not available for this shape here
                    rows.append({"S": S, "B": B, "backend": name, "error": str(e).splitlines()[0]})
                    print(f"S {S:5d} B {B} {name:5s} unavailable: {str(e).splitlines()[0]}", flush=True)
    with open(a.json, "w") as f:
        json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
