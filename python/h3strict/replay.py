"""Per-node replay against the provider: every node of the model computed by diffusers' MiniMaxH3Transformer3DModel
(the provider, in the checkpoint's mixed precision), by h3strict chained (its own forward, fed by its own upstream
nodes) and isolated (the node's strict operator called through the library on the provider's own inputs of that
node), each measured against an FP64 golden.

    python -m h3strict.replay --model DIR --inputs IN.safetensors --out REPORT.json [--device cpu|cuda]
                              [--blocks LIST] [--backward] [--threads N]

The node names are those of `h3strict replay` (docs/strict.md section 4).  The report format, the isolated
promises and the exit codes are in docs/cli.md ("python -m h3strict.replay").

Goldens.  Chained: the provider's own module cast to float64 (every parameter and buffer), run on the same inputs
with the same taps, so a node's chained golden is the FP64 value of that node along the whole graph.  Isolated: the
node's function in float64 (docs/model.md section 3, written here) on the provider's captured inputs of the node,
upcast exactly; the strict node and the provider's node are measured against that same golden.
"""

import argparse
import contextlib
import copy
import ctypes
import hashlib
import json
import math
import operator
import os
import re
import sys
import tempfile
import time
import traceback

import torch

from . import _lib
from ._lib import H3StrictError, H3StrictInputError, Tensor, check, lib, path_arg
from .torch import _TORCH_DTYPE, _library_view, _shape

EXIT_OK, EXIT_DIFFER, EXIT_USAGE, EXIT_INPUT, EXIT_DEVICE = 0, 1, 2, 3, 4
# a node the replay could not check (a provider or golden value missing, not comparable, or a golden that is not
# finite): the provider run on this model and these inputs did not give what the comparison needs, so the exit is
# the bad-input one, and only when no comparison differed (a difference found is exit 1 with or without it)
EXIT_UNCHECKED = EXIT_INPUT
MAX_THREADS = 1024
_ASCII_DIGITS = re.compile(r"[0-9]+")
FORWARD_BOUND = (1.25, 1e-3)   # docs/strict.md section 1, contract 4
GRADIENT_BOUND = (1.5, 5e-3)
COTANGENT_SEED = 1234

# Nodes whose strict operator, given the provider's inputs, promises the provider's exact bits (docs/numerics/
# provider.md says why these and no others).  Keyed by the node's name without its block prefix; "refiner:" marks
# a promise that holds in the token refiner only.
BITWISE_PROMISES = {
    "pack": "data movement: rows copied, video and audio rows rounded once F32 -> BF16 (round to nearest even)",
    "refiner:residual_attn": "plain residual r + y: one FP32 addition, one rounding to BF16, as the provider",
    "refiner:residual_mlp": "plain residual r + y: one FP32 addition, one rounding to BF16, as the provider",
}

_BITS = {torch.float32: torch.int32, torch.float64: torch.int64, torch.bfloat16: torch.int16}


class ReplayError(Exception):
    """A refusal with the exit code it maps to."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------ tensors across the C API

def _ht(x):
    """The library's view of a contiguous torch tensor (its memory; host or CUDA)."""
    if x is None:
        return None
    if not x.is_contiguous():
        raise ValueError("internal: a non-contiguous tensor reached the library")
    return _library_view(x)


def _ref(t):
    return ctypes.byref(t) if t is not None else None


def _host_copy(t):
    """A torch CPU tensor holding the bytes of a library tensor (host or device)."""
    out = torch.empty(_shape(t), dtype=_TORCH_DTYPE[t.dtype])
    if out.numel():
        dst = _ht(out)
        check(lib.h3s_tensor_copy(ctypes.byref(t), ctypes.byref(dst)))
    return out


def _bits_equal(a, b):
    if a is None or b is None or a.dtype != b.dtype or a.numel() != b.numel():
        return False
    a, b = a.reshape(-1), b.reshape(-1)
    v = _BITS.get(a.dtype)
    return bool(torch.equal(a.view(v), b.view(v))) if v else bool(torch.equal(a, b))


def _first_differing_row(a, b, rows):
    """First row (of `rows` rows) where the bits of a and b differ; None when equal, 0 when not comparable."""
    if a.dtype != b.dtype or a.numel() != b.numel():
        return 0
    v = _BITS.get(a.dtype)
    x, y = a.reshape(rows, -1), b.reshape(rows, -1)
    if v:
        x, y = x.view(v), y.view(v)
    diff = (x != y).any(dim=1).nonzero()
    return int(diff[0, 0]) if diff.numel() else None


def _sha(t):
    t = t.detach().contiguous().cpu()
    # the tensor's bytes are hashed in place (a numpy view is a buffer), not copied first
    return hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b"").hexdigest()


def _rel_l2(x, ref):
    """||x - ref|| / ||ref|| in float64; None when not comparable, inf for a non-finite difference."""
    if x is None or ref is None or x.numel() != ref.numel():
        return None
    r = ref.detach().reshape(-1).to(torch.float64)
    a = x.detach().reshape(-1).to(device=r.device, dtype=torch.float64)  # on the golden's device
    num = float(torch.linalg.vector_norm(a - r))
    den = float(torch.linalg.vector_norm(r))
    if not math.isfinite(num):
        return math.inf
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den


def _json_num(v):
    if v is None:
        return None
    return v if math.isfinite(v) else "inf"


# ------------------------------------------------------------------ the provider's taps

_H3_MODULE = "diffusers.models.transformers.transformer_minimax_h3"


