#!/usr/bin/env python3
"""The provider side of bench/bench_gpu_block.c: one MiniMax-H3 transformer block in plain PyTorch bf16, computed the
way diffusers' MiniMaxH3TransformerBlock computes it (docs/model.md section 3.7), timed forward and forward+backward
with CUDA events for every S of --seqs and B of --batches, plus the provider's own repeatability and batch
invariance.  Not part of CI (it needs torch and a GPU); bench/provider/run_gpu_bench.sh runs it next to the strict
side, twice: in PyTorch's ordinary mode and with --deterministic.

  python3 h3_block_provider.py [--seqs 12,925,4253,8349] [--batches 1,4] [--reps 15] [--warmup 3]
                               [--deterministic] [--small] [--device cuda|cpu] [--no-profile] --json FILE

--seqs 925 is the single-S run of earlier versions.  --deterministic is PyTorch's deterministic mode as a user
turns it on: CUBLAS_WORKSPACE_CONFIG=:4096:8 in the environment before CUDA initialises (set here before torch is
imported, unless the environment already has a value, which is then recorded), then
torch.use_deterministic_algorithms(True) (warn_only=False).  SDPA keeps its default backend selection in both
modes; under deterministic algorithms PyTorch 2.11 leaves cuDNN attention out of that selection (sdp_utils.cpp,
check_cudnn_deterministic) and runs the flash backward with its deterministic flag set (attention_backward.cu), so
the backend that ran is recorded for every (S, B): `sdpa_choice` (torch._fused_sdp_choice on the block's q/k/v
shapes and strides, inference and training) and the attention kernels of the profile.  A phase that raises (a
deterministic-mode RuntimeError, out of memory) is recorded as `error` with the exception's text and the run goes
on.  --device cpu (with --small) checks the script on a machine without a GPU: host-clock timings, CPU profile.

The 17 nodes, bf16 parameters and activations, as the ordinary path does them:
  table = adaln_proj(silu(temb) -> bf16) viewed [3T, 6H], six chunks selected per row by adaln_index
  n = rms_norm1(x) * (1 + scale_msa[row]) + shift_msa[row]
  q, k, v = to_q/k/v(n) in heads; q, k = rms_norm over head_dim; rotate-half rope on the first 6F channels
  attention = torch.nn.functional.scaled_dot_product_attention (default backend selection), to_out
  x = x + gate_msa[row] * attention
  n = rms_norm2(x) * (1 + scale_mlp[row]) + shift_mlp[row]; u = ff.net.0.proj(n); value, gate = halves of u
  x = x + gate_mlp[row] * ff.net.2(value * silu(gate))
The rotary table (cos, sin in f32) is computed once per S outside the timed region, as it is once per model call.

Figures per (S, B) (each the median of --reps runs after --warmup runs, torch.cuda.synchronize() before each run,
CUDA events):
  forward_ms       the block under torch.no_grad() (inference)
  forward_grad_ms  the block with autograd recording (what a training step's forward costs)
  backward_ms      out.backward(dout) after that forward: gradients of x, temb and all 12 parameters
  fwd_bwd_ms       the two together, in the same run
Side measurements:
  repeat           bits of every gradient (12 parameters, x, temb) and of the output after the first and the last
                   timed run, identical inputs: count of differing elements
  batch_invariance item 0 of B = 4 against B = 1 at the same S (same item inputs): differing elements of the
                   output and of dx
  kernels          torch.profiler over one forward+backward: the top kernels by device time, and the attention ones
  warnings         the distinct warnings raised while measuring (deterministic-mode notices among them)
Progress lines ("[provider] S = .., B = ..: phase") go to stdout as it goes; the JSON is rewritten after every (S, B),
so a run stopped part-way keeps what it finished ("complete": false until the last one).
"""

import argparse
import json
import math
import os
import platform
import sys
import time
import warnings

DEFAULT_SEQS = "12,925,4253,8349"
CUBLAS_DETERMINISTIC = ":4096:8"


def log(*a):
    print(*a, flush=True)


def write_json(path, obj):
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)


RELEASE = dict(H=5376, heads=56, D=128, ffn=14336, E=2688, F=16)
SMALL = dict(H=64, heads=2, D=32, ffn=96, E=48, F=4)
SMALL_S = 37
EPS = 1e-5


