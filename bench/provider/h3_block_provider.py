#!/usr/bin/env python3
"""The provider side of bench/bench_gpu_block.c: one MiniMax-H3 transformer block in plain PyTorch bf16, computed the
way diffusers' MiniMaxH3TransformerBlock computes it (docs/model.md section 3.7), timed forward and forward+backward
with CUDA events, plus the provider's own repeatability and batch invariance.  Not part of CI (it needs torch and a
GPU); bench/provider/run_gpu_bench.sh runs it next to the strict side.

  python3 h3_block_provider.py [--reps 15] [--warmup 3] [--batches 1,4] [--small] [--no-profile] --json FILE

The 17 nodes, bf16 parameters and activations, as the ordinary path does them:
  table = adaln_proj(silu(temb) -> bf16) viewed [3T, 6H], six chunks selected per row by adaln_index
  n = rms_norm1(x) * (1 + scale_msa[row]) + shift_msa[row]
  q, k, v = to_q/k/v(n) in heads; q, k = rms_norm over head_dim; rotate-half rope on the first 6F channels
  attention = torch.nn.functional.scaled_dot_product_attention (default backend selection), to_out
  x = x + gate_msa[row] * attention
  n = rms_norm2(x) * (1 + scale_mlp[row]) + shift_mlp[row]; u = ff.net.0.proj(n); value, gate = halves of u
  x = x + gate_mlp[row] * ff.net.2(value * silu(gate))
The rotary table (cos, sin in f32) is computed once outside the timed region, as it is once per model call.

Figures (each the median of --reps runs after --warmup runs, torch.cuda.synchronize() before each run, CUDA events):
  forward_ms       the block under torch.no_grad() (inference)
  forward_grad_ms  the block with autograd recording (what a training step's forward costs)
  backward_ms      out.backward(dout) after that forward: gradients of x, temb and all 12 parameters
  fwd_bwd_ms       the two together, in the same run
Side measurements:
  repeat           bits of every gradient (12 parameters, x, temb) and of the output after the first and the last
                   timed run, identical inputs: count of differing elements
  batch_invariance item 0 of B = 4 against B = 1 (same item inputs): differing elements of the output and of dx
  kernels          torch.profiler over one forward+backward: the top kernels by device time, and the attention ones
"""

import argparse
import json
import math
import os
import platform
import sys
import time


def log(*a):
    print(*a, flush=True)


def write_json(path, obj):
    if path:
        with open(path, "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")