class _Tap:
    """Records, by node name, the values of the provider's nodes and the inputs each node was given (forward
    hooks and pre-hooks on the modules; the two inline operations of the attention processor, rotary embedding
    and the attention call, through wrappers of the module's own functions).  With `grads` it also registers
    hooks that record the gradient reaching each node, named as the strict backward names it."""

    def __init__(self, model, grads, offload=False, record_inputs=True):
        # offload: keep the recorded values in host memory (the FP64 golden's values on a GPU run);
        # record_inputs: keep each node's inputs too (the isolated nodes need the provider's)
        self.model, self.grads, self.offload, self.record_inputs = model, grads, offload, record_inputs
        self.values, self.inputs, self.grad_values = {}, {}, {}
        self.handles = []
        self._attn_prefix, self._rope_calls = None, 0

    def _keep(self, t):
        return t.detach().to("cpu", copy=True) if self.offload else t.detach().clone()

    def _val(self, name, t):
        self.values[name] = self._keep(t)

    def _inp(self, name, **kw):
        if not self.record_inputs:
            return
        self.inputs[name] = {k: (self._keep(v) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}

    def _grad(self, name, t, select=None):
        if self.grads and isinstance(t, torch.Tensor) and t.requires_grad:
            def hook(g, name=name):
                self.grad_values[name] = self._keep(g if select is None else select(g))
            t.register_hook(hook)

    def _module_grad_input(self, module, name, select=None):
        """The gradient a module sends to its first input (this consumer's share only)."""
        if not self.grads:
            return

        def hook(mod, grad_input, grad_output, name=name):
            g = grad_input[0]
            if g is not None:
                self.grad_values[name] = self._keep(g if select is None else select(g))
        self.handles.append(module.register_full_backward_hook(hook))

    def _pre(self, module, fn):
        self.handles.append(module.register_forward_pre_hook(fn, with_kwargs=True))

    def _post(self, module, fn):
        self.handles.append(module.register_forward_hook(fn, with_kwargs=True))

    def install(self, layout):
        m = self.model
        self.layout = layout

        def rope(mod, args, kwargs, out):
            self._val("rope_table", out[0])
            self.values["rope_table.sin"] = out[1].detach().clone()
            self._inp("rope_table", position_ids=args[0] if args else kwargs["position_ids"])
        self._post(m.rope, rope)

        def time_proj(mod, args, kwargs, out):
            self._val("timestep_sinusoid", out)
            self._inp("timestep_sinusoid", t=args[0])
        self._post(m.time_proj, time_proj)

        def time_mlp(mod, args, kwargs, out):
            self._val("timestep_mlp", out)
            self._inp("timestep_mlp", x=args[0])
            self._grad("timestep_mlp.grad", out)
        self._post(m.time_embedder, time_mlp)

        for name in ("proj_in", "audio_proj_in", "context_embedder"):
            def proj(mod, args, kwargs, out, name=name):
                self._val(name, out.reshape(-1, out.shape[-1]))
                self._inp(name, x=args[0].reshape(-1, args[0].shape[-1]))
                self._grad(name + ".grad", args[0], lambda g: g.reshape(-1, g.shape[-1]))
            self._post(getattr(m, name), proj)

        for i, blk in enumerate(m.token_refiner.refiner_blocks):
            self._install_block(blk, f"refiner.{i}", refiner=True)

        def final_norm(mod, args, kwargs, out):
            self._val("refiner.final_norm", out.reshape(-1, out.shape[-1]))
            self._inp("refiner.final_norm", x=args[0].reshape(-1, args[0].shape[-1]))
            self._grad("refiner.final_norm.grad", args[0], lambda g: g.reshape(-1, g.shape[-1]))
        self._post(m.token_refiner.final_norm, final_norm)

        def pack(mod, args, kwargs):
            x = args[0]
            self._val("pack", x.reshape(-1, x.shape[-1]))
            self._grad("pack.grad", x, lambda g: g.reshape(-1, g.shape[-1]))
        self._pre(m.transformer_blocks[0], pack)

        for i, blk in enumerate(m.transformer_blocks):
            self._install_block(blk, f"block.{i}", refiner=False)

        def norm_out(mod, args, kwargs, out):
            x, temb = args[0], args[1]
            self._val("norm_out", out.reshape(-1, out.shape[-1]))
            self._inp("norm_out", x=x.reshape(-1, x.shape[-1]), temb=temb)
            self._grad("norm_out.grad", x, lambda g: g.reshape(-1, g.shape[-1]))
        self._post(m.norm_out, norm_out)

        for name, idx in (("proj_out", layout["video_indices"]), ("audio_proj_out", layout["audio_indices"])):
            def head(mod, args, kwargs, out, name=name, idx=idx):
                sel = out.index_select(1, idx.to(out.device))
                self._val(name, sel.reshape(-1, sel.shape[-1]))
                x = args[0].index_select(1, idx.to(out.device))
                self._inp(name, x=x.reshape(-1, x.shape[-1]))

            def select(g, idx=idx):
                s = g.index_select(1, idx.to(g.device))
                return s.reshape(-1, s.shape[-1])
            self._post(getattr(m, name), head)
            self._module_grad_input(getattr(m, name), name + ".grad", select)

    def _install_block(self, blk, pre, refiner):
        flat = (lambda t: t.reshape(-1, t.shape[-1]))

        def flat_heads(t):  # [B, S, heads, D] -> [B*S, heads*D]
            return t.reshape(t.shape[0] * t.shape[1], -1)

        def block_in(mod, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            self._inp(pre + ".block", x=flat(x))
            self._grad(pre + ".norm1.grad", x, flat)
        self._pre(blk, block_in)

        def block_out(mod, args, kwargs, out):
            self._val(pre + ".residual_mlp", flat(out))
        self._post(blk, block_out)

        if not refiner:
            def adaln(mod, args, kwargs, out):
                self._val(pre + ".adaln_projection", torch.cat(out, dim=-1))
                self._inp(pre + ".adaln_projection", temb=args[0])
            self._post(blk.adaln_proj, adaln)
            self._module_grad_input(blk.adaln_proj, pre + ".adaln_projection.grad")

        attn = blk.attn

        def attn_in(mod, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            self._val(pre + ".norm1", flat(x))
            self._attn_prefix, self._rope_calls = pre, 0
        self._pre(attn, attn_in)

        def attn_done(mod, args, kwargs, out):
            self._attn_prefix = None
        self._post(attn, attn_done)

        for lin, node in ((attn.to_q, "q_proj"), (attn.to_k, "k_proj"), (attn.to_v, "v_proj")):
            def proj(mod, args, kwargs, out, node=node):
                self._val(f"{pre}.{node}", flat(out))
            self._post(lin, proj)
            self._module_grad_input(lin, f"{pre}.{node}.grad", flat)
        self._post(attn.to_q, lambda mod, a, k, out: self._grad(pre + ".q_norm.grad", out, flat))
        self._post(attn.to_k, lambda mod, a, k, out: self._grad(pre + ".k_norm.grad", out, flat))

        for norm, node, grad_node in ((attn.norm_q, "q_norm", "rope_q.grad"), (attn.norm_k, "k_norm", "rope_k.grad")):
            def qk(mod, args, kwargs, out, node=node, grad_node=grad_node):
                self._val(f"{pre}.{node}", flat_heads(out))
                if not refiner:
                    self._grad(f"{pre}.{grad_node}", out, flat_heads)
            self._post(norm, qk)

        def out_in(mod, args, kwargs):
            self._val(pre + ".attention", flat(args[0]))
            self._grad(pre + ".o_proj.grad", args[0], flat)
        self._pre(attn.to_out[0], out_in)

        def out_out(mod, args, kwargs, out):
            self._val(pre + ".o_proj", flat(out))
            self._grad(pre + ".residual_attn.grad", out, flat)
        self._post(attn.to_out[0], out_out)

        def norm2_in(mod, args, kwargs):
            self._val(pre + ".residual_attn", flat(args[0]))
            self._grad(pre + ".norm2.grad", args[0], flat)
        self._pre(blk.norm2, norm2_in)

        def ff_in(mod, args, kwargs):
            self._val(pre + ".norm2", flat(args[0]))
            self._grad(pre + ".ffn_gate_up.grad", args[0], flat)
        self._pre(blk.ff, ff_in)

        def gate_up(mod, args, kwargs, out):
            self._val(pre + ".ffn_gate_up", flat(out))
            self._grad(pre + ".swiglu.grad", out, flat)
        self._post(blk.ff.net[0].proj, gate_up)

        def swiglu(mod, args, kwargs, out):
            self._val(pre + ".swiglu", flat(out))
            self._grad(pre + ".ffn_down.grad", out, flat)
        self._post(blk.ff.net[0], swiglu)

        def down(mod, args, kwargs, out):
            self._val(pre + ".ffn_down", flat(out))
            self._grad(pre + ".residual_mlp.grad", out, flat)
        self._post(blk.ff.net[2], down)

    @contextlib.contextmanager
    def inline_taps(self):
        """Wrap the attention processor's two inline operations (module functions of diffusers' MiniMax-H3
        module) so that their inputs and outputs are recorded; the originals compute, unchanged."""
        mod = sys.modules[_H3_MODULE]
        orig_rope, orig_attn = mod._apply_rotary_emb, mod.dispatch_attention_fn
        tap = self

        def rope(hidden_states, cos, sin):
            out = orig_rope(hidden_states, cos, sin)
            pre = tap._attn_prefix
            if pre is not None:
                node = "rope_q" if tap._rope_calls == 0 else "rope_k"
                tap._rope_calls += 1
                tap._val(f"{pre}.{node}", out.reshape(out.shape[0] * out.shape[1], -1))
            return out

        def attention(query, key, value, *args, **kwargs):
            pre = tap._attn_prefix
            if pre is not None:
                flat = (lambda t: t.reshape(t.shape[0] * t.shape[1], -1))
                tap._inp(pre + ".attention", q=flat(query), k=flat(key), v=flat(value))
                for t, which in ((query, "q"), (key, "k"), (value, "v")):
                    tap._grad(f"{pre}.attention.grad_{which}", t, flat)
            return orig_attn(query, key, value, *args, **kwargs)

        mod._apply_rotary_emb, mod.dispatch_attention_fn = rope, attention
        try:
            yield
        finally:
            mod._apply_rotary_emb, mod.dispatch_attention_fn = orig_rope, orig_attn

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def _cotangent(batch, nv, wv, na, wa, seed):
    """Seeded F32 cotangents; item b from its own generator, so item 0 does not depend on the batch size."""
    s, a = [], []
    for b in range(batch):
        g = torch.Generator().manual_seed(seed * 1000003 + b)
        s.append(torch.randn(nv, wv, generator=g, dtype=torch.float32))
        a.append(torch.randn(na, wa, generator=g, dtype=torch.float32))
    return torch.stack(s), torch.stack(a)


def _run_provider(model, x, device, backward, ct, offload=False, record_inputs=True):
    """One forward (and backward) of a diffusers model with its taps; returns the tap (values, inputs, grads)
    and the outputs."""
    layout = {k: x[k] for k in ("video_indices", "audio_indices", "text_indices")}
    tap = _Tap(model, backward, offload, record_inputs)
    tap.install(layout)
    args = provider_arguments(x, device)
    leaves = ("hidden_states", "audio_hidden_states", "encoder_hidden_states")
    params = {}
    try:
        with tap.inline_taps(), torch.set_grad_enabled(backward):
            if backward:
                for k in leaves:
                    args[k] = args[k].detach().clone().requires_grad_(True)
                for p in model.parameters():
                    p.grad = None
            out = model(**args)
            if backward:
                ds = ct[0].to(device=device, dtype=out.sample.dtype)
                da = ct[1].to(device=device, dtype=out.audio_sample.dtype)
                ((out.sample * ds).sum() + (out.audio_sample * da).sum()).backward()
                for name, p in model.named_parameters():
                    params["param." + name] = None if p.grad is None else tap._keep(p.grad)
                    p.grad = None
                tap.grad_values["proj_in.grad"] = tap._keep(args["hidden_states"].grad.reshape(
                    -1, args["hidden_states"].shape[-1]))
                tap.grad_values["audio_proj_in.grad"] = tap._keep(args["audio_hidden_states"].grad.reshape(
                    -1, args["audio_hidden_states"].shape[-1]))
    finally:
        tap.remove()
    tap.grad_values.update(params)
    return tap, out.sample.detach(), out.audio_sample.detach()


# ------------------------------------------------------------------ the strict library: chained

class _StrictRun:
    """One strict pass (forward, and backward when asked) through the library, with every node recorded: the
    value (host copy) when keep, else its SHA-256s (all bytes, and item 0's rows for batched nodes)."""

    def __init__(self, keep):
        self.keep, self.order, self.values, self.sha, self.sha_item0, self.batched = keep, [], {}, {}, {}, {}

    def hook(self, ctx, name, out, batched, rows_per_item):
        try:
            name = name.decode()
            t = _host_copy(out.contents)
            self.order.append(name)
            self.batched[name] = bool(batched)
            self.sha[name] = _sha(t)
            if batched and t.dim() >= 1 and t.shape[0] > 0:
                self.sha_item0[name] = _sha(t[:rows_per_item])
            else:
                self.sha_item0[name] = self.sha[name]
            if self.keep:
                self.values[name] = t
            return _lib.OK
        except BaseException as e:  # noqa: BLE001 -- carried across the C frames
            self.error = e
            return _lib.ERR_INVALID


def _c_inputs(x):
    c_in = _lib.Inputs()
    keep = []
    for name in _lib.INPUT_NAMES:
        v = x.get(name)
        if v is None:
            continue
        v = v.contiguous()
        keep.append(v)
        setattr(c_in, name, _ht(v))
    return c_in, keep


def _strict_pass(handle, x, backward, ct, keep):
    run = _StrictRun(keep)
    run.error = None
    c_hook = _lib.NODE_HOOK(run.hook)
    c_in, keep_alive = _c_inputs(x)
    tape = ctypes.c_void_p()
    s, a = Tensor(), Tensor()
    st = lib.h3s_model_forward(handle, ctypes.byref(c_in), c_hook, None, ctypes.byref(tape) if backward else None,
                               ctypes.byref(s), ctypes.byref(a))
    try:
        if run.error is not None:
            raise run.error
        check(st)
        if backward:
            ds, da = (t.contiguous() for t in ct)
            cs, ca = _ht(ds), _ht(da)
            g = _lib.Grads()
            st = lib.h3s_model_backward_select(handle, tape, ctypes.byref(cs), ctypes.byref(ca), None, c_hook, None,
                                               ctypes.byref(g))
            lib.h3s_grads_free(ctypes.byref(g))
            if run.error is not None:
                raise run.error
            check(st)
    finally:
        if tape:
            lib.h3s_tape_free(tape)
        lib.h3s_tensor_free(ctypes.byref(s))
        lib.h3s_tensor_free(ctypes.byref(a))
    del keep_alive
    return run


# ------------------------------------------------------------------ isolated: strict operator and FP64 golden

def _silu64(x):
    return x * torch.sigmoid(x)


def _rms64(x, w, eps):
    y = x * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + eps)
    return y if w is None else y * w


def _rope_apply64(x, heads, cos, sin):
    m = x.shape[0]
    s = cos.shape[0]
    r = cos.shape[1]
    xh = x.reshape(m, heads, -1)
    c = cos.repeat(m // s, 1)[:, None, :]
    sn = sin.repeat(m // s, 1)[:, None, :]
    rot, rest = xh[..., :r], xh[..., r:]
    x1, x2 = rot[..., :r // 2], rot[..., r // 2:]
    out = torch.cat((rot * c + torch.cat((-x2, x1), dim=-1) * sn, rest), dim=-1)
    return out.reshape(m, -1)


def _attention64(q, k, v, batch, heads):
    m = q.shape[0]
    s = m // batch

    def split(t):
        return t.reshape(batch, s, heads, -1).transpose(1, 2)
    qh, kh, vh = split(q), split(k), split(v)
    scores = qh @ kh.transpose(-1, -2) / math.sqrt(qh.shape[-1])
    out = torch.softmax(scores, dim=-1) @ vh
    return out.transpose(1, 2).reshape(m, -1)


class _Isolated:
    """Each node's strict operator (through include/h3s_ops.h) and its FP64 golden on the provider's inputs."""

    def __init__(self, provider, cfg, x, device, golden=False):
        # golden: the model and the captured values are float64, so the library's operators run its FP64 golden
        # backend (outputs that are F32 in strict mode are F64 there): a cross-check of the formulas below
        self.p, self.cfg, self.device = provider, cfg, device
        self.f32 = torch.float64 if golden else torch.float32
        self.B = x["hidden_states"].shape[0]
        self.S = x["token_tags"].shape[0]
        self.T = x["timestep"].shape[0]
        dev = device
        rows = x["timestep_indices"] * 3 + x["token_tags"].clamp(min=0)
        self.adaln_rows = rows.repeat(self.B).to(dev).contiguous()
        self.ts_rows = x["timestep_indices"].repeat(self.B).to(dev).contiguous()
        self.idx = {k: x[k].to(dev).contiguous() for k in ("video_indices", "audio_indices", "text_indices")}
        # the library's row scatter takes its index on the host (it refuses repeated rows there)
        self.idx_host = {k: x[k].cpu().contiguous() for k in self.idx}
        self.x = x

    def w(self, name):
        return self.p.get_parameter(name).detach().contiguous()

    def _sync(self):
        if self.device == "cuda":
            check(lib.h3s_device_synchronize())

    def _pre_call(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    def linear(self, x, wname, bname=None):
        w = self.w(wname)
        b = self.w(bname) if bname else None
        x = x.contiguous()
        y = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
        self._pre_call()
        tx, tw, tb, ty = _ht(x), _ht(w), _ht(b), _ht(y)
        check(lib.h3s_linear_forward(ctypes.byref(tx), ctypes.byref(tw), _ref(tb), ctypes.byref(ty)))
        self._sync()
        g = x.double() @ w.double().T
        if b is not None:
            g = g + b.double()
        return y, g

    def rmsnorm(self, x, wname, eps, table=None, shift=0, scale=1):
        w = self.w(wname)
        x = x.contiguous()
        y = torch.empty_like(x)
        tx, tw, ty = _ht(x), _ht(w), _ht(y)
        mod = None
        if table is not None:
            table = table.contiguous()
            tt, ti = _ht(table), _ht(self.adaln_rows)
            mod = _lib.Modulation(ctypes.pointer(tt), ctypes.pointer(ti), shift, scale)
        self._pre_call()
        check(lib.h3s_rmsnorm_forward(ctypes.byref(tx), ctypes.byref(tw), _ref(mod), float(eps), ctypes.byref(ty)))
        self._sync()
        g = _rms64(x.double(), w.double(), eps)
        if table is not None:
            h = x.shape[1]
            t64 = table.double()[self.adaln_rows]
            g = g * (1 + t64[:, scale * h:(scale + 1) * h]) + t64[:, shift * h:(shift + 1) * h]
        return y, g

    def head_norm(self, x, wname, eps):
        w = self.w(wname)
        heads = self.cfg["num_attention_heads"]
        x = x.contiguous()
        y = torch.empty_like(x)
        tx, tw, ty = _ht(x), _ht(w), _ht(y)
        self._pre_call()
        check(lib.h3s_head_rmsnorm_forward(ctypes.byref(tx), heads, ctypes.byref(tw), float(eps), ctypes.byref(ty)))
        self._sync()
        g = _rms64(x.double().reshape(x.shape[0], heads, -1), w.double(), eps).reshape(x.shape[0], -1)
        return y, g

    def rope(self, x, cos, sin):
        heads = self.cfg["num_attention_heads"]
        x, cos, sin = x.contiguous(), cos.contiguous(), sin.contiguous()
        y = torch.empty_like(x)
        tx, tc, ts, ty = _ht(x), _ht(cos), _ht(sin), _ht(y)
        self._pre_call()
        check(lib.h3s_rope_forward(ctypes.byref(tx), heads, ctypes.byref(tc), ctypes.byref(ts), ctypes.byref(ty)))
        self._sync()
        return y, _rope_apply64(x.double(), heads, cos.double(), sin.double())

    def attention(self, q, k, v):
        heads = self.cfg["num_attention_heads"]
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out = torch.empty_like(q)
        stats = torch.empty(q.shape[0], heads, 2, dtype=self.f32, device=q.device)
        tq, tk, tv, to, tst = _ht(q), _ht(k), _ht(v), _ht(out), _ht(stats)
        mask = _lib.AttnMask(None, None)
        self._pre_call()
        check(lib.h3s_attention_forward(ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv), self.B, heads,
                                        ctypes.byref(mask), ctypes.byref(to), ctypes.byref(tst)))
        self._sync()
        return out, _attention64(q.double(), k.double(), v.double(), self.B, heads)

    def residual(self, r, y, table=None, gate=0):
        r, y = r.contiguous(), y.contiguous()
        out = torch.empty_like(r)
        tr, ty, to = _ht(r), _ht(y), _ht(out)
        tt = ti = None
        if table is not None:
            table = table.contiguous()
            tt, ti = _ht(table), _ht(self.adaln_rows)
        self._pre_call()
        check(lib.h3s_residual_forward(ctypes.byref(tr), ctypes.byref(ty), _ref(tt), _ref(ti), gate,
                                       ctypes.byref(to)))
        self._sync()
        if table is None:
            g = r.double() + y.double()
        else:
            h = r.shape[1]
            g = r.double() + table.double()[self.adaln_rows][:, gate * h:(gate + 1) * h] * y.double()
        return out, g

    def swiglu(self, u):
        u = u.contiguous()
        f = u.shape[1] // 2
        h = torch.empty(u.shape[0], f, dtype=u.dtype, device=u.device)
        tu, th = _ht(u), _ht(h)
        self._pre_call()
        check(lib.h3s_swiglu_forward(ctypes.byref(tu), ctypes.byref(th)))
        self._sync()
        u64 = u.double()
        return h, u64[:, :f] * _silu64(u64[:, f:])

    def adaln(self, temb, prefix):
        w, b = self.w(prefix + ".weight"), self.w(prefix + ".bias")
        temb = temb.contiguous()
        a = torch.empty(temb.shape[0], temb.shape[1], dtype=w.dtype, device=temb.device)
        table = torch.empty(temb.shape[0], w.shape[0], dtype=w.dtype, device=temb.device)
        tt, tw, tb, ta, ttab = _ht(temb), _ht(w), _ht(b), _ht(a), _ht(table)
        self._pre_call()
        check(lib.h3s_adaln_projection_forward(ctypes.byref(tt), ctypes.byref(tw), ctypes.byref(tb), ctypes.byref(ta),
                                               ctypes.byref(ttab)))
        self._sync()
        g = _silu64(temb.double()) @ w.double().T + b.double()
        return table, g

    def run(self, name, pv):
        """(strict output, FP64 golden) of node `name` on the provider's inputs; pv: provider values/inputs."""
        c, val, inp = self.cfg, pv.values, pv.inputs
        if name == "rope_table":
            pos = inp["rope_table"]["position_ids"].contiguous()
            f = c["rope_freq_dim"]
            cos = torch.empty(pos.shape[0], 6 * f, dtype=self.f32, device=pos.device)
            sin = torch.empty_like(cos)
            tp, tc, ts = _ht(pos), _ht(cos), _ht(sin)
            self._pre_call()
            check(lib.h3s_rope_table(ctypes.byref(tp), f, float(c["rope_theta"]), ctypes.byref(tc), ctypes.byref(ts)))
            self._sync()
            inv = 1.0 / torch.tensor(float(c["rope_theta"]), dtype=torch.float64) ** (
                torch.arange(0, 2 * f, 2, dtype=torch.float64) / (2 * f))
            p64 = pos.to(torch.float32).double()
            ang = torch.cat([p64[:, a:a + 1] * inv.to(p64.device) for a in range(3)], dim=-1)
            return cos, torch.cos(torch.cat((ang, ang), dim=-1))
        if name == "timestep_sinusoid":
            t = inp[name]["t"].to(self.f32).contiguous()
            fd = c["freq_dim"]
            out = torch.empty(t.shape[0], fd, dtype=self.f32, device=t.device)
            tt, to = _ht(t), _ht(out)
            self._pre_call()
            check(lib.h3s_timestep_sinusoid_forward(ctypes.byref(tt), fd, ctypes.byref(to)))
            self._sync()
            half = fd // 2
            freq = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64, device=t.device) / half)
            args = t.double()[:, None] * freq[None, :]
            return out, torch.cat((torch.cos(args), torch.sin(args)), dim=-1)
        if name == "timestep_mlp":
            f = inp[name]["x"].contiguous()
            w1, b1 = self.w("time_embedder.linear_1.weight"), self.w("time_embedder.linear_1.bias")
            w2, b2 = self.w("time_embedder.linear_2.weight"), self.w("time_embedder.linear_2.bias")
            hidden = torch.empty(f.shape[0], w1.shape[0], dtype=self.f32, device=f.device)
            temb = torch.empty(f.shape[0], w2.shape[0], dtype=self.f32, device=f.device)
            ts = [_ht(t) for t in (f, w1, b1, w2, b2, hidden, temb)]
            self._pre_call()
            check(lib.h3s_timestep_mlp_forward(*[ctypes.byref(t) for t in ts]))
            self._sync()
            g = _silu64(f.double() @ w1.double().T + b1.double()) @ w2.double().T + b2.double()
            return temb, g
        if name in ("proj_in", "audio_proj_in", "context_embedder", "proj_out", "audio_proj_out"):
            return self.linear(inp[name]["x"], name + ".weight", name + ".bias")
        if name == "refiner.final_norm":
            return self.rmsnorm(inp[name]["x"], "token_refiner.final_norm.weight", c["final_norm_eps"])
        if name == "pack":
            h = c["hidden_size"]
            text, video, audio = val["refiner.final_norm"], val["proj_in"], val["audio_proj_in"]
            packed = torch.zeros(self.B * self.S, h, dtype=text.dtype, device=text.device)
            tdst = _ht(packed)
            self._pre_call()
            for src, key in ((text, "text_indices"), (video, "video_indices"), (audio, "audio_indices")):
                src = src.contiguous()
                ts, ti = _ht(src), _ht(self.idx_host[key])
                check(lib.h3s_rows_scatter(ctypes.byref(ts), ctypes.byref(ti), self.B, ctypes.byref(tdst)))
            self._sync()
            g = torch.zeros(self.B, self.S, h, dtype=torch.float64, device=text.device)
            for src, key in ((text, "text_indices"), (video, "video_indices"), (audio, "audio_indices")):
                g[:, self.idx[key]] = src.double().reshape(self.B, -1, h)
            return packed, g.reshape(-1, h)
        if name == "norm_out":
            x, temb = inp[name]["x"], inp[name]["temb"]
            table, g_table = self.adaln(temb, "norm_out.linear")
            w = self.w("norm_out.norm.weight")
            x = x.contiguous()
            y = torch.empty(x.shape, dtype=self.f32, device=x.device)
            tx, tw, tt, ti, ty = _ht(x), _ht(w), _ht(table), _ht(self.ts_rows), _ht(y)
            self._pre_call()
            check(lib.h3s_final_norm_forward(ctypes.byref(tx), ctypes.byref(tw), ctypes.byref(tt), ctypes.byref(ti),
                                             float(c["final_norm_eps"]), ctypes.byref(ty)))
            self._sync()
            h = x.shape[1]
            rows = g_table[self.ts_rows]
            g = _rms64(x.double(), w.double(), c["final_norm_eps"]) * (1 + rows[:, h:]) + rows[:, :h]
            return y, g
        pre, node = name.rsplit(".", 1)
        kind, i = pre.split(".")
        refiner = kind == "refiner"
        ck = (f"token_refiner.refiner_blocks.{i}" if refiner else f"transformer_blocks.{i}")
        table = None if refiner else val[pre + ".adaln_projection"].reshape(self.T * 3, -1)
        x_in = inp[pre + ".block"]["x"]
        if node == "adaln_projection":
            return self.adaln(inp[name]["temb"], ck + ".adaln_proj.linear")
        if node == "norm1":
            return self.rmsnorm(x_in, ck + ".norm1.weight", c["norm_eps"], table, 0, 1)
        if node == "norm2":
            return self.rmsnorm(val[pre + ".residual_attn"], ck + ".norm2.weight", c["norm_eps"], table, 3, 4)
        if node in ("q_proj", "k_proj", "v_proj"):
            return self.linear(val[pre + ".norm1"], f"{ck}.attn.to_{node[0]}.weight")
        if node in ("q_norm", "k_norm"):
            return self.head_norm(val[f"{pre}.{node[0]}_proj"], f"{ck}.attn.norm_{node[0]}.weight", c["qk_norm_eps"])
        if node in ("rope_q", "rope_k"):
            return self.rope(val[f"{pre}.{node[-1]}_norm"], val["rope_table"], val["rope_table.sin"])
        if node == "attention":
            a = inp[name]
            return self.attention(a["q"], a["k"], a["v"])
        if node == "o_proj":
            return self.linear(val[pre + ".attention"], ck + ".attn.to_out.0.weight")
        if node == "residual_attn":
            return self.residual(x_in, val[pre + ".o_proj"], table, 2)
        if node == "ffn_gate_up":
            return self.linear(val[pre + ".norm2"], ck + ".ff.net.0.proj.weight")
        if node == "swiglu":
            return self.swiglu(val[pre + ".ffn_gate_up"])
        if node == "ffn_down":
            return self.linear(val[pre + ".swiglu"], ck + ".ff.net.2.weight")
        if node == "residual_mlp":
            return self.residual(val[pre + ".residual_attn"], val[pre + ".ffn_down"], table, 5)
        raise ValueError(f"no isolated form for node {name}")


def promise_of(name):
    """The isolated bitwise promise of a node (its reason), or None."""
    if name in BITWISE_PROMISES:
        return BITWISE_PROMISES[name]
    parts = name.split(".")
    if len(parts) == 3 and parts[0] == "refiner":
        return BITWISE_PROMISES.get("refiner:" + parts[2])
    return None


# ------------------------------------------------------------------ the replay

def _parse_blocks(text, layers):
    if text is None:
        return list(range(layers))
    out = []
    for part in text.split(","):
        part = part.strip()
        if not _ASCII_DIGITS.fullmatch(part):  # not str.isdigit: it takes "²" and other non-ASCII digits
            raise ReplayError(EXIT_USAGE, f"--blocks: '{text}' is not a comma-separated list of block indices")
        i = int(part)
        if i >= layers:
            raise ReplayError(EXIT_USAGE, f"--blocks: block {i} does not exist (the model has {layers} blocks)")
        if i not in out:
            out.append(i)
    if not out:
        raise ReplayError(EXIT_USAGE, "--blocks: empty list")
    return sorted(out)


def _wanted(name, blocks):
    parts = name.split(".")
    if parts[0] == "block":
        return int(parts[1]) in blocks
    if parts[0] == "param" and len(parts) > 2 and parts[1] == "transformer_blocks":
        return int(parts[2]) in blocks
    return True


def _bound(strict, provider, factor_slack):
    """(limit, within): the bound factor x provider + slack on the strict error, within None when not checked.
    The strict error must be finite whatever the provider's: a non-finite provider error makes the limit infinite,
    and without that rule any strict error, infinite or NaN too, would pass."""
    if strict is None or provider is None:
        return None, None
    f, s = factor_slack
    limit = f * provider + s if math.isfinite(provider) else math.inf
    if not math.isfinite(strict):
        return limit, False
    return limit, strict <= limit


def _unchecked_reason(strict, provider, golden):
    """Why a node's values cannot be measured against its golden (None when they can)."""
    if provider is None:
        return "no provider value was recorded for this node"
    if golden is None:
        return "no golden value was recorded for this node"
    if strict is None:
        return "no strict value"
    for what, t in (("strict", strict), ("provider", provider)):
        if t.numel() != golden.numel():
            return f"the {what} value has {t.numel()} elements, the golden {golden.numel()}"
    if golden.is_floating_point() and not bool(torch.isfinite(golden).all()):
        return "the FP64 golden is not finite"
    return None


def _measure(strict, provider, golden, factor_slack):
    """A node's errors against its golden and the verdict: the report's fields golden_rel_l2, provider_rel_l2,
    bound, within_bound (None when unchecked), check ("within", "over" or "unchecked") and reason (why it is over
    or unchecked, or a note on the bound; None otherwise)."""
    why = _unchecked_reason(strict, provider, golden)
    e_s, e_p = _rel_l2(strict, golden), _rel_l2(provider, golden)
    if why is None and (e_s is None or e_p is None):
        why = "the values are not comparable with the golden"
    if why is not None:
        limit, ok = None, None
    else:
        limit, ok = _bound(e_s, e_p, factor_slack)
        if ok is False:
            why = ("the strict error against the golden is not finite" if not math.isfinite(e_s) else
                   f"the strict error {e_s:.6g} is over the bound {limit:.6g}")
        elif not math.isfinite(e_p):
            why = "the provider's error against the golden is not finite: the bound only asks a finite strict error"
    return {"golden_rel_l2": _json_num(e_s), "provider_rel_l2": _json_num(e_p), "bound": _json_num(limit),
            "within_bound": ok, "check": "unchecked" if ok is None else ("within" if ok else "over"),
            "reason": why}


def _is_grad(name):
    return name.endswith(".grad") or ".grad_" in name or name.startswith("param.")


FIRST_FIELDS = ("first_drift", "first_grad_drift", "first_isolated_drift", "first_isolated_difference",
                "first_repeat_drift", "first_batch_drift", "first_grad_repeat_drift", "first_grad_batch_drift",
                "first_unchecked")


def _compare_nodes(order, binding, a, b, one, pv, gv, run_isolated, plant_fault=None):
    """Every node of `order` (the report's order: forward then backward, execution order) compared: the strict
    runs a (values kept), b (repeat) and one (item 0 alone, or None) with each other, the provider's values pv
    against the strict chained values and both against the chained golden gv, and for forward nodes the isolated
    strict node run_isolated(name, pv) -> (strict, golden).  Returns (nodes, first, over, broken, unchecked,
    planted): the report's node objects, its first_* fields, and the node names over the bound, with a broken
    promise, that could not be checked, and whether the planted fault was planted."""
    nodes, first = [], dict.fromkeys(FIRST_FIELDS)
    over, broken, unchecked, planted = [], [], [], False

    def mark(key, name):
        if first[key] is None:
            first[key] = name

    for name in order:
        is_grad = _is_grad(name)
        sv = a.values[name]
        rows = sv.shape[0] if sv.dim() >= 1 else 1
        node = {"name": name, "binding": binding, "dtype": str(sv.dtype)[6:], "shape": list(sv.shape),
                "sha256": a.sha[name]}
        node["repeat_equal"] = a.sha[name] == b.sha[name]
        if one is not None and (a.batched[name] or not is_grad):
            node["batch_equal"] = (a.sha_item0[name] if a.batched[name] else a.sha[name]) == one.sha[name]
        else:
            node["batch_equal"] = None
        if not node["repeat_equal"]:
            mark("first_grad_repeat_drift" if is_grad else "first_repeat_drift", name)
        if node["batch_equal"] is False:
            mark("first_grad_batch_drift" if is_grad else "first_batch_drift", name)

        p_val = (pv.grad_values if is_grad else pv.values).get(name)
        g_val = (gv.grad_values if is_grad else gv.values).get(name)
        node["provider_dtype"] = None if p_val is None else str(p_val.dtype)[6:]
        node["provider_sha256"] = None if p_val is None else _sha(p_val)
        m = _measure(sv, p_val, g_val, GRADIENT_BOUND if is_grad else FORWARD_BOUND)
        node["golden_rel_l2"], node["provider_rel_l2"] = m["golden_rel_l2"], m["provider_rel_l2"]
        node["bound"], node["within_bound"] = m["bound"], m["within_bound"]
        node["check"], node["reason"] = m["check"], m["reason"]
        p_cpu = None if p_val is None else p_val.detach().cpu()
        node["equal_provider"] = _bits_equal(sv, p_cpu) if p_cpu is not None else None
        node["first_differing_row"] = (_first_differing_row(sv, p_cpu, rows)
                                       if p_cpu is not None and not node["equal_provider"] else None)
        if node["equal_provider"] is False:
            mark("first_drift", name)
            if is_grad:
                mark("first_grad_drift", name)
        marks, missing = [], []
        if m["within_bound"] is False:
            marks.append("chained")
        elif m["within_bound"] is None:
            missing.append("chained")

        if not is_grad:
            node["isolated"] = iso_node = _isolated_node(name, rows, p_cpu, pv, run_isolated, plant_fault)
            planted = planted or iso_node.pop("_planted")
            eq, promise = iso_node["equal_provider"], iso_node["promise"]
            if eq is False:
                mark("first_isolated_difference", name)
            if iso_node["within_bound"] is False:
                marks.append("isolated")
            elif iso_node["within_bound"] is None:
                missing.append("isolated")
            if promise and eq is False:
                broken.append(name)
            if iso_node["within_bound"] is False or (promise and eq is False):
                mark("first_isolated_drift", name)
        node["over_bound"], node["unchecked"] = marks, missing
        if marks:
            over.append(name)
        if missing:
            unchecked.append(name)
            mark("first_unchecked", name)
        nodes.append(node)
    return nodes, first, over, broken, unchecked, planted


def _isolated_node(name, rows, p_cpu, pv, run_isolated, plant_fault):
    """The `isolated` object of a forward node (with "_planted" for the caller to pop)."""
    promise = promise_of(name)
    out = {"sha256": None, "golden_rel_l2": None, "provider_rel_l2": None, "bound": None, "within_bound": None,
           "check": "unchecked", "reason": None, "equal_provider": None, "first_differing_row": None,
           "promise": "bitwise" if promise else None, "promise_reason": promise, "promise_kept": None,
           "_planted": False}
    p_flat = pv.values.get(name)
    if p_flat is None:
        out["reason"] = "no provider value was recorded for this node"
        return out
    try:
        s_iso, g_iso = run_isolated(name, pv)
    except KeyError as e:  # a value or input of the provider's that the node reads was not recorded
        out["reason"] = f"the provider's inputs of the node were not recorded ({e})"
        return out
    s_iso = s_iso.detach()
    if plant_fault == name and s_iso.numel():
        s_iso.reshape(-1)[:1].view(torch.uint8)[:1].bitwise_xor_(1)  # the lowest mantissa bit
        out["_planted"] = True
    s_iso_cpu = s_iso.cpu()
    m = _measure(s_iso, p_flat.detach(), g_iso, FORWARD_BOUND)
    eq = _bits_equal(s_iso_cpu, p_cpu)
    out.update(m)
    out.update({"sha256": _sha(s_iso_cpu), "equal_provider": eq,
                "first_differing_row": None if eq else _first_differing_row(s_iso_cpu, p_cpu, rows),
                "promise_kept": (eq if promise else None)})
    return out


def _load_provider(model_dir, device):
    try:
        from diffusers import MiniMaxH3Transformer3DModel
    except ImportError as e:
        raise ReplayError(EXIT_USAGE, f"the provider needs diffusers with MiniMaxH3Transformer3DModel ({e})") from e
    d = model_dir
    if not os.path.exists(os.path.join(d, "config.json")) and os.path.exists(os.path.join(d, "transformer",
                                                                                         "config.json")):
        d = os.path.join(d, "transformer")
    try:
        m = MiniMaxH3Transformer3DModel.from_pretrained(d, torch_dtype=torch.bfloat16)
    except (OSError, ValueError, KeyError) as e:
        hint = (" (diffusers needs accelerate to keep the checkpoint's F32 modules F32 under torch_dtype)"
                if "low_cpu_mem_usage" in str(e) else "")
        raise ReplayError(EXIT_INPUT, f"{model_dir}: diffusers could not load the model: {e}{hint}") from e
    return m.to(device).eval(), d


def _check_provider_dtypes(provider, strict_handle):
    """The provider must hold every parameter in the checkpoint's dtype (its mixed precision)."""
    names = {}
    for i in range(lib.h3s_model_param_count(strict_handle)):
        name, t = ctypes.c_char_p(), Tensor()
        check(lib.h3s_model_param(strict_handle, i, ctypes.byref(name), ctypes.byref(t)))
        names[name.value.decode()] = (_TORCH_DTYPE[t.dtype], _shape(t))
    params = dict(provider.named_parameters())
    missing = sorted(set(names) - set(params))
    extra = sorted(set(params) - set(names))
    if missing or extra:
        raise ReplayError(EXIT_INPUT, f"the provider's parameters differ from the checkpoint's: missing {missing[:3]},"
                                      f" extra {extra[:3]}")
    for n, (dt, shape) in names.items():
        if params[n].dtype != dt or tuple(params[n].shape) != shape:
            raise ReplayError(EXIT_INPUT, f"the provider holds {n} as {params[n].dtype} {tuple(params[n].shape)}, "
                                          f"the checkpoint as {dt} {shape}")


def _inputs(path):
    from .torch import load_inputs  # the library's reader: the same checks as every command
    try:
        x = load_inputs(path)
    except H3StrictError as e:
        raise ReplayError(EXIT_INPUT, f"{path}: {e}") from e
    if "attention_mask" in x:
        raise ReplayError(EXIT_INPUT, f"{path}: has an attention_mask; diffusers 0.42.1's forward takes none, so the "
                                      "provider could not run this request (write inputs without --attention-mask)")
    if bool((x["token_tags"] == -1).any()):
        raise ReplayError(EXIT_INPUT, f"{path}: has padding rows (tag -1); diffusers' forward accepts none, so the "
                                      "provider could not run this request (write inputs without --pad-to)")
    return {k: v.clone() for k, v in x.items()}


# ------------------------------------------------------------------ the provider for other tools (model_bench.py)

def load_provider(model_dir, device="cpu"):
    """diffusers' MiniMaxH3Transformer3DModel from a model directory (or a pipeline snapshot holding transformer/)
    exactly as the replay loads the provider: from_pretrained with torch_dtype=torch.bfloat16, which keeps the
    checkpoint's F32 modules F32 (it needs accelerate), then moved to `device`, in eval mode.  Raises ReplayError."""
    return _load_provider(os.fspath(model_dir), device)[0]


def read_inputs(path):
    """An inputs file as the replay reads it: the library's reader and checks, then a refusal of what diffusers'
    forward cannot take (an attention mask, padding rows); a dict of CPU tensors the caller owns.  Raises
    ReplayError."""
    return _inputs(os.fspath(path))


def provider_arguments(x, device):
    """diffusers' forward keyword arguments for an inputs dict (read_inputs, h3strict.torch.load_inputs): the
    file's tensor names are the forward's argument names, so each tensor goes to `device` under its own name."""
    return {k: v.to(device) for k, v in x.items()}


def _file_sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _progress(quiet, msg, t0):
    if not quiet:
        print(f"h3strict.replay: {msg} ({time.time() - t0:.1f} s)", file=sys.stderr, flush=True)


def replay(model_dir, inputs_path, device="cpu", blocks=None, backward=False, threads=None, plant_fault=None,
           quiet=True):
    """Run the replay and return the report (a dict).  Raises ReplayError for a refused request."""
    t0 = time.time()
    if device not in ("cpu", "cuda"):
        raise ReplayError(EXIT_USAGE, f"--device must be cpu or cuda, got {device!r}")
    kind = _lib.BACKEND_CPU if device == "cpu" else _lib.BACKEND_CUDA
    if lib.h3s_backend_check(kind) != _lib.OK:
        raise ReplayError(EXIT_DEVICE, f"--device {device}: {lib.h3s_last_error().decode()}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ReplayError(EXIT_DEVICE, "--device cuda: this torch has no usable CUDA device for the provider")
    threads = _check_threads(threads)
    if threads is not None:
        lib.h3s_set_num_threads(threads)
    x = _inputs(inputs_path)
    handle = ctypes.c_void_p()
    try:
        check(lib.h3s_model_load(path_arg("model_dir", model_dir), kind, 0, ctypes.byref(handle)))
    except H3StrictError as e:
        code = EXIT_DEVICE if e.status == "device error" else EXIT_INPUT
        raise ReplayError(code, f"{model_dir}: {e}") from e
    try:
        cfg_c = lib.h3s_model_config(handle).contents
        cfg = {f: (tuple(getattr(cfg_c, f)) if f == "patch_size" else getattr(cfg_c, f)) for f, _ in cfg_c._fields_}
        try:
            n = ctypes.c_int64()
            c_in, keep = _c_inputs(x)
            check(lib.h3s_inputs_validate(ctypes.byref(cfg_c), ctypes.byref(c_in), ctypes.byref(n)))
        except H3StrictInputError as e:
            raise ReplayError(EXIT_INPUT, f"{inputs_path}: {e}") from e
        blocks = _parse_blocks(blocks, cfg["num_layers"])
        provider, provider_dir = _load_provider(os.fspath(model_dir), device)
        _check_provider_dtypes(provider, handle)
        B = x["hidden_states"].shape[0]
        wv, wa = x["hidden_states"].shape[2], x["audio_hidden_states"].shape[2]
        ct = _cotangent(B, x["hidden_states"].shape[1], wv, x["audio_hidden_states"].shape[1], wa, COTANGENT_SEED)
        x1 = {k: (v[:1].clone() if k in ("hidden_states", "audio_hidden_states", "encoder_hidden_states") else v)
              for k, v in x.items()}
        ct1 = (ct[0][:1].clone(), ct[1][:1].clone())

        _progress(quiet, "provider (diffusers, mixed precision)", t0)
        pv, _, _ = _run_provider(provider, x, device, backward, ct)
        _progress(quiet, "golden (the provider's module in float64)", t0)
        golden_model = copy.deepcopy(provider)
        golden_model._apply(lambda t: t.to(torch.float64) if t.is_floating_point() else t)  # every parameter, buffer
        gx = {k: (v.double() if v.is_floating_point() and k != "position_ids" else v) for k, v in x.items()}
        gv, _, _ = _run_provider(golden_model, gx, device, backward, (ct[0].double(), ct[1].double()),
                                 offload=device == "cuda", record_inputs=False)
        del golden_model
        if device == "cuda":
            torch.cuda.empty_cache()

        _progress(quiet, "strict, batch", t0)
        a = _strict_pass(handle, x, backward, ct, keep=True)
        _progress(quiet, "strict, batch again (repeat)", t0)
        b = _strict_pass(handle, x, backward, ct, keep=False)
        one = None
        if B > 1:
            _progress(quiet, "strict, item 0 alone", t0)
            one = _strict_pass(handle, x1, backward, ct1, keep=False)
        if a.order != b.order or (one is not None and one.order != a.order):
            raise ReplayError(EXIT_DIFFER, "the strict runs emitted different node lists")

        _progress(quiet, "isolated nodes", t0)
        iso = _Isolated(provider, cfg, x, device)
        binding = lib.h3s_backend_name(kind).decode()
        nodes, first, over, broken, unchecked, planted = _compare_nodes(
            [n for n in a.order if _wanted(n, blocks)], binding, a, b, one, pv, gv, iso.run, plant_fault)
        if plant_fault is not None and not planted:
            raise ReplayError(EXIT_USAGE, f"--plant-fault: no forward node named '{plant_fault}' was replayed")

        report = {
            "kind": "provider_replay",
            "binding": binding,
            "provider": {"implementation": "diffusers MiniMaxH3Transformer3DModel, forward hooks",
                         "diffusers": _version("diffusers"), "torch": torch.__version__,
                         "precision": "the checkpoint's mixed precision (BF16 blocks, F32 modules)",
                         "device": device},
            "golden": {"chained": "the provider's module cast to float64, same inputs",
                       "isolated": "float64 formulas of docs/model.md on the provider's inputs of the node"},
            "batch": B, "sequence_rows": x["token_tags"].shape[0], "blocks": blocks, "backward": bool(backward),
            "cotangent_seed": COTANGENT_SEED if backward else None,
            "bounds": {"forward": {"factor": FORWARD_BOUND[0], "slack": FORWARD_BOUND[1]},
                       "gradient": {"factor": GRADIENT_BOUND[0], "slack": GRADIENT_BOUND[1]}},
            "order": "forward then backward, execution order",
            "isolated_promises": {k: v for k, v in BITWISE_PROMISES.items()},
            **first,
            "over_bound": over, "broken_promises": broken, "unchecked": unchecked,
            "nodes": nodes,
        }
        if plant_fault is not None:
            report["planted_fault"] = plant_fault
        grads = [nd for nd in nodes if _is_grad(nd["name"])]
        report["summary"] = {
            "nodes": len(nodes), "forward_nodes": len(nodes) - len(grads), "gradient_nodes": len(grads),
            "repeat_differing": sum(1 for nd in nodes if not nd["repeat_equal"]),
            "batch_differing": sum(1 for nd in nodes if nd["batch_equal"] is False),
            "batch_checked": one is not None,
            "isolated_equal_provider": sum(1 for nd in nodes if nd.get("isolated", {}).get("equal_provider")),
            "over_bound": len(over), "broken_promises": len(broken), "unchecked": len(unchecked),
            "differ": bool(over or broken or first["first_repeat_drift"] or first["first_batch_drift"]
                           or first["first_grad_repeat_drift"] or first["first_grad_batch_drift"]),
        }
        report["provenance"] = {
            "h3strict": _lib.version(), "command": "python -m h3strict.replay " + " ".join(sys.argv[1:]),
            "model_config_sha256": _file_sha(os.path.join(provider_dir, "config.json")),
            "inputs_sha256": _file_sha(inputs_path), "threads": lib.h3s_get_num_threads(),
            "torch_device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
            "elapsed_s": round(time.time() - t0, 2)}
        return report
    finally:
        lib.h3s_model_free(handle)


def _version(pkg):
    try:
        import importlib.metadata as md
        return md.version(pkg)
    except Exception:  # noqa: BLE001 -- a version is provenance, not a requirement
        return None


def _check_threads(threads):
    """The thread count as an int, or None; a ReplayError (usage) outside 1 .. MAX_THREADS."""
    if threads is None:
        return None
    try:
        threads = operator.index(threads)
    except TypeError:
        raise ReplayError(EXIT_USAGE, f"--threads must be an integer, got {threads!r}") from None
    if not 1 <= threads <= MAX_THREADS:
        raise ReplayError(EXIT_USAGE, f"--threads must be between 1 and {MAX_THREADS}, got {threads}")
    return threads


def _ascii_int(text):
    """argparse type: a decimal integer in ASCII digits (int() also takes other scripts' digits)."""
    t = text.strip()
    if not _ASCII_DIGITS.fullmatch(t.lstrip("+-")):
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}")
    return int(t)


def _umask():
    """The process's umask, read without changing it where /proc tells it (Linux 4.7+)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_atomic(path, report):
    """Write the report beside its target and rename it into place: never a partial file under the name.  The
    temporary file has a short name of its own (a target name near NAME_MAX still works) and, once written, the
    mode a new file gets (0666 less the umask), or the permission bits of the file it replaces, as the library's
    writers keep them; not mkstemp's 0600."""
    d = os.path.dirname(os.path.abspath(path))
    if os.path.lexists(path) and not os.path.isfile(path):
        raise ReplayError(EXIT_USAGE, f"--out {path}: exists and is not a regular file")
    fd, tmp = tempfile.mkstemp(prefix=".replay-", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
            f.flush()
            try:
                mode = os.stat(path).st_mode & 0o7777  # a replaced report keeps its permissions
            except FileNotFoundError:
                mode = 0o666 & ~_umask()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _os_message(e):
    """One line for an OSError: the path (or paths) it names and the system's reason."""
    reason = e.strerror or str(e) or type(e).__name__
    if e.filename is not None:
        names = os.fsdecode(e.filename) + (f" -> {os.fsdecode(e.filename2)}" if e.filename2 is not None else "")
        return f"{names}: {reason}"
    return reason


def _internal_message(e):
    """One line for an unexpected exception: its type, message and where it was raised."""
    where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    at = f" at {os.path.basename(where.filename)}:{where.lineno}" if where else ""
    text = " ".join(str(e).split()) or "(no message)"
    if isinstance(e, MemoryError):
        return f"out of memory{at}"
    return f"internal error: {type(e).__name__}: {text}{at}"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m h3strict.replay", description=(
        "Per-node replay of h3strict against diffusers' MiniMaxH3Transformer3DModel (the provider): every node "
        "chained and isolated, each against an FP64 golden.  Exit 0: every node checked, within the bound and every "
        "promise kept; 1: a node over the bound, a broken promise, or a strict repeat or batch drift; 2: bad usage; "
        "3: bad input, or (with the report written, and nothing else differing) a node that could not be checked "
        "(its provider or golden value missing, not comparable, or a golden that is not finite); 4: device or I/O "
        "failure, or an internal error (one line names it).  The report's first_drift is the first node, forward "
        "then backward, whose strict bits differ from the provider's; first_grad_drift the first gradient node."))
    ap.add_argument("--model", required=True, help="model directory (diffusers layout, or a pipeline snapshot)")
    ap.add_argument("--inputs", required=True, help="inputs file (safetensors, the forward's argument names)")
    ap.add_argument("--out", required=True, help="the report (JSON)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda: the provider's device and the strict backend")
    ap.add_argument("--blocks", default=None, help="comma-separated block indices to report (default: all)")
    ap.add_argument("--backward", action="store_true", help="also the backward: every node's gradient, every "
                                                            "parameter gradient")
    ap.add_argument("--threads", type=_ascii_int, default=None,
                    help=f"CPU threads of the strict library, 1 to {MAX_THREADS}")
    ap.add_argument("--plant-fault", default=None, metavar="NODE",
                    help="test only: flip the lowest bit of NODE's isolated strict output")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code else EXIT_OK
    try:
        _check_threads(args.threads)
        for p, what in ((args.model, "--model"), (args.inputs, "--inputs")):
            if not os.path.exists(p):
                raise ReplayError(EXIT_INPUT, f"{what} {p}: no such file or directory")
        out_real = os.path.realpath(args.out)
        if out_real in (os.path.realpath(args.inputs),) or out_real.startswith(os.path.realpath(args.model) + os.sep):
            raise ReplayError(EXIT_USAGE, f"--out {args.out}: would overwrite an input or write into the model")
        if not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
            raise ReplayError(EXIT_DEVICE, f"--out {args.out}: the directory does not exist")
        report = replay(args.model, args.inputs, device=args.device, blocks=args.blocks, backward=args.backward,
                        threads=args.threads, plant_fault=args.plant_fault, quiet=args.quiet)
        _write_atomic(args.out, report)
    except ReplayError as e:
        print(f"h3strict.replay: {e}", file=sys.stderr)
        return e.code
    except H3StrictError as e:
        print(f"h3strict.replay: {e}", file=sys.stderr)
        return EXIT_DEVICE if e.status == "device error" else EXIT_INPUT
    except OSError as e:
        print(f"h3strict.replay: {_os_message(e)}", file=sys.stderr)
        return EXIT_DEVICE
    except Exception as e:  # noqa: BLE001 -- anything else is a bug: named on one line, not a bare traceback
        print(f"h3strict.replay: {_internal_message(e)}; no report written", file=sys.stderr)
        return EXIT_DEVICE
    s = report["summary"]
    print(f"replay: {s['nodes']} nodes ({s['forward_nodes']} forward, {s['gradient_nodes']} gradients), "
          f"first drift from the provider: {report['first_drift'] or 'none'}, "
          f"first isolated drift: {report['first_isolated_drift'] or 'none'}, "
          f"over the bound: {s['over_bound']}, broken promises: {s['broken_promises']}, "
          f"unchecked: {s['unchecked']}")
    if s["unchecked"]:
        name = report["first_unchecked"]
        why = next(n for n in report["nodes"] if n["name"] == name)
        why = why["reason"] or why.get("isolated", {}).get("reason")
        print(f"h3strict.replay: {s['unchecked']} node(s) could not be checked, the first {name}: {why}",
              file=sys.stderr)
    if s["differ"]:
        return EXIT_DIFFER
    return EXIT_UNCHECKED if s["unchecked"] else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