def int_list(text, what):
    try:
        v = [int(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} wants comma-separated integers, got {text!r}")
    if not v or any(x < 1 for x in v):
        raise argparse.ArgumentTypeError(f"{what} wants positive integers, got {text!r}")
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seqs", type=lambda t: int_list(t, "--seqs"), default=None,
                    help=f"rows per item (default {DEFAULT_SEQS}; with --small, {SMALL_S})")
    ap.add_argument("--batches", type=lambda t: int_list(t, "--batches"), default=[1, 4])
    ap.add_argument("--deterministic", action="store_true",
                    help="torch.use_deterministic_algorithms(True), CUBLAS_WORKSPACE_CONFIG=:4096:8")
    ap.add_argument("--small", action="store_true", help="scaled-down block (a quick check of the script)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: a check of the script without a GPU (host-clock timings)")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.reps < 10:
        ap.error("--reps must be at least 10 (the figures are medians)")
    if args.warmup < 1:
        ap.error("--warmup must be at least 1 (the first run also probes the SDPA choice)")
    seqs = args.seqs if args.seqs is not None else ([SMALL_S] if args.small else int_list(DEFAULT_SEQS, "--seqs"))
    mode = "deterministic" if args.deterministic else "ordinary"

    cublas_env_before = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if args.deterministic and cublas_env_before is None:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_DETERMINISTIC  # before torch initialises CUDA

    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        log(f"h3_block_provider: SKIP: torch not importable: {e}")
        write_json(args.json, {"side": "provider", "mode": mode, "skipped": f"torch not importable: {e}"})
        return 0
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        log("h3_block_provider: SKIP: no CUDA GPU visible to torch")
        write_json(args.json, {"side": "provider", "mode": mode, "skipped": "no CUDA GPU visible to torch"})
        return 0
    if args.deterministic:
        torch.use_deterministic_algorithms(True)

    g = SMALL if args.small else RELEASE
    H, heads, D, FF, E, Fr = g["H"], g["heads"], g["D"], g["ffn"], g["E"], g["F"]
    QW = heads * D
    dev = torch.device(args.device)
    bf16 = torch.bfloat16

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

    # ------------------------------------------------------------------ layout per S (the strict bench's, gpu_block.h)
    def rope_table(position_ids, freq_dim, theta=10000.0):
        # docs/model.md 3.1: f32 angles (t, h, w) x inv_freq, concatenated, then with themselves; cos and sin
        inv_freq = 1.0 / (theta ** (torch.arange(0, 2 * freq_dim, 2, dtype=torch.float32, device=dev) / (2 * freq_dim)))
        ang = position_ids.to(torch.float32)[:, :, None] * inv_freq[None, None, :]  # [S, 3, F]
        ang = ang.reshape(ang.shape[0], 3 * freq_dim)  # t block, h block, w block
        ang = torch.cat((ang, ang), dim=-1)
        return ang.cos(), ang.sin()

    def layout(S):
        pos = torch.tensor(
            [[float(s // 64), -16.0 + ((s // 8) % 8) * 4.0, -16.0 + (s % 8) * 4.0] for s in range(S)],
            dtype=torch.float64,
        ).to(dev)
        adaln_index = torch.tensor(
            [1 if s < S // 8 else (0 if s < (7 * S) // 8 else 2) for s in range(S)], dtype=torch.int64
        ).to(dev)
        cos, sin = rope_table(pos, Fr)
        return {"S": S, "adaln_index": adaln_index, "cos": cos, "sin": sin}

    def rotate(h, cos, sin):
        # h: [B, S, heads, D]; rotate-half on the first cos.shape[-1] channels, the rest passes through
        rd = cos.shape[-1]
        part, rest = h[..., :rd], h[..., rd:]
        c = cos.to(h.dtype)[None, :, None, :]
        s = sin.to(h.dtype)[None, :, None, :]
        lo, hi = part.chunk(2, dim=-1)
        turned = torch.cat((-hi, lo), dim=-1)
        return torch.cat((part * c + turned * s, rest), dim=-1).contiguous()

    def block(x, temb, lay):
        # one H3 block; x [B, S, H] bf16, temb [T, E] f32
        table = F.linear(F.silu(temb).to(bf16), P["adaln_proj.linear.weight"], P["adaln_proj.linear.bias"])
        chunks = table.view(-1, 6 * H).chunk(6, dim=-1)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = (
            c.index_select(0, lay["adaln_index"]) for c in chunks
        )
        n = F.rms_norm(x, (H,), P["norm1.weight"], EPS)
        n = n * (1.0 + scale_msa) + shift_msa
        q = F.linear(n, P["attn.to_q.weight"]).unflatten(-1, (heads, D))
        k = F.linear(n, P["attn.to_k.weight"]).unflatten(-1, (heads, D))
        v = F.linear(n, P["attn.to_v.weight"]).unflatten(-1, (heads, D))
        q = F.rms_norm(q, (D,), P["attn.norm_q.weight"], EPS)
        k = F.rms_norm(k, (D,), P["attn.norm_k.weight"], EPS)
        q = rotate(q, lay["cos"], lay["sin"])
        k = rotate(k, lay["cos"], lay["sin"])
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), dropout_p=0.0, is_causal=False
        )
        a = a.transpose(1, 2).flatten(2, 3).type_as(q)
        x = x + gate_msa * F.linear(a, P["attn.to_out.0.weight"])
        n = F.rms_norm(x, (H,), P["norm2.weight"], EPS)
        n = n * (1.0 + scale_mlp) + shift_mlp
        value, gate = F.linear(n, P["ff.net.0.proj.weight"]).chunk(2, dim=-1)
        return x + gate_mlp * F.linear(value * F.silu(gate), P["ff.net.2.weight"])

    def sdpa_choice(B, S, requires_grad):
        # the backend SDPA's default selection takes for the block's q/k/v ([B, S, heads, D] viewed [B, heads, S, D])
        try:
            from torch.nn.attention import SDPBackend

            t = torch.empty((B, S, heads, D), dtype=bf16, device=dev, requires_grad=requires_grad).transpose(1, 2)
            c = torch._fused_sdp_choice(t, t, t, dropout_p=0.0, is_causal=False)
            del t
            return SDPBackend(c).name
        except Exception as e:  # a private function: informational only
            return f"unknown ({type(e).__name__}: {str(e)[:200]})"

    # ------------------------------------------------------------------ inputs: item b from seed 500 + b
    def item_inputs(B, S):
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

    def flops(B, S):
        M = B * S
        lin = 2.0 * M * (3 * QW * H + H * QW + 2 * FF * H + H * FF)
        att = 4.0 * B * S * S * QW
        ada = 2.0 * E * 18 * H
        return lin + att + ada, 2 * lin + 2.5 * att + 2 * ada

    def sync():
        if cuda:
            torch.cuda.synchronize()

    class Clock:
        # marks in one run: CUDA events on the GPU, the host clock on the CPU; ms between two marks
        def __init__(self):
            self.ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if cuda else None
            self.t = [0.0] * 3

        def mark(self, i):
            if cuda:
                self.ev[i].record()
            else:
                self.t[i] = time.perf_counter()

        def ms(self, i, j):
            return self.ev[i].elapsed_time(self.ev[j]) if cuda else 1e3 * (self.t[j] - self.t[i])

    def error_text(e):
        return f"{type(e).__name__}: {e}"[:2000]

    if cuda:
        props = torch.cuda.get_device_properties(0)
        device_desc = f"{props.name}, sm_{props.major}{props.minor}, {props.multi_processor_count} SMs"
    else:
        device_desc = f"CPU ({platform.processor() or platform.machine()}), {os.cpu_count()} cores"
    sdpa_flags = {
        "flash": torch.backends.cuda.flash_sdp_enabled(),
        "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
        "cudnn": getattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: None)(),
        "math": torch.backends.cuda.math_sdp_enabled(),
    }
    result = {
        "side": "provider",
        "mode": mode,
        "what": "plain PyTorch bf16 MiniMax-H3 block (diffusers' computation), SDPA default backend"
        + (", torch.use_deterministic_algorithms(True)" if args.deterministic else ""),
        "device": device_desc,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "python": platform.python_version(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "deterministic_fill_uninitialized_memory": getattr(
            getattr(torch.utils, "deterministic", None), "fill_uninitialized_memory", None),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "cublas_workspace_config_from_environment": cublas_env_before is not None,
        "sdpa_backends_enabled": sdpa_flags,
        "geometry": {"hidden": H, "heads": heads, "head_dim": D, "ffn": FF, "time_embed_dim": E, "rope_freq_dim": Fr},
        "seqs": seqs,
        "timing": ("CUDA events, torch.cuda.synchronize() before each run" if cuda else "host clock (CPU check)")
        + f", median of {args.reps} after {args.warmup} warm-up runs at every S",
        "reps": args.reps,
        "warmup": args.warmup,
        "complete": False,
        "batches": [],
    }
    log(f"h3_block_provider ({mode}): {device_desc}, torch {torch.__version__}, CUDA {torch.version.cuda}; "
        f"deterministic algorithms {result['deterministic_algorithms']}, CUBLAS_WORKSPACE_CONFIG "
        f"{result['cublas_workspace_config']}; SDPA enabled backends {sdpa_flags}; S in {seqs}, B in {args.batches}")

    def timed(lay, B, tag, x0, dout, temb0, clk, entry):
        # the inference forward, then forward + backward; returns what the repeat and batch counts need
        fl_f, fl_b = entry["flop_forward"], entry["flop_backward"]
        # inference forward
        log(f"{tag}: inference forward ({args.warmup} warm-up + {args.reps} timed; SDPA choice "
            f"{entry['sdpa_choice']['inference']})")
        t_inf = []
        y_inf = None
        try:
            with torch.no_grad():
                for rep in range(args.warmup + args.reps):
                    sync()
                    clk.mark(0)
                    y = block(x0, temb0, lay)
                    clk.mark(1)
                    sync()
                    if rep >= args.warmup:
                        t_inf.append(clk.ms(0, 1))
                y_inf = y.clone()
                del y
            entry["forward_ms"] = stats(t_inf, fl_f)
        except Exception as e:
            entry["forward_ms"] = {"error": error_text(e)}
            log(f"{tag}: inference forward raised: {error_text(e)[:300]}")
            sync_safe()

        # training forward + backward
        log(f"{tag}: training forward + backward ({args.warmup} warm-up + {args.reps} timed; SDPA choice "
            f"{entry['sdpa_choice']['training']})")
        t_fg, t_b, t_fb = [], [], []
        first = last = out_first = out_last = None
        phase = "forward"
        try:
            for rep in range(args.warmup + args.reps):
                for p in P.values():
                    p.grad = None
                x = x0.detach().clone().requires_grad_(True)
                temb = temb0.detach().clone().requires_grad_(True)
                sync()
                clk.mark(0)
                phase = "forward"
                y = block(x, temb, lay)
                clk.mark(1)
                phase = "backward"
                y.backward(dout)
                clk.mark(2)
                sync()
                if rep >= args.warmup:
                    t_fg.append(clk.ms(0, 1))
                    t_b.append(clk.ms(1, 2))
                    t_fb.append(clk.ms(0, 2))
                    if rep == args.warmup:
                        first = {n: t.detach().clone() for n, t in grads_of(x, temb).items()}
                        out_first = y.detach().clone()
                    elif rep == args.warmup + args.reps - 1:
                        last = {n: t.detach().clone() for n, t in grads_of(x, temb).items()}
                        out_last = y.detach().clone()
                del y
            entry["forward_grad_ms"] = stats(t_fg, fl_f)
            entry["backward_ms"] = stats(t_b, fl_b)
            entry["fwd_bwd_ms"] = stats(t_fb, fl_f + fl_b)
        except Exception as e:
            err = {"error": error_text(e), "raised_in": phase}
            for key in ("forward_grad_ms", "backward_ms", "fwd_bwd_ms"):
                entry[key] = err
            log(f"{tag}: training {phase} raised: {error_text(e)[:300]}")
            first = last = out_first = out_last = None
            for p in P.values():
                p.grad = None
            sync_safe()
        return y_inf, first, last, out_first, out_last

    def measure(lay, B, item0):
        S = lay["S"]
        tag = f"[provider {mode}] S = {S}, B = {B}"
        x0, dout, temb0 = item_inputs(B, S)
        fl_f, fl_b = flops(B, S)
        clk = Clock()
        entry = {"S": S, "B": B, "flop_forward": fl_f, "flop_backward": fl_b,
                 "sdpa_choice": {"inference": sdpa_choice(B, S, False), "training": sdpa_choice(B, S, True)}}

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y_inf, first, last, out_first, out_last = timed(lay, B, tag, x0, dout, temb0, clk, entry)
        seen = []
        for w in caught:  # the distinct warnings of the timed phases (the profile's own are left out)
            text = f"{w.category.__name__}: {w.message}"[:1000]
            if text not in seen:
                seen.append(text)
        entry["warnings"] = seen

        if first is not None and last is not None:
            per_tensor = {n: differ(first[n], last[n]) for n in first}
            weights = [n for n in first if n not in ("x", "temb")]
            entry["repeat"] = {
                "runs_apart": args.reps - 1,
                "weight_grad_elements": int(sum(first[n].numel() for n in weights)),
                "weight_grad_differ": int(sum(per_tensor[n] for n in weights)),
                "grad_x_differ": per_tensor["x"],
                "grad_temb_differ": per_tensor["temb"],
                "output_differ": differ(out_first, out_last),
                "inference_vs_training_forward_differ": differ(y_inf, out_first) if y_inf is not None else None,
                "per_tensor": per_tensor,
            }
            if B == 1:
                item0.clear()
                item0.update({"out": out_first[0].clone(), "dx": first["x"][0].clone()})
            elif item0:
                entry["batch_invariance"] = {
                    "item0_vs_B1_elements": int(item0["out"].numel()),
                    "output_differ": differ(item0["out"], out_first[0]),
                    "grad_x_differ": differ(item0["dx"], first["x"][0]),
                }
        del first, last, out_first, out_last, y_inf

        # kernels (one forward + backward under the profiler)
        if not args.no_profile:
            log(f"{tag}: profile (one forward + backward)")
            try:
                from torch.profiler import ProfilerActivity, profile

                for p in P.values():
                    p.grad = None
                x = x0.detach().clone().requires_grad_(True)
                temb = temb0.detach().clone().requires_grad_(True)
                sync()
                with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
                    block(x, temb, lay).backward(dout)
                    sync()
                rows = []
                for e in prof.key_averages():
                    if cuda:
                        t = getattr(e, "self_device_time_total", None)
                        if t is None:
                            t = getattr(e, "self_cuda_time_total", 0)
                    else:
                        t = getattr(e, "self_cpu_time_total", 0)
                    if t and t > 0:
                        rows.append({"kernel": e.key[:160], "calls": int(e.count), "us": float(t)})
                rows.sort(key=lambda r: -r["us"])
                total = sum(r["us"] for r in rows)
                att = [r for r in rows if any(s in r["kernel"].lower() for s in ("flash", "fmha", "attention", "sdpa",
                                                                                 "cudnn"))]
                entry["kernels"] = {"total_us": total, "top": rows[:15], "attention": att[:8]}
            except Exception as e:  # the profile is informational
                entry["kernels"] = {"error": error_text(e)}
                sync_safe()
        del x0, dout, temb0
        return entry

    def sync_safe():
        # after an exception: free what can be freed; a failing sync (a broken context) is reported, not raised
        try:
            sync()
            if cuda:
                torch.cuda.empty_cache()
        except Exception as e:
            log(f"h3_block_provider: sync after an error raised too: {error_text(e)[:300]}")

    def show(entry):
        tag = f"[provider {mode}] S = {entry['S']}, B = {entry['B']}"

        def ms(key):
            v = entry.get(key, {})
            return f"{v['median']:.2f} ms" if "median" in v else "error"

        rep = entry.get("repeat")
        log(f"{tag}: forward {ms('forward_ms')} (no_grad), forward with autograd {ms('forward_grad_ms')}, backward "
            f"{ms('backward_ms')}, forward+backward {ms('fwd_bwd_ms')}"
            + (f"; weight grads first vs last run: {rep['weight_grad_differ']} of {rep['weight_grad_elements']} differ"
               if rep else ""))
        if "batch_invariance" in entry:
            bi = entry["batch_invariance"]
            log(f"{tag}: item 0 vs B = 1: output {bi['output_differ']} of {bi['item0_vs_B1_elements']} differ, "
                f"dx {bi['grad_x_differ']} differ")
        for a in entry.get("kernels", {}).get("attention", [])[:4]:
            log(f"{tag}:   attention kernel: {a['kernel'][:100]} ({a['us']:.0f} us, {a['calls']} calls)")
        for w in entry.get("warnings", []):
            log(f"{tag}:   warning: {w[:200]}")

    for S in seqs:
        lay = layout(S)
        item0 = {}
        for B in args.batches:
            entry = measure(lay, B, item0)
            result["batches"].append(entry)
            show(entry)
            write_json(args.json, result)
            sync_safe()
        del lay, item0

    result["complete"] = True
    write_json(args.json, result)
    if args.json:
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"h3_block_provider: {time.time() - t0:.1f} s", file=sys.stderr)
    sys.exit(rc)
