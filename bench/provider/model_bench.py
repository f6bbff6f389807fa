#!/usr/bin/env python3
"""The whole MiniMax-H3 model, loaded from one model directory by h3strict and by diffusers, timed side by side
(issue 10, benchmark (b)).  bench/provider/run_model_bench.sh runs it: once per side, each side in a process of its
own (so the two never share device memory), then `combine` and `table`.

  python3 model_bench.py side --side strict|provider --model DIR --inputs S=IN.safetensors[,S=IN...]
                              [--device cuda|cpu] [--reps 10] [--warmup 2] [--phase-s 40] [--deadline EPOCH]
                              [--sample-ms 2] [--profile PROFILE.txt]
                              --json SIDE.json
  python3 model_bench.py combine --strict STRICT.json --provider PROVIDER.json [--meta META.json] --out OUT.json
  python3 model_bench.py table OUT.json            (the Markdown table, on stdout)

The two sides:
  strict    h3strict.torch.StrictTransformer.from_pretrained(DIR, device=...) -- the PyTorch binding over the
            library's resident model (weights uploaded once; inputs are host tensors, as the binding requires; on
            CUDA the outputs are torch CUDA tensors the library fills (h3s_model_forward_into), so the loss and its
            cotangents stay on the device, and the parameter gradients stay in the library's device memory
            (h3s_model_set_device_grads); with --exact-grads 0 (the default) the library hands a BF16
            parameter's gradient over in BF16 (exact_grads=False: the F32 gradient rounded once, by the
            weight-gradient GEMM as it stores it), which becomes .grad as it is; with --exact-grads 1 every gradient
            comes over in F32 and the binding converts each on the device to the parameter's dtype; the .grad bits
            are the same either way)
  provider  diffusers' MiniMaxH3Transformer3DModel, loaded by h3strict.replay.load_provider (from_pretrained with
            torch_dtype=torch.bfloat16, the checkpoint's F32 modules kept F32 through accelerate, then .to(device),
            eval mode); the inputs file becomes its forward's arguments through h3strict.replay.provider_arguments
            (moved to the device before the timed region)

Phases (one row each):
  load              wall clock of the load call, CUDA initialised before (the context is not counted),
                    torch.cuda.synchronize() after; one measurement (the model directory's files are read once by
                    `cat` before each side by the shell script, so both read from the page cache)
  forward           model(**inputs) under torch.no_grad()
  forward+backward  out = model(**inputs) with every parameter requiring grad (as a user training all of them),
                    loss = out.sample.float().square().sum() + out.audio_sample.float().sum(), loss.backward();
                    before each run (outside the timing) every p.grad is set to None (zero_grad(set_to_none=True))
                    and, strict, model.grads_f32 is emptied (so the previous run's gradients are freed)
Each run: torch.cuda.synchronize(), wall clock (time.perf_counter) around the call(s), torch.cuda.synchronize()
inside the timed interval.  --warmup runs first (at least 1), then up to --reps timed runs, as many as fit in the
phase's time budget (--phase-s, and an even share of what is left before --deadline among the phases still to
run; at least one when the deadline allows it): the number actually timed is recorded per row ("reps").  The
figure is the median.

Peak memory, per phase, from the start of its first warm-up to the end of its last timed run:
  peak_device_gb  sampled device usage: torch.cuda.mem_get_info() (total - free) every ~2 ms (--sample-ms) from a
                  background thread, the maximum (GB = 1e9 bytes).  Device-wide, so it is this process's usage
                  including its CUDA context (and anything else on the device, which on a device of our own is
                  nothing; the usage before the load is recorded as baseline_device_gb).  The library allocates
                  with cudaMalloc, outside torch's allocator, so this is the strict side's measure.  The sampler
                  runs during the timed runs of both sides alike (it takes the GIL for a moment every interval).
  peak_library_gb strict only: h3s_model_peak_bytes (reset before the phase), the library's own count of what its
                  passes hold in device memory (tapes, backward temporaries, parameter gradients before they are
                  handed over); not the weights, the kernels' workspace or the context.
  peak_torch_gb   torch.cuda.max_memory_allocated() (reset before the phase): what torch's allocator handed out.
                  The provider's measure; on the strict side it sees only the gradients the binding copies to the
                  device, not the library's memory.
With --device cpu (a rehearsal of the code paths on a machine without a GPU) peak_device_gb is the process's
resident host memory (sampled from /proc/self/statm), peak_torch_gb is null, and the timings are host timings.

--profile FILE: after the timed phases, one more forward+backward at the first S (after one warm-up run), under
torch.profiler with CUDA activity (CUPTI sees every kernel in the process, the library's as well as torch's), and
FILE gets: that run's wall time, the time the device spent in kernels and copies (the union of their intervals, and
the idle remainder: launch gaps and host work), the kernels and copies grouped by name, the longest total first, and
the host's CUDA runtime and driver calls grouped the same way (where the host waits or synchronises).
A profile, not a benchmark: the profiler's own overhead is in that run's wall time.

The side's JSON is rewritten after every phase, so a side stopped by its time limit keeps what it finished
("complete": false).  Progress lines ("[strict] S = 1133: forward+backward: ...") go to stdout as it goes.
"""

