#!/usr/bin/env python3
"""Markdown tables from the block benchmark's bench_block.json (bench/provider/run_gpu_bench.sh), for the README and
docs/evidence/gpu/BENCH.md: the numbers there come from this command, not by hand.

  python3 bench/provider/block_table.py bench_block.json [--phases forward,forward+backward] [--repeat] [--sdpa]
  python3 bench/provider/block_table.py bench_block.json --compact

Default: the timing table (every phase; --phases picks some, in the order given), one row per S, B and phase:
strict ms, provider ms, strict / provider, deterministic provider ms, strict / deterministic provider.  --repeat adds
the repeatability and batch-invariance table, --sdpa the attention backend each provider mode ran.  A figure the
run did not produce (a side stopped early, a phase raised: see the JSON's *_error fields) shows as "n/a".
--compact prints the README's table instead: one row per S and B, the forward and the forward + backward as
"strict / provider ms (ratio)", and the deterministic provider's forward + backward with strict's ratio to it.
Older files (one S, no deterministic provider) print with the S of their geometry and "n/a" for the new columns.
"""

import argparse
import json
import sys


def _s_of(doc, row):
    if "S" in row:
        return row["S"]
    return ((doc.get("strict") or {}).get("geometry") or {}).get("S", "?")


def _ms(v):
    if not isinstance(v, (int, float)):
        return "n/a"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}"


def _x(v):
    return f"{v:.2f}" if isinstance(v, (int, float)) else "n/a"


def _n(v):
    return f"{v:,}" if isinstance(v, int) else "n/a"


def markdown(doc, phases=None):
    rows = doc.get("table", [])
    if phases:
        order = {p: i for i, p in enumerate(phases)}
        rows = [r for r in rows if r.get("phase") in order]
    else:
        order = {}
    rows = sorted(rows, key=lambda r: (_s_of(doc, r), r["B"], order.get(r["phase"], 0)))
    out = ["| S | B | phase | strict ms | provider ms | strict / provider | deterministic provider ms "
           "| strict / deterministic provider |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {_s_of(doc, r)} | {r['B']} | {r['phase'].replace('+', ' + ')} | {_ms(r.get('strict_ms'))} | "
                   f"{_ms(r.get('provider_ms'))} | {_x(r.get('ratio'))} | {_ms(r.get('provider_det_ms'))} | "
                   f"{_x(r.get('ratio_det'))} |")
    return "\n".join(out)


def _pair(r):
    if not r:
        return "n/a"
    return f"{_ms(r.get('strict_ms'))} / {_ms(r.get('provider_ms'))} ({_x(r.get('ratio'))}x)"


def compact_markdown(doc):
    by = {}
    for r in doc.get("table", []):
        by[(_s_of(doc, r), r["B"], r.get("phase"))] = r
    keys = sorted({(s, b) for s, b, _ in by})
    out = ["| S | B | forward: strict / PyTorch ms | forward + backward: strict / PyTorch ms "
           "| forward + backward: deterministic PyTorch ms (strict / it) |",
           "|---|---|---|---|---|"]
    for s, b in keys:
        fb = by.get((s, b, "forward+backward"))
        det = f"{_ms(fb.get('provider_det_ms'))} ({_x(fb.get('ratio_det'))}x)" if fb else "n/a"
        out.append(f"| {s} | {b} | {_pair(by.get((s, b, 'forward')))} | {_pair(fb)} | {det} |")
    return "\n".join(out)


def repeat_markdown(doc):
    out = ["| S | B | weight-gradient elements | differ, 1st vs last run: strict | provider | deterministic provider "
           "| item 0 vs B = 1, output / dx differ: strict | provider | deterministic provider |",
           "|---|---|---|---|---|---|---|---|---|"]
    for e in sorted(doc.get("repeat_and_batch", []), key=lambda e: (_s_of(doc, e), e["B"])):
        def item(name):
            o, d = e.get(f"{name}_item0_output_differ"), e.get(f"{name}_item0_dx_differ")
            return f"{_n(o)} / {_n(d)}" if "item0_elements" in e else "-"

        out.append(f"| {_s_of(doc, e)} | {e['B']} | {_n(e.get('weight_grad_elements'))} | "
                   f"{_n(e.get('strict_weight_grad_differ'))} | {_n(e.get('provider_weight_grad_differ'))} | "
                   f"{_n(e.get('provider_det_weight_grad_differ'))} | {item('strict')} | {item('provider')} | "
                   f"{item('provider_det')} |")
    return "\n".join(out)


def sdpa_markdown(doc):
    out = ["| S | B | provider: SDPA choice (inference / training), attention kernels | deterministic provider |",
           "|---|---|---|---|"]

    def cell(e, name):
        c = e.get(f"{name}_choice")
        if not c:
            return "n/a"
        ks = ", ".join(k[:50] for k in e.get(f"{name}_attention_kernels", [])[:2])
        return f"{c.get('inference')} / {c.get('training')}" + (f"; {ks}" if ks else "")

    for e in sorted(doc.get("sdpa_backend", []), key=lambda e: (e["S"], e["B"])):
        out.append(f"| {e['S']} | {e['B']} | {cell(e, 'provider')} | {cell(e, 'provider_det')} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json")
    ap.add_argument("--phases", help="comma-separated, e.g. forward,forward+backward (default: all)")
    ap.add_argument("--repeat", action="store_true", help="also the repeatability and batch-invariance table")
    ap.add_argument("--sdpa", action="store_true", help="also the SDPA backend table")
    ap.add_argument("--compact", action="store_true", help="the README's table (forward, forward + backward)")
    a = ap.parse_args()
    with open(a.json) as f:
        doc = json.load(f)
    if a.compact:
        print(compact_markdown(doc))
        return 0
    print(markdown(doc, a.phases.split(",") if a.phases else None))
    if a.repeat:
        print()
        print(repeat_markdown(doc))
    if a.sdpa:
        print()
        print(sdpa_markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