RELEASE = dict(H=5376, heads=56, D=128, ffn=14336, E=2688, F=16, S=925)
SMALL = dict(H=64, heads=2, D=32, ffn=96, E=48, F=4, S=37)
EPS = 1e-5


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--small", action="store_true", help="scaled-down block (a quick check of the script)")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.reps < 10:
        ap.error("--reps must be at least 10 (the figures are medians)")

    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        log(f"h3_block_provider: SKIP: torch not importable: {e}")
        write_json(args.json, {"side": "provider", "skipped": f"torch not importable: {e}"})
        return 0
    if not torch.cuda.is_available():
        log("h3_block_provider: SKIP: no CUDA GPU visible to torch")
        write_json(args.json, {"side": "provider", "skipped": "no CUDA GPU visible to torch"})
        return 0

    g = SMALL if args.small else RELEASE
    H, heads, D, FF, E, Fr, S = g["H"], g["heads"], g["D"], g["ffn"], g["E"], g["F"], g["S"]
    QW = heads * D
    dev = torch.device("cuda")
    bf16 = torch.bfloat16
    batches = [int(b) for b in args.batches.split(",")]

    # ------------------------------------------------------------------ parameters (bf16, as the checkpoint)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1234)

    def param(shape, scale):
        t = torch.randn(shape, generator=gen, device=dev, dtype=torch.float32) * scale
        return torch.nn.Parameter(t.to(bf16))

    P = {
        "adaln_proj.linear.weight": param((18 * H, E), 1.0 / math.sqrt(E)),
        "adaln_proj.linear.bias": param((18 * H,), 0.05),
        "norm1.weight": param((H,), 0.2),
        "norm2.weight": param((H,), 0.2),
        "attn.to_q.weight": param((QW, H), 1.0 / math.sqrt(H)),
        "attn.to_k.weight": param((QW, H), 1.0 / math.sqrt(H)),
        "attn.to_v.weight": param((QW, H), 1.0 / math.sqrt(H)),
        "attn.to_out.0.weight": param((H, QW), 1.0 / math.sqrt(QW)),
        "attn.norm_q.weight": param((D,), 1.0),
        "attn.norm_k.weight": param((D,), 1.0),
        "ff.net.0.proj.weight": param((2 * FF, H), 1.0 / math.sqrt(H)),
        "ff.net.2.weight": param((H, FF), 1.0 / math.sqrt(FF)),
    }

    # ------------------------------------------------------------------ layout (the strict bench's, gpu_block.h)
    pos = torch.tensor(
        [[float(s // 64), -16.0 + ((s // 8) % 8) * 4.0, -16.0 + (s % 8) * 4.0] for s in range(S)], dtype=torch.float64
    ).to(dev)
    adaln_index = torch.tensor(
        [1 if s < S // 8 else (0 if s < (7 * S) // 8 else 2) for s in range(S)], dtype=torch.int64
    ).to(dev)

    def rope_table(position_ids, freq_dim, theta=10000.0):
        # docs/model.md 3.1: f32 angles (t, h, w) x inv_freq, concatenated, then with themselves; cos and sin
        inv_freq = 1.0 / (theta ** (torch.arange(0, 2 * freq_dim, 2, dtype=torch.float32, device=dev) / (2 * freq_dim)))
        ang = position_ids.to(torch.float32)[:, :, None] * inv_freq[None, None, :]  # [S, 3, F]
        ang = ang.reshape(ang.shape[0], 3 * freq_dim)  # t block, h block, w block
        ang = torch.cat((ang, ang), dim=-1)
        return ang.cos(), ang.sin()

    cos, sin = rope_table(pos, Fr)

    def rotate(h, cos, sin):
        # h: [B, S, heads, D]; rotate-half on the first cos.shape[-1] channels, the rest passes through
        rd = cos.shape[-1]
        part, rest = h[..., :rd], h[..., rd:]
        c = cos.to(h.dtype)[None, :, None, :]
        s = sin.to(h.dtype)[None, :, None, :]
        lo, hi = part.chunk(2, dim=-1)
        turned = torch.cat((-hi, lo), dim=-1)
        return torch.cat((part * c + turned * s, rest), dim=-1).contiguous()

    def block(x, temb):
        # one H3 block; x [B, S, H] bf16, temb [T, E] f32
        table = F.linear(F.silu(temb).to(bf16), P["adaln_proj.linear.weight"], P["adaln_proj.linear.bias"])
        chunks = table.view(-1, 6 * H).chunk(6, dim=-1)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = (c.index_select(0, adaln_index) for c in chunks)
        n = F.rms_norm(x, (H,), P["norm1.weight"], EPS)
        n = n * (1.0 + scale_msa) + shift_msa
        q = F.linear(n, P["attn.to_q.weight"]).unflatten(-1, (heads, D))
        k = F.linear(n, P["attn.to_k.weight"]).unflatten(-1, (heads, D))
        v = F.linear(n, P["attn.to_v.weight"]).unflatten(-1, (heads, D))
        q = F.rms_norm(q, (D,), P["attn.norm_q.weight"], EPS)
        k = F.rms_norm(k, (D,), P["attn.norm_k.weight"], EPS)
        q = rotate(q, cos, sin)
        k = rotate(k, cos, sin)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), dropout_p=0.0, is_causal=False
        )
        a = a.transpose(1, 2).flatten(2, 3).type_as(q)
        x = x + gate_msa * F.linear(a, P["attn.to_out.0.weight"])
        n = F.rms_norm(x, (H,), P["norm2.weight"], EPS)
        n = n * (1.0 + scale_mlp) + shift_mlp
        value, gate = F.linear(n, P["ff.net.0.proj.weight"]).chunk(2, dim=-1)
        return x + gate_mlp * F.linear(value * F.silu(gate), P["ff.net.2.weight"])

    # ------------------------------------------------------------------ inputs: item b from seed 500 + b
    def item_inputs(B):
        xs, ds = [], []
        for b in range(B):
            gi = torch.Generator(device=dev)
            gi.manual_seed(500 + b)
            xs.append(torch.randn((S, H), generator=gi, device=dev, dtype=torch.float32))
            ds.append(torch.randn((S, H), generator=gi, device=dev, dtype=torch.float32))
        x = torch.stack(xs).to(bf16)
        dout = torch.stack(ds).to(bf16)  # the output is bf16, so its gradient is too
        gt = torch.Generator(device=dev)
        gt.manual_seed(700)
        temb = torch.randn((1, E), generator=gt, device=dev, dtype=torch.float32)
        return x, dout, temb

    def grads_of(x, temb):
        out = {n: p.grad for n, p in P.items()}
        out["x"] = x.grad
        out["temb"] = temb.grad
        return out

    def differ(a, b):
        # elements whose bits differ
        if a.dtype == torch.bfloat16:
            return int((a.view(torch.int16) != b.view(torch.int16)).sum().item())
        if a.dtype == torch.float32:
            return int((a.view(torch.int32) != b.view(torch.int32)).sum().item())
        return int((a != b).sum().item())

    def stats(v, flops):
        v = sorted(v)
        n = len(v)
        med = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
        return {"median": med, "min": v[0], "max": v[-1], "tflops": flops / (med * 1e-3) * 1e-12}

    def flops(B):
        M = B * S
        lin = 2.0 * M * (3 * QW * H + H * QW + 2 * FF * H + H * FF)
        att = 4.0 * B * S * S * QW
        ada = 2.0 * E * 18 * H
        return lin + att + ada, 2 * lin + 2.5 * att + 2 * ada

    props = torch.cuda.get_device_properties(0)
    sdpa_flags = {
        "flash": torch.backends.cuda.flash_sdp_enabled(),
        "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
        "cudnn": getattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: None)(),
        "math": torch.backends.cuda.math_sdp_enabled(),
    }
    result = {
        "side": "provider",
        "what": "plain PyTorch bf16 MiniMax-H3 block (diffusers' computation), SDPA default backend",
        "device": f"{props.name}, sm_{props.major}{props.minor}, {props.multi_processor_count} SMs",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "python": platform.python_version(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "sdpa_backends_enabled": sdpa_flags,
        "geometry": {"hidden": H, "heads": heads, "head_dim": D, "ffn": FF, "time_embed_dim": E, "rope_freq_dim": Fr,
                     "S": S},
        "timing": f"CUDA events, torch.cuda.synchronize() before each run, median of {args.reps} after "
                  f"{args.warmup} warm-up runs",
        "reps": args.reps,
        "warmup": args.warmup,
        "batches": [],
    }
    log(f"h3_block_provider: {result['device']}, torch {torch.__version__}, CUDA {torch.version.cuda}; "
        f"SDPA enabled backends {sdpa_flags}")

    item0 = {}
    for B in batches:
        x0, dout, temb0 = item_inputs(B)
        fl_f, fl_b = flops(B)
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]

        # inference forward
        t_inf = []
        with torch.no_grad():
            for rep in range(args.warmup + args.reps):
                torch.cuda.synchronize()
                ev[0].record()
                y = block(x0, temb0)
                ev[1].record()
                torch.cuda.synchronize()
                if rep >= args.warmup:
                    t_inf.append(ev[0].elapsed_time(ev[1]))
            y_inf = y.clone()
            del y

        # training forward + backward
        t_fg, t_b, t_fb = [], [], []
        first = last = None
        out_first = out_last = None
        for rep in range(args.warmup + args.reps):
            for p in P.values():
                p.grad = None
            x = x0.detach().clone().requires_grad_(True)
            temb = temb0.detach().clone().requires_grad_(True)
            torch.cuda.synchronize()
            ev[0].record()
            y = block(x, temb)
            ev[1].record()
            y.backward(dout)
            ev[2].record()
            torch.cuda.synchronize()
            if rep >= args.warmup:
                t_fg.append(ev[0].elapsed_time(ev[1]))
                t_b.append(ev[1].elapsed_time(ev[2]))
                t_fb.append(ev[0].elapsed_time(ev[2]))
                if rep == args.warmup:
                    first = {n: t.detach().clone() for n, t in grads_of(x, temb).items()}
                    out_first = y.detach().clone()
                elif rep == args.warmup + args.reps - 1:
                    last = {n: t.detach().clone() for n, t in grads_of(x, temb).items()}
                    out_last = y.detach().clone()
            del y
        if last is None:  # --reps 1 cannot happen (checked), kept for clarity
            last, out_last = first, out_first
        per_tensor = {n: differ(first[n], last[n]) for n in first}
        weights = [n for n in first if n not in ("x", "temb")]
        rep_info = {
            "runs_apart": args.reps - 1,
            "weight_grad_elements": int(sum(first[n].numel() for n in weights)),
            "weight_grad_differ": int(sum(per_tensor[n] for n in weights)),
            "grad_x_differ": per_tensor["x"],
            "grad_temb_differ": per_tensor["temb"],
            "output_differ": differ(out_first, out_last),
            "inference_vs_training_forward_differ": differ(y_inf, out_first),
            "per_tensor": per_tensor,
        }
        entry = {
            "B": B,
            "forward_ms": stats(t_inf, fl_f),
            "forward_grad_ms": stats(t_fg, fl_f),
            "backward_ms": stats(t_b, fl_b),
            "fwd_bwd_ms": stats(t_fb, fl_f + fl_b),
            "flop_forward": fl_f,
            "flop_backward": fl_b,
            "repeat": rep_info,
        }
        if B == 1:
            item0 = {"out": out_first[0].clone(), "dx": first["x"][0].clone()}
        elif item0:
            entry["batch_invariance"] = {
                "item0_vs_B1_elements": int(item0["out"].numel()),
                "output_differ": differ(item0["out"], out_first[0]),
                "grad_x_differ": differ(item0["dx"], first["x"][0]),
            }
        del first, last, out_first, out_last

        # kernels (one forward + backward under the profiler)
        if not args.no_profile:
            try:
                from torch.profiler import ProfilerActivity, profile

                for p in P.values():
                    p.grad = None
                x = x0.detach().clone().requires_grad_(True)
                temb = temb0.detach().clone().requires_grad_(True)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    block(x, temb).backward(dout)
                    torch.cuda.synchronize()
                rows = []
                for e in prof.key_averages():
                    t = getattr(e, "self_device_time_total", None)
                    if t is None:
                        t = getattr(e, "self_cuda_time_total", 0)
                    if t and t > 0:
                        rows.append({"kernel": e.key[:160], "calls": int(e.count), "us": float(t)})
                rows.sort(key=lambda r: -r["us"])
                total = sum(r["us"] for r in rows)
                att = [r for r in rows if any(s in r["kernel"].lower() for s in ("flash", "fmha", "attention", "sdpa",
                                                                                 "cudnn"))]
                entry["kernels"] = {"total_us": total, "top": rows[:15], "attention": att[:8]}
            except Exception as e:  # the profile is informational
                entry["kernels"] = {"error": repr(e)}
        result["batches"].append(entry)
        r = entry
        log(f"  B = {B}: forward {r['forward_ms']['median']:.2f} ms (no_grad), forward with autograd "
            f"{r['forward_grad_ms']['median']:.2f} ms, backward {r['backward_ms']['median']:.2f} ms, "
            f"forward+backward {r['fwd_bwd_ms']['median']:.2f} ms; weight grads first vs last run: "
            f"{rep_info['weight_grad_differ']} of {rep_info['weight_grad_elements']} differ")
        if "batch_invariance" in entry:
            bi = entry["batch_invariance"]
            log(f"  batch invariance: item 0 of B = {B} vs B = 1: output {bi['output_differ']} of "
                f"{bi['item0_vs_B1_elements']} differ, dx {bi['grad_x_differ']} differ")
        if "kernels" in entry and "attention" in entry["kernels"]:
            for a in entry["kernels"]["attention"][:4]:
                log(f"    attention kernel: {a['kernel'][:100]} ({a['us']:.0f} us, {a['calls']} calls)")
        del x0, dout, temb0
        torch.cuda.empty_cache()

    write_json(args.json, result)
    if args.json:
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"h3_block_provider: {time.time() - t0:.1f} s", file=sys.stderr)
    sys.exit(rc)