import argparse
import ctypes
import json
import math
import os
import platform
import statistics
import sys
import threading
import time
import traceback

PHASES = ("forward", "forward+backward")
GB = 1e9


# ------------------------------------------------------------------ small helpers

def _write_json(path, obj):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def _version(pkg):
    try:
        import importlib.metadata as md
        return md.version(pkg)
    except Exception:  # noqa: BLE001 -- provenance, not a requirement
        return None


def _say(side, msg):
    print(f"[{side}] {msg}", flush=True)


def _rss_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class PeakSampler:
    """The maximum of the device's used memory (CUDA: total - free from cudaMemGetInfo; CPU: this process's
    resident memory), sampled every `interval` seconds from a background thread between start() and stop()."""

    def __init__(self, torch, device, interval=0.002):
        self.torch, self.device, self.interval = torch, device, interval
        self.kind = ("cuda.mem_get_info: device total - free" if device == "cuda"
                     else "host resident memory (/proc/self/statm)")
        self.peak, self.samples = 0, 0
        self._stop = threading.Event()
        self._thread = None

    def used(self):
        if self.device == "cuda":
            free, total = self.torch.cuda.mem_get_info()
            return total - free
        return _rss_bytes()

    def _run(self):
        while not self._stop.is_set():
            try:
                u = self.used()
            except Exception:  # noqa: BLE001 -- a failed sample is skipped; the main thread reports errors
                u = 0
            if u > self.peak:
                self.peak = u
            self.samples += 1
            time.sleep(self.interval)

    def start(self):
        self.peak, self.samples = self.used(), 1
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.peak = max(self.peak, self.used())
        return self.peak


# ------------------------------------------------------------------ one side

