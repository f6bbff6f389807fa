#!/usr/bin/env python3
"""Combine the three sides of the block benchmark into bench_block.json (bench/provider/run_gpu_bench.sh runs it):
strict_S<S>.json (bench_gpu_block, one process per S; or one strict.json for all S), provider.json
(h3_block_provider.py) and provider_det.json (the same with --deterministic), all in OUT.  Then the PNG plot (block_plot.py) and the Markdown table (block_table.py, printed).

  python3 bench/provider/block_combine.py PARTS --meta meta.json [--dest OUT] [--plot bench_block.png]

PARTS holds the sides' JSON; bench_block.json and the plot go to --dest (default PARTS).

`table` has one row per (S, B, phase) that the strict side measured: S, B, phase, strict_ms, provider_ms, ratio
(strict / provider), provider_det_ms, ratio_det (strict / deterministic provider), strict_tflops, provider_tflops,
provider_det_tflops; a provider figure that is missing or whose phase raised is null, with the reason in
provider_error / provider_det_error.  Phases: forward (the provider under no_grad), backward, forward+backward, and
"forward (provider with autograd recording)" (the strict forward against the provider's training forward).
`repeat_and_batch` has one entry per (S, B): the weight gradients of the first and the last timed run compared
bit for bit on each side, and for B > 1 item 0 against B = 1 at the same S.  Exit status 0 when the table has rows.
"""

import argparse
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import block_plot  # noqa: E402
import block_table  # noqa: E402

# (phase, strict key, provider key)
PHASES = (
    ("forward", "forward_ms", "forward_ms"),
    ("backward", "backward_ms", "backward_ms"),
    ("forward+backward", "fwd_bwd_ms", "fwd_bwd_ms"),
    ("forward (provider with autograd recording)", "forward_ms", "forward_grad_ms"),
)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"skipped": f"{os.path.basename(path)} not written ({e})"}


def load_strict(out, expected=None):
    """strict.json, or the per-S files merged into one document of the same shape (batches in S order); an S of
    `expected` without a file is listed under not_measured."""
    files = glob.glob(os.path.join(out, "strict_S*.json"))
    if not files:
        return load(os.path.join(out, "strict.json"))
    files.sort(key=lambda f: int(re.search(r"strict_S(\d+)\.json$", f).group(1)))
    parts = [(int(re.search(r"strict_S(\d+)\.json$", f).group(1)), load(f)) for f in files]
    good = [(S, d) for S, d in parts if "skipped" not in d]
    if not good:
        return parts[0][1]
    merged = {k: v for k, v in good[0][1].items() if k not in ("batches", "seqs", "complete")}
    merged["seqs"] = [S for S, _ in good]
    merged["processes"] = "one bench_gpu_block process per S"
    merged["not_measured"] = {str(S): d["skipped"] for S, d in parts if "skipped" in d}
    for S in expected or []:
        if S not in [p for p, _ in parts]:
            merged["not_measured"][str(S)] = "no JSON written (stopped or failed before the end of this S: bench.log)"
    merged["complete"] = all(d.get("complete", False) for _, d in good) and not merged["not_measured"]
    merged["batches"] = [e for _, d in good for e in d.get("batches", [])]
    return merged


def by_sb(side):
    """{(S, B): entry}; entries without S (a single-S run of an older version) take the geometry's S."""
    out = {}
    if "skipped" in side:
        return out
    s0 = (side.get("geometry") or {}).get("S")
    for e in side.get("batches", []):
        out[(e.get("S", s0), e["B"])] = e
    return out


def figure(entry, key):
    """(median ms, tflops, error text) of one phase of a provider entry."""
    if entry is None:
        return None, None, "not measured"
    v = entry.get(key)
    if not isinstance(v, dict):
        return None, None, "not measured"
    if "error" in v:
        return None, None, v["error"] + (f" (raised in the {v['raised_in']})" if v.get("raised_in") else "")
    return v.get("median"), v.get("tflops"), None


def ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else None


