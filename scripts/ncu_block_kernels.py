#!/usr/bin/env python3
"""Kernel times of the block forwards and backwards in an ncu CSV of bench_gpu_block.

    ncu --metrics gpu__time_duration.sum --csv --launch-count 500 \
        build/bench_gpu_block --seqs 8349 --reps 1 --warmup 0 --profile-reps 1 --weight-grads bf16 > ncu.csv
    python3 scripts/ncu_block_kernels.py ncu.csv [more.csv ...]

A backward is the run of launches from the one after a residual_forward_vec_kernel (the forward's last node) to the
next mul_silu_grad_kernel (the timestep path, the backward's last); the forward before it runs from the last
silu_to_bf16_kernel (the AdaLN projection's input, the forward's first node) after the previous backward to the
backward's start (none is printed where no such launch is found). Each forward and backward is printed in launch
order, numbered from 1, with its launches summed per kernel name: total, GEMM (wg_gemm), attention (attn_*) and the
rest, then the rest per kernel, largest first.  bench_gpu_block runs its batch sizes in order (B = 1, then B = 4), so with the options above
backwards 1-2 are B = 1's and 3-4 are B = 4's.  ncu serialises the launches and flushes the caches before each, so
the sums are the kernels' own times, not the block's wall time.
Exit status: 0; 2 when a file cannot be read or holds no backward.
"""
import collections
import csv
import re
import signal
import sys


def short(name):
    if "wg_gemm" in name:
        m = re.search(r"cfg<[^>]*>", name)
        return m.group(0) if m else "wg_gemm"
    name = re.sub(r"\(.*", "", name)
    name = re.sub(r"<.*", "", name)
    return name.replace("void ", "").replace("wg::", "")


def backward_segments(names):
    """(start, end) of every backward: after the last residual_forward before a mul_silu_grad, to it."""
    segs, start = [], None
    for i, n in enumerate(names):
        if n == "residual_forward_vec_kernel":
            start = i + 1
        elif n == "mul_silu_grad_kernel" and start is not None:
            segs.append((start, i + 1))
            start = None
    return segs


def forward_start(names, seg_start, prev_end):
    """The index of the forward before the backward starting at seg_start, or None."""
    for i in range(seg_start - 1, prev_end - 1, -1):
        if names[i] == "silu_to_bf16_kernel":
            return i
    return None


def report(path, kind, number, names, us, a, b):
    agg, cnt = collections.defaultdict(float), collections.Counter()
    for k in range(a, b):
        agg[names[k]] += us[k]
        cnt[names[k]] += 1
    total = sum(agg.values())
    gemm = sum(v for k, v in agg.items() if k.startswith("cfg<"))
    attn = sum(v for k, v in agg.items() if k.startswith("attn"))
    print(f"{path}: {kind} {number}: {b - a} launches, {total:.0f} us: GEMM {gemm:.0f}, "
          f"attention {attn:.0f}, rest {total - gemm - attn:.0f}")
    for k, v in sorted(agg.items(), key=lambda x: -x[1]):
        if not k.startswith("cfg<") and not k.startswith("attn"):
            print(f"    {k:40s} {cnt[k]:3d} x  {v:9.1f} us")


def main(paths):
    status = 0
    for path in paths:
        try:
            with open(path, newline="") as f:
                rows = [r for r in csv.reader(f) if len(r) > 14 and r[12] == "gpu__time_duration.sum"]
        except OSError as e:
            print(f"ncu_block_kernels: {path}: {e.strerror}", file=sys.stderr)
            status = 2
            continue
        names = [short(r[4]) for r in rows]
        us = [float(r[14].replace(",", "")) / 1000.0 for r in rows]
        segs = backward_segments(names)
        if not segs:
            print(f"ncu_block_kernels: {path}: no block backward found", file=sys.stderr)
            status = 2
            continue
        prev_end = 0
        for number, (a, b) in enumerate(segs, 1):
            f = forward_start(names, a, prev_end)
            if f is not None:
                report(path, "forward", number, names, us, f, a)
            report(path, "backward", number, names, us, a, b)
            prev_end = b
    return status


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