class Side:
    def __init__(self, args):
        import torch
        self.torch = torch
        self.args = args
        self.side = args.side
        self.device = args.device
        self.deadline = args.deadline if args.deadline else math.inf
        self.sampler = PeakSampler(torch, self.device, args.sample_ms / 1e3)
        self.report = {
            "side": self.side, "device_kind": self.device, "model": os.path.abspath(args.model),
            "reps_requested": args.reps, "warmup": args.warmup, "phase_s": args.phase_s,
            "exact_grads": bool(args.exact_grads) if self.side == "strict" else None,
            "deadline_epoch": None if math.isinf(self.deadline) else self.deadline,
            "peak_sampler": self.sampler.kind, "sample_ms": args.sample_ms, "gb": "1e9 bytes",
            "complete": False, "stage": "start",
            "results": [], "errors": [],
        }

    # -- bookkeeping
    def save(self):
        _write_json(self.args.json, self.report)

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def torch_peak_reset(self):
        if self.device == "cuda":
            self.torch.cuda.reset_peak_memory_stats()

    def torch_peak(self):
        if self.device == "cuda":
            return self.torch.cuda.max_memory_allocated() / GB
        return None

    def left(self):
        return self.deadline - time.time()

    # -- environment
    def environment(self):
        torch = self.torch
        env = {"python": platform.python_version(), "torch": torch.__version__,
               "torch_cuda": torch.version.cuda, "numpy": _version("numpy")}
        try:
            import h3strict
            env["h3strict"] = h3strict.__version__
        except Exception as e:  # noqa: BLE001
            env["h3strict"] = f"unavailable: {e}"
        # the modules the load needs are imported here, before the load is timed
        if self.side == "provider":
            import accelerate  # noqa: F401
            from diffusers import MiniMaxH3Transformer3DModel  # noqa: F401
            import h3strict.replay  # noqa: F401
            env["diffusers"] = _version("diffusers")
            env["accelerate"] = _version("accelerate")
        else:
            import h3strict.torch  # noqa: F401
        self.report["versions"] = env
        if self.device == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("--device cuda: torch sees no CUDA device")
            torch.zeros(1, device="cuda")  # the CUDA context, before anything is timed
            torch.cuda.synchronize()
            p = torch.cuda.get_device_properties(0)
            free, total = torch.cuda.mem_get_info()
            self.report["gpu"] = {"name": p.name, "total_gb": total / GB, "capability": f"{p.major}.{p.minor}"}
            self.report["baseline_device_gb"] = (total - free) / GB
        else:
            self.report["gpu"] = None
            self.report["baseline_device_gb"] = _rss_bytes() / GB

    # -- inputs
    def read_inputs(self):
        from h3strict.replay import provider_arguments, read_inputs
        self.inputs = []
        for item in self.args.inputs.split(","):
            s, path = item.split("=", 1)
            x = read_inputs(path)
            S = int(x["token_tags"].shape[-1])  # the packed layout, shared by the batch's items
            if S != int(s):
                raise RuntimeError(f"{path}: {S} packed rows, the command line says {s}")
            layout = {"S": S, "B": int(x["hidden_states"].shape[0]), "text": int(x["text_indices"].shape[-1]),
                      "video_rows": int(x["video_indices"].shape[-1]),
                      "audio_rows": int(x["audio_indices"].shape[-1]), "file": os.path.abspath(path)}
            if self.side == "strict":
                from h3strict.torch import load_inputs
                args = load_inputs(path)  # host tensors, read in place by the library
            else:
                args = provider_arguments(x, self.device)
            self.inputs.append((S, layout, args))
        self.report["sequences"] = [lay for _, lay, _ in self.inputs]

    # -- load
    def load(self):
        self.report["stage"] = "load"
        self.save()
        _say(self.side, f"load {self.args.model} on {self.device}")
        self.torch_peak_reset()
        self.sampler.start()
        err = None
        t0 = time.perf_counter()
        try:
            if self.side == "strict":
                from h3strict.torch import StrictTransformer
                self.model = StrictTransformer.from_pretrained(self.args.model, device=self.device,
                                                               exact_grads=bool(self.args.exact_grads))
            else:
                from h3strict.replay import load_provider
                self.model = load_provider(self.args.model, self.device)
            self.sync()
        except BaseException as e:  # noqa: BLE001 -- recorded, then re-raised
            err = e
        ms = (time.perf_counter() - t0) * 1e3
        peak = self.sampler.stop()
        row = {"phase": "load", "S": None, "ms": None if err else ms, "times_ms": [] if err else [ms],
               "reps": 0 if err else 1, "warmup": 0, "peak_device_gb": peak / GB, "peak_torch_gb": self.torch_peak(),
               "error": None if err is None else f"{type(err).__name__}: {err}"}
        self.report["results"].append(row)
        self.save()
        if err is not None:
            raise err
        params = list(self.model.parameters())
        dtypes = {}
        for p in params:
            k = str(p.dtype).replace("torch.", "")
            dtypes[k] = dtypes.get(k, 0) + p.numel()
        cfg = self.model.config
        layers = cfg.num_layers if hasattr(cfg, "num_layers") else cfg["num_layers"]
        self.report["layers"] = int(layers)
        self.lib_fns = self._lib_peak_fns()
        self.report["parameters"] = {"tensors": len(params), "elements_by_dtype": dtypes,
                                     "requires_grad": sum(1 for p in params if p.requires_grad)}
        _say(self.side, f"load: {ms:.0f} ms, {layers} blocks, peak {peak / GB:.2f} GB sampled")

    # -- the library's own count of the bytes its passes hold (strict side; h3s_model_peak_bytes, when the built
    #    library has it): tapes, backward temporaries, gradients before they are handed over; not the weights
    def _lib_peak_fns(self):
        if self.side != "strict":
            return None
        try:
            from h3strict._lib import lib
            peak = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)(
                ctypes.cast(lib.h3s_model_peak_bytes, ctypes.c_void_p).value)
            reset = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
                ctypes.cast(lib.h3s_model_reset_peak_bytes, ctypes.c_void_p).value)
            return peak, reset, self.model._core.handle
        except (AttributeError, ImportError):
            return None

    def lib_peak_reset(self):
        f = getattr(self, "lib_fns", None)
        if f:
            f[1](f[2])

    def lib_peak(self):
        f = getattr(self, "lib_fns", None)
        return f[0](f[2]) / GB if f else None

    # -- the timed runs
    def _zero(self):
        for p in self.model.parameters():
            p.grad = None
        if self.side == "strict":
            self.model.grads_f32 = {}

    def _run_once(self, phase, args):
        torch = self.torch
        if phase == "forward":
            with torch.no_grad():
                out = self.model(**args)
            del out
        else:
            out = self.model(**args)
            loss = out.sample.float().square().sum() + out.audio_sample.float().sum()
            loss.backward()
            del out, loss

    def timed(self, phase, args):
        if phase == "forward+backward":
            self._zero()
        self.sync()
        t0 = time.perf_counter()
        self._run_once(phase, args)
        self.sync()
        return (time.perf_counter() - t0) * 1e3

    def phase(self, S, phase, args, phases_left):
        label = f"S = {S}: {phase}"
        row = {"phase": phase, "S": S, "ms": None, "times_ms": [], "warmup_ms": [], "reps": 0,
               "warmup": 0, "peak_device_gb": None, "peak_torch_gb": None, "peak_library_gb": None, "error": None,
               "skipped": None}
        self.report["results"].append(row)
        reserve = 3.0  # seconds kept before the deadline for writing the JSON
        budget = min(self.args.phase_s, max(0.0, (self.left() - reserve) / max(1, phases_left)))
        if self.left() < reserve + 1:
            row["skipped"] = "deadline"
            _say(self.side, f"{label}: skipped (the deadline is near)")
            self.save()
            return
        row["skipped"] = "stopped while running (the side's time limit, or a crash)"
        self.save()  # a side stopped by its time limit leaves this row saying so
        row["skipped"] = None
        self.torch_peak_reset()
        self.lib_peak_reset()
        self.sampler.start()
        start = time.time()
        try:
            last = None
            for i in range(max(1, self.args.warmup)):
                if i > 0 and self.left() < reserve + 1.5 * last / 1e3:
                    break
                last = self.timed(phase, args)
                row["warmup_ms"].append(last)
                row["warmup"] += 1
            _say(self.side, f"{label}: {row['warmup']} warm-up run(s), the last {last:.2f} ms")
            est = max(last, 1e-3) / 1e3
            for _ in range(self.args.reps):
                spent = time.time() - start
                if row["reps"] >= 1 and spent + est > budget:
                    break
                if self.left() < reserve + 1.5 * est:
                    if row["reps"] == 0:
                        row["skipped"] = "deadline: no timed run fits"
                    break
                t = self.timed(phase, args)
                row["times_ms"].append(t)
                row["reps"] += 1
                est = max(statistics.median(row["times_ms"]), 1e-3) / 1e3
            if row["times_ms"]:
                row["ms"] = statistics.median(row["times_ms"])
        except BaseException as e:  # noqa: BLE001 -- recorded; KeyboardInterrupt/SystemExit re-raised below
            row["error"] = f"{type(e).__name__}: {e}"
            self.report["errors"].append({"S": S, "phase": phase, "traceback": traceback.format_exc()[-4000:]})
            _say(self.side, f"{label}: ERROR {row['error']}")
            if not isinstance(e, Exception):
                raise
        finally:
            row["peak_device_gb"] = self.sampler.stop() / GB
            row["peak_torch_gb"] = self.torch_peak()
            row["peak_library_gb"] = self.lib_peak()
            row["samples"] = self.sampler.samples
            self._zero()
            if self.device == "cuda":
                try:
                    self.torch.cuda.empty_cache()
                except Exception:  # noqa: BLE001
                    pass
            self.save()
        if row["ms"] is not None:
            _say(self.side, f"{label}: median {row['ms']:.2f} ms of {row['reps']} (min {min(row['times_ms']):.2f}), "
                            f"peak {row['peak_device_gb']:.2f} GB sampled"
                            + (f", {row['peak_torch_gb']:.2f} GB torch allocator" if row["peak_torch_gb"] else ""))

    def run(self):
        self.environment()
        self.read_inputs()
        self.save()
        self.load()
        pending = [(S, ph, a) for S, _, a in self.inputs for ph in PHASES]
        for k, (S, ph, a) in enumerate(pending):
            self.report["stage"] = f"S = {S}: {ph}"
            self.phase(S, ph, a, len(pending) - k)
        if self.args.profile and self.inputs:
            self.report["stage"] = "profile"
            self.save()
            self.profile(self.args.profile)
        self.report["stage"] = "done"
        self.report["complete"] = all(r.get("ms") is not None for r in self.report["results"])
        self.save()
        return 0 if self.report["complete"] else 1

    def profile(self, path):
        """One forward+backward at the first S under torch.profiler: kernels and copies by name (--profile)."""
        torch = self.torch
        S, _, args = self.inputs[0]
        if self.left() < 30:
            _say(self.side, "profile: skipped, less than 30 s before the deadline")
            return
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device == "cuda" else [])
        self._zero()
        self._run_once("forward+backward", args)  # warm-up
        self._zero()
        self.sync()
        with profile(activities=acts) as prof:
            t0 = time.perf_counter()
            self._run_once("forward+backward", args)
            self.sync()
            wall_ms = (time.perf_counter() - t0) * 1e3
        spans, groups, api = [], {}, {}
        dev_ops, host_ops = [], []  # (start, end, name): the device timeline and the host's calls, for the gaps

        def count(table, name, us):  # name -> [calls, total ms]
            g = table.setdefault(name, [0, 0.0])
            g[0] += 1
            g[1] += us / 1e3

        for e in prof.events():
            t_a, t_b = e.time_range.start, e.time_range.end
            if str(e.device_type).endswith("CUDA"):  # a kernel or a copy on the device
                spans.append((t_a, t_b))
                count(groups, e.name, t_b - t_a)
                dev_ops.append((t_a, t_b, e.name))
            else:
                if e.name.startswith("cu"):  # a CUDA runtime or driver call on the host
                    count(api, e.name, t_b - t_a)
                host_ops.append((t_a, t_b, e.name))
        busy_ms, end = 0.0, None
        for a, b in sorted(spans):  # the union of the device intervals
            if end is None or a > end:
                busy_ms += (b - a) / 1e3
                end = b
            elif b > end:
                busy_ms += (b - end) / 1e3
                end = b
        total_ms = sum(g[1] for g in groups.values())
        lines = [f"# {self.side}: one forward+backward at S = {S}, {self.report.get('layers')} blocks, "
                 f"device {self.device} (torch.profiler; model_bench.py --profile)",
                 f"wall {wall_ms:.2f} ms; device busy {busy_ms:.2f} ms (idle {wall_ms - busy_ms:.2f} ms); "
                 f"kernel and copy time summed {total_ms:.2f} ms over {len(spans)} launches",
                 "", f"{'total ms':>10} {'share':>6} {'count':>6}  name"]
        for name, (n, ms) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
            lines.append(f"{ms:10.3f} {100 * ms / total_ms if total_ms else 0:5.1f}% {n:6d}  {name[:160]}")
        lines += ["", "host side: CUDA runtime and driver calls by name, longest total first (a synchronising call's",
                  "time includes the wait for the device)", f"{'total ms':>10} {'count':>6}  name"]
        for name, (n, ms) in sorted(api.items(), key=lambda kv: -kv[1][1])[:25]:
            lines.append(f"{ms:10.3f} {n:6d}  {name[:120]}")
        lines += _gap_report(dev_ops, host_ops)
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        _say(self.side, f"profile: wall {wall_ms:.1f} ms, device busy {busy_ms:.1f} ms, "
                        f"{len(groups)} kernel names -> {path}")