def combine(strict, prov, det):
    S_, P_, D_ = by_sb(strict), by_sb(prov), by_sb(det)
    rows, side, sdpa = [], [], []
    for (S, B), s in S_.items():
        p, d = P_.get((S, B)), D_.get((S, B))
        for phase, skey, pkey in PHASES:
            st = s[skey]["median"]
            pt, ptf, perr = figure(p, pkey)
            dt, dtf, derr = figure(d, pkey)
            row = {"S": S, "B": B, "phase": phase, "strict_ms": st, "provider_ms": pt, "ratio": ratio(st, pt),
                   "provider_det_ms": dt, "ratio_det": ratio(st, dt), "strict_tflops": s[skey]["tflops"],
                   "provider_tflops": ptf, "provider_det_tflops": dtf}
            if perr:
                row["provider_error"] = perr
            if derr:
                row["provider_det_error"] = derr
            rows.append(row)
        e = {"S": S, "B": B,
             "weight_grad_elements": s["repeat"]["weight_grad_elements"],
             "strict_weight_grad_differ": s["repeat"]["weight_grad_differ"],
             "strict_output_differ": s["repeat"]["output_differ"]}
        for name, pe in (("provider", p), ("provider_det", d)):
            rep = (pe or {}).get("repeat")
            if rep:
                e[f"{name}_weight_grad_differ"] = rep["weight_grad_differ"]
                e[f"{name}_weight_grad_elements"] = rep["weight_grad_elements"]
                e[f"{name}_output_differ"] = rep["output_differ"]
                e[f"{name}_grad_x_differ"] = rep["grad_x_differ"]
        if "batch_invariance" in s:
            e["item0_elements"] = s["batch_invariance"]["item0_vs_B1_elements"]
            e["strict_item0_output_differ"] = s["batch_invariance"]["output_differ"]
            e["strict_item0_dx_differ"] = s["batch_invariance"]["grad_x_differ"]
            for name, pe in (("provider", p), ("provider_det", d)):
                bi = (pe or {}).get("batch_invariance")
                if bi:
                    e[f"{name}_item0_output_differ"] = bi["output_differ"]
                    e[f"{name}_item0_dx_differ"] = bi["grad_x_differ"]
        side.append(e)
        k = {"S": S, "B": B}
        for name, pe in (("provider", p), ("provider_det", d)):
            if pe:
                k[f"{name}_choice"] = pe.get("sdpa_choice")
                k[f"{name}_attention_kernels"] = [a["kernel"] for a in (pe.get("kernels") or {}).get("attention", [])]
                if pe.get("warnings"):
                    k[f"{name}_warnings"] = pe["warnings"]
        sdpa.append(k)
    complete = bool(rows) and all(r["ratio"] is not None and r["ratio_det"] is not None for r in rows) and all(
        x.get("complete", False) for x in (strict, prov, det))
    return rows, side, sdpa, complete


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the folder with strict_S<S>.json (or strict.json), provider.json, provider_det.json")
    ap.add_argument("--dest", help="where bench_block.json and the plot go (default: that folder)")
    ap.add_argument("--meta", help="JSON with the run's environment (written by run_gpu_bench.sh)")
    ap.add_argument("--plot", help="PNG to draw (a file name in OUT)")
    ap.add_argument("--seqs", help="the S values asked for, comma-separated (to name the ones without a result)")
    a = ap.parse_args()
    dest = a.dest or a.out
    meta = load(a.meta) if a.meta else {}
    if "skipped" in meta:
        meta = {}
    strict = load_strict(a.out, [int(t) for t in a.seqs.split(",")] if a.seqs else None)
    prov = load(os.path.join(a.out, "provider.json"))
    det = load(os.path.join(a.out, "provider_det.json"))
    rows, side, sdpa, complete = combine(strict, prov, det)
    seqs = strict.get("seqs") or prov.get("seqs") or []
    summary = {
        "what": "one MiniMax-H3 block at release geometry, strict CUDA (bench/bench_gpu_block.c) against plain PyTorch "
                "bf16 (bench/provider/h3_block_provider.py) in its ordinary mode and in its deterministic mode "
                "(torch.use_deterministic_algorithms(True), CUBLAS_WORKSPACE_CONFIG=:4096:8), side by side in one run; "
                "ratio = strict time / provider time, ratio_det = strict time / deterministic provider time",
        "command": "OUT=<dir> bash bench/provider/run_gpu_bench.sh",
    }
    summary.update(meta)
    summary["toolchain"] = dict(summary.get("toolchain", {}), torch=prov.get("torch") or det.get("torch"),
                                torch_cuda=prov.get("cuda") or det.get("cuda"))
    summary.update({
        "seqs": seqs,
        "batch_sizes": sorted({B for (_, B) in by_sb(strict)}),
        "reps_note": "the same reps and warm-up at every S on all three sides (no reduction for the large S)",
        "complete": complete,
        "table": rows,
        "repeat_and_batch": side,
        "sdpa_backend": sdpa,
    })
    if a.plot and rows:
        try:
            used = block_plot.plot(summary, os.path.join(dest, a.plot))
            summary["plot"] = {"file": a.plot, "renderer": used}
            print(f"plot: wrote {a.plot} ({used})")
        except Exception as e:  # the figure is secondary to the numbers
            summary["plot"] = {"error": f"{type(e).__name__}: {e}"}
            print(f"plot: not drawn: {type(e).__name__}: {e}")
    summary.update({"strict": strict, "provider": prov, "provider_deterministic": det})
    with open(os.path.join(dest, "bench_block.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    if rows:
        print()
        print(block_table.markdown(summary))
        print()
        print(block_table.repeat_markdown(summary))
        print()
        print(block_table.sdpa_markdown(summary))
        if not complete:
            print("\nnot complete: a side stopped early or a provider phase has no figure (see the *_error fields)")
    else:
        print("no table: strict", strict.get("skipped", "ok"), "/ provider", prov.get("skipped", "ok"),
              "/ deterministic provider", det.get("skipped", "ok"))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