def _gap_report(dev_ops, host_ops, top=20, min_us=20.0):
    """Where the device waited: the longest gaps between consecutive device operations (kernels, copies), each with
    the operations on either side and the host calls (CUDA runtime, torch operators) that ran during it."""
    dev_ops = sorted(dev_ops)
    gaps, end, prev = [], None, None
    for a, b, name in dev_ops:
        if end is not None and a - end >= min_us:
            gaps.append((a - end, end, a, prev, name))
        if end is None or b > end:
            end, prev = b, name
    total = sum(g[0] for g in gaps)
    out = ["", f"device gaps of at least {min_us:.0f} us: {len(gaps)}, {total / 1e3:.2f} ms in all; the {top} longest "
           "(us, the device operation before and after, the host calls that started in the gap)"]
    host_ops = sorted(host_ops)
    for g, a, b, before, after in sorted(gaps, reverse=True)[:top]:
        during = {}
        for ha, hb, hn in host_ops:
            if ha >= b:
                break
            if ha >= a:
                d = during.setdefault(hn, [0, 0.0])
                d[0] += 1
                d[1] += (min(hb, b) - ha)
        calls = ", ".join(f"{n[:48]} x{c} {us:.0f}us" for n, (c, us) in
                          sorted(during.items(), key=lambda kv: -kv[1][1])[:6])
        out.append(f"{g:9.0f}  after {before[:40]} | before {after[:40]} | {calls}")
    return out


def cmd_side(args):
    side = None
    try:
        side = Side(args)
        return side.run()
    except Exception as e:  # noqa: BLE001 -- the JSON says what happened; exit 3
        if side is not None:
            side.report["errors"].append({"stage": side.report.get("stage"),
                                          "traceback": traceback.format_exc()[-4000:]})
            side.report["error"] = f"{type(e).__name__}: {e}"
            side.save()
        print(f"[{args.side}] FAILED: {type(e).__name__}: {e}", flush=True)
        traceback.print_exc()
        return 3


# ------------------------------------------------------------------ combine and table

def _load_side(path):
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _index(side):
    out = {}
    for r in (side or {}).get("results", []):
        out[(r.get("S"), r.get("phase"))] = r
    return out


def cmd_combine(args):
    strict, provider = _load_side(args.strict), _load_side(args.provider)
    meta = _load_side(args.meta) or {}
    si, pi = _index(strict), _index(provider)
    seqs = []
    for side in (strict, provider):
        for s in (side or {}).get("sequences", []):
            if s["S"] not in seqs:
                seqs.append(s["S"])
    layers = None
    for side in (strict, provider):
        if side and side.get("layers") is not None:
            if layers is not None and layers != side["layers"]:
                print(f"combine: the sides loaded different depths ({layers}, {side['layers']})", file=sys.stderr)
            layers = side["layers"]
    if layers is None:
        layers = meta.get("layers")
    keys = [(None, "load")] + [(s, ph) for s in seqs for ph in PHASES]
    rows = []
    for S, ph in keys:
        a, b = si.get((S, ph), {}), pi.get((S, ph), {})
        sm, pm = a.get("ms"), b.get("ms")
        rows.append({
            "layers": layers, "S": S, "phase": ph, "strict_ms": sm, "provider_ms": pm,
            "ratio": (sm / pm) if (sm is not None and pm) else None,
            "strict_peak_gb": a.get("peak_device_gb"), "provider_peak_gb": b.get("peak_torch_gb"),
            "provider_device_peak_gb": b.get("peak_device_gb"), "strict_torch_peak_gb": a.get("peak_torch_gb"),
            "strict_library_peak_gb": a.get("peak_library_gb"),
            "strict_reps": a.get("reps"), "provider_reps": b.get("reps"),
            "strict_first_ms": (a.get("warmup_ms") or a.get("times_ms") or [None])[0],
            "provider_first_ms": (b.get("warmup_ms") or b.get("times_ms") or [None])[0],
            "strict_error": a.get("error") or a.get("skipped"), "provider_error": b.get("error") or b.get("skipped"),
        })
    device_kind = (strict or provider or {}).get("device_kind", meta.get("device_kind"))
    versions = {}
    for side in (strict, provider):
        versions.update((side or {}).get("versions", {}))
    out = {
        "benchmark": "issue 10 (b): the whole model at release geometry, h3strict vs diffusers, one model directory",
        "sequences": (strict or provider or {}).get("sequences"),
        "baseline_device_gb": {"strict": (strict or {}).get("baseline_device_gb"),
                               "provider": (provider or {}).get("baseline_device_gb")},
        "layers": layers, "source_commit": meta.get("source_commit"), "device": meta.get("device") or
        (strict or provider or {}).get("gpu"), "device_kind": device_kind, "versions": versions,
        "reps": meta.get("reps", (strict or provider or {}).get("reps_requested")),
        "warmup": meta.get("warmup", (strict or provider or {}).get("warmup")),
        "complete": bool(strict and provider and strict.get("complete") and provider.get("complete")),
        "rows": rows,
        "notes": {
            "ms": "median wall clock of the timed runs, torch.cuda.synchronize() before and inside the interval; "
                  "load: one measurement of from_pretrained (CUDA context created before)",
            "ratio": "strict_ms / provider_ms",
            "first_ms": "strict_first_ms / provider_first_ms: the first run of the phase (a warm-up, untimed in the "
                        "median); the only figure of a phase whose timed runs did not fit in the time limit",
            "strict_peak_gb": "sampled device usage of the strict process (torch.cuda.mem_get_info total - free, every "
                              "~2 ms from a background thread, the maximum over the phase), including its CUDA "
                              "context; GB = 1e9 bytes",
            "provider_peak_gb": "torch.cuda.max_memory_allocated over the phase (torch's allocator, no CUDA context)",
            "provider_device_peak_gb": "the provider process's sampled device usage, as strict_peak_gb (comparable "
                                       "with it)",
            "strict_torch_peak_gb": "torch's allocator in the strict process: the parameter gradients the binding "
                                    "copies to the device, not the library's own memory",
            "strict_library_peak_gb": "h3s_model_peak_bytes over the phase: the bytes the library's passes hold in "
                                      "device memory (tapes, backward temporaries, gradients before they are handed "
                                      "over), not the weights, the CUDA workspace or the context",
            "inputs": "strict: host tensors (the binding reads its inputs from host memory; on CUDA its outputs are "
                      "torch CUDA tensors the library fills, since 4d6ea14); provider: device tensors moved before "
                      "the timed region",
            "cpu": "with device_kind cpu, a rehearsal of the code paths: host timings, peaks are host resident memory",
        },
        "meta": meta, "strict": strict, "provider": provider,
    }
    _write_json(args.out, out)
    print(_table(out))
    return 0 if out["complete"] else 1


def _fmt(v, nd=2):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _ratio(v):
    return "-" if v is None else f"{v:.3g}"


def _table(d):
    dev = (d.get("device") or {}).get("name", d.get("device_kind"))
    lines = [f"Whole model, {d.get('layers')} blocks, device {dev}"
             f", commit {d.get('source_commit')}" + ("" if d.get("complete") else " (incomplete)"), "",
             "| S | phase | strict ms | provider ms | strict / provider | strict peak GB (device, sampled) "
             "| provider peak GB (torch allocator) | provider peak GB (device, sampled) | reps strict / provider |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in d["rows"]:
        note = ""
        if r.get("strict_error") or r.get("provider_error"):
            note = " (" + "; ".join(f"{k}: {r[k + '_error']}" for k in ("strict", "provider")
                                    if r.get(k + "_error")) + ")"
        lines.append(f"| {_fmt(r['S'])} | {r['phase']}{note} | {_fmt(r['strict_ms'])} | {_fmt(r['provider_ms'])} | "
                     f"{_ratio(r['ratio'])} | {_fmt(r['strict_peak_gb'])} | {_fmt(r['provider_peak_gb'])} | "
                     f"{_fmt(r.get('provider_device_peak_gb'))} | {_fmt(r.get('strict_reps'))} / "
                     f"{_fmt(r.get('provider_reps'))} |")
    return "\n".join(lines)


def cmd_table(args):
    with open(args.json) as f:
        print(_table(json.load(f)))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("side", help="one side's load and timings")
    s.add_argument("--side", choices=("strict", "provider"), required=True)
    s.add_argument("--model", required=True)
    s.add_argument("--inputs", required=True, help="S=FILE[,S=FILE...] (S: the file's packed rows, checked)")
    s.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    s.add_argument("--reps", type=int, default=10)
    s.add_argument("--warmup", type=int, default=2)
    s.add_argument("--phase-s", type=float, default=40.0, help="seconds of runs per (S, phase) at most")
    s.add_argument("--deadline", type=float, default=0.0, help="epoch seconds by which the side must be done")
    s.add_argument("--sample-ms", type=float, default=2.0, help="interval of the peak-memory sampler (ms)")
    s.add_argument("--exact-grads", type=int, choices=(0, 1), default=0,
                   help="strict: 1 = every parameter gradient handed over in F32 (exact_grads=True)")
    s.add_argument("--profile", default=None, help="write a per-kernel profile of one forward+backward here")
    s.add_argument("--json", required=True)
    c = sub.add_parser("combine", help="the two sides into bench_model.json (and the table on stdout)")
    c.add_argument("--strict")
    c.add_argument("--provider")
    c.add_argument("--meta")
    c.add_argument("--out", required=True)
    t = sub.add_parser("table", help="the Markdown table of a bench_model.json")
    t.add_argument("json")
    args = ap.parse_args(argv)
    return {"side": cmd_side, "combine": cmd_combine, "table": cmd_table}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
