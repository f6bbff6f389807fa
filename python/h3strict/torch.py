"""PyTorch binding: the strict MiniMax-H3 transformer as a torch.nn.Module with autograd.

    from h3strict.torch import StrictTransformer
    model = StrictTransformer.from_pretrained("path/to/transformer", device="cpu", threads=2)
    out = model(hidden_states=..., audio_hidden_states=..., ...)   # diffusers' forward arguments
    (out.sample.square().sum() + out.audio_sample.sum()).backward()

What crosses without a copy: the parameters are torch.nn.Parameters over the library's resident weights (CPU:
the model's own memory; CUDA: device memory), named as the checkpoint names them; the input tensors are read in
place when they are contiguous, strided CPU tensors of a dtype the library takes (the library validates every
index and value on the host before any work); `model.grads_f32` holds views of the library's own gradient buffers,
released when the last torch tensor over them goes.  The outputs live on the model's device: a CPU model's are the
library's buffers; a CUDA model's are torch CUDA tensors the library writes (h3s_model_forward_into), and their
cotangents are read in device memory, so a loss on the GPU needs no round trip through the host.  Anything else is
refused with an exception naming the argument and the explicit conversion to make (no silent copy, no silent cast).

The library computes with the memory each parameter had at load, so weights are changed in place only (an
optimizer's step, `p.copy_(new)` under torch.no_grad(), load_state_dict without assign): a pass after a parameter
was given other memory (`p.data = ...`, torch.nn.utils.vector_to_parameters) or replaced by another object raises,
naming it, and load_state_dict(assign=True) is refused.  The module cannot be deep-copied or pickled (save its
state_dict).

Gradients: `loss.backward()` runs the library's strict backward for the parameters that require grad (the others
cost nothing) and for the inputs that require grad.  torch keeps a parameter's .grad in the parameter's dtype, so
a BF16 parameter receives its F32 gradient rounded once to BF16 (round to nearest even); the exact F32 gradients
of the last backward, bitwise those of `h3strict grad`, are in `model.grads_f32` (name -> tensor; on a CUDA model
they are device tensors over the library's own gradient memory, never copied through the host).  With
`exact_grads=False` the library rounds instead (the same .grad bits, no F32 copy of the BF16 parameters' gradients).  A
parameter's .grad is torch's own tensor, not the library's buffer: autograd copies the gradient into a new .grad (or
adds it to the existing one), with the same bits.  The input gradients are F32 (an input given in BF16 gets its
gradient rounded to BF16 the same way), copies as well, so a kept input gradient keeps no library buffer alive.
Only hidden_states, audio_hidden_states and encoder_hidden_states get gradients: another argument that requires grad
is refused (pass it detached).  The forward's activations (its tape) are freed at the end of the backward unless
retain_graph=True, also while the outputs or the loss are kept.

CUDA streams: the library queues its work on a stream of its own.  Each pass first makes that stream wait (on the
device, not the host) for torch's current stream; a forward returns finished work; a backward returns as soon as it
is queued, torch's current stream waits for it on the device, and the pass is finished (waited for, its kernels'
index checks read, an error raised from backward()) when autograd's backward ends.  Work on another torch stream
that reads the gradients must wait for the current one (Stream.wait_stream), as for any torch tensor.
"""

import ctypes
import json
import math
import operator
import os
from types import SimpleNamespace

import torch

from . import _lib
from ._lib import H3StrictError, H3StrictInputError, Inputs, Tensor, check, lib, path_arg

__all__ = ["StrictTransformer", "StrictTransformerOutput", "scheduler", "trajectory", "load_inputs",
           "H3StrictError", "H3StrictInputError"]

_TORCH_DTYPE = {_lib.F64: torch.float64, _lib.F32: torch.float32, _lib.BF16: torch.bfloat16,
                _lib.F16: torch.float16, _lib.I64: torch.int64, _lib.BOOL: torch.bool}
_H3S_DTYPE = {v: k for k, v in _TORCH_DTYPE.items()}
_ITEMSIZE = {torch.float32: 4, torch.bfloat16: 2, torch.float16: 2, torch.float64: 8, torch.int64: 8, torch.bool: 1}
_FLOAT_IN = (torch.float32, torch.bfloat16)
# argument -> dtypes the library reads in place
_INPUT_DTYPES = {
    "hidden_states": _FLOAT_IN, "audio_hidden_states": _FLOAT_IN, "encoder_hidden_states": _FLOAT_IN,
    "timestep": (torch.float32, torch.bfloat16, torch.float64), "timestep_indices": (torch.int64,),
    "token_tags": (torch.int64,), "position_ids": (torch.float64, torch.float32), "video_indices": (torch.int64,),
    "audio_indices": (torch.int64,), "text_indices": (torch.int64,), "attention_mask": (torch.bool,),
}
_DEVICES = {"cpu": _lib.BACKEND_CPU, "cuda": _lib.BACKEND_CUDA}
_MAX_THREADS = 1024  # the CLI's --threads range, 1 to 1024
_MAX_LAYOUT = 1 << 24  # `h3strict inputs`: --batch and the layout's sizes at most 2^24
_MAX_SIGMA_STEPS = (1 << 24) - 1  # h3s_schedule_sigmas: at most 2^24 grid points
_MAX_SEEDS, _MAX_STEPS, _TRAJ_BATCH = 64, 1000, (2, 4096)  # `h3strict trajectory`: --seeds, --steps, --batch
_MAX_CONDITION_ROWS = 1 << 40  # `h3strict trajectory --condition-rows`


def _int_arg(name, value, lo, hi):
    """An int argument in [lo, hi], checked before it reaches a fixed-width C field (ctypes wraps silently)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got bool {value!r}")
    try:
        value = operator.index(value)  # an int, or an integer scalar (numpy); never a float or a str
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def _threads_arg(threads):
    """None, or the OpenMP thread count as the CLI takes it: an int from 1 to 1024 (h3s_set_num_threads takes a C
    int; a larger count wrapped, or crashed the OpenMP runtime)."""
    if threads is None:
        return None
    try:
        return _int_arg("threads", threads, 1, _MAX_THREADS)
    except TypeError as e:
        raise ValueError(str(e)) from None


# ------------------------------------------------------------------ memory shared with the library

class _OwnedTensor:
    """A host tensor the library allocated for us; freed when the last torch view of it is gone."""

    def __init__(self, t):
        self.t = t

    def __del__(self):
        t = getattr(self, "t", None)
        if t is not None:
            lib.h3s_tensor_free(ctypes.byref(t))


class _OwnedGrads:
    def __init__(self, g):
        self.g = g

    def __del__(self):
        g = getattr(self, "g", None)
        if g is not None:
            lib.h3s_grads_free(ctypes.byref(g))


class _CudaArray:
    """__cuda_array_interface__ over device memory the library owns (BF16 travels as int16, then viewed)."""

    def __init__(self, ptr, shape, typestr, owner):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "version": 2, "strides": None}
        self._owner = owner


def _shape(t):
    return tuple(t.shape[d] for d in range(t.ndim))


def _nbytes(dtype, shape):
    return math.prod(shape) * _ITEMSIZE[dtype]


def _view(t, owner):
    """A torch tensor over the memory of the library tensor `t` (no copy); `owner` stays alive with it."""
    dtype, shape = _TORCH_DTYPE[t.dtype], _shape(t)
    if t.device:
        typestr = {torch.float32: "<f4", torch.bfloat16: "<i2", torch.float64: "<f8"}[dtype]
        out = torch.as_tensor(_CudaArray(t.data, shape, typestr, owner), device="cuda")
        return out.view(torch.bfloat16) if dtype == torch.bfloat16 else out
    nbytes = _nbytes(dtype, shape)
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    buf = (ctypes.c_uint8 * nbytes).from_address(t.data)
    buf._owner = owner  # the buffer, hence every tensor over it, keeps the owner alive
    return torch.frombuffer(buf, dtype=dtype).view(shape)


def _block_grads(core, g, owner, need):
    """{parameter index: torch view of its gradient} for gradients handed over in one device block (h3s_grads.block).

    The block's layout (each gradient's offset, dtype and shape) depends only on which gradients were asked for and
    on the model's gradient dtype (h3s_model_grad_dtype: a BF16 gradient rounded from F32 keeps its F32 slot, so the
    offsets alone cannot tell), so it is read from the library's tensors once and kept on the model; a later backward
    with the same request, gradient dtype and block size reuses it after checking the first and last offsets against
    the library's."""
    nbytes = g.block.shape[0] * 4
    key = (tuple(bool(n) for n in need), lib.h3s_model_grad_dtype(core.handle), nbytes)
    cached = core.grad_layout
    layout, sizes = cached[1:] if cached is not None and cached[0] == key else (None, None)
    if layout:
        for i, off, _, _, _ in (layout[0], layout[-1]):
            if g.params[i].data - g.block.data != off:
                layout = None
                break
    if layout is None:
        layout, end = [], 0
        for i, n in enumerate(need):
            if not n:
                continue
            t = g.params[i]
            dtype, shape = _TORCH_DTYPE[t.dtype], _shape(t)
            off, nb = t.data - g.block.data, _nbytes(dtype, shape)
            if off < end or off + nb > nbytes:
                raise RuntimeError(f"h3strict: gradient {i} at bytes [{off}, {off + nb}) of the library's block of "
                                   f"{nbytes} does not follow the previous one")
            layout.append((i, off, nb, dtype, shape))
            end = off + nb
        sizes, pos = [], 0
        for _, off, nb, _, _ in layout:  # the gap before each gradient, then the gradient
            sizes += (off - pos, nb)
            pos = off + nb
        sizes.append(nbytes - pos)
        core.grad_layout = (key, layout, sizes)
    parts = _view(g.block, owner).view(torch.uint8).split(sizes)
    return {i: parts[2 * k + 1].view(dtype).view(shape) for k, (i, _, _, dtype, shape) in enumerate(layout)}


def _as_library_tensor(name, x, optional=False):
    """The library's view of a torch tensor (its memory, no copy), or a clear refusal."""
    if x is None:
        if optional:
            return Tensor()
        raise TypeError(f"{name}: required, got None")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    _plain_memory(name, x)
    allowed = _INPUT_DTYPES[name]
    if x.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise TypeError(f"{name}: dtype {str(x.dtype).replace('torch.', '')} is not read by the library (expected "
                        f"{names}); convert it explicitly, e.g. {name}.to(torch.{names.split(', ')[0]})")
    if x.device.type != "cpu":
        raise ValueError(f"{name}: the library reads its inputs from host memory and this tensor is on {x.device}; "
                         f"pass {name}.cpu() explicitly")
    if not x.is_contiguous():
        raise ValueError(f"{name}: not contiguous (strides {tuple(x.stride())}); pass {name}.contiguous() explicitly")
    if x.dim() > _lib.MAX_DIMS or x.dim() == 0:
        raise ValueError(f"{name}: {x.dim()} dims, expected 1 to {_lib.MAX_DIMS}")
    return _library_view(x)


def _plain_memory(name, x):
    """Refuse a tensor whose memory is not its values laid out densely: another layout (sparse, mkldnn), a nested or
    quantized tensor, or a lazily negated / conjugated view (its memory holds -x or conj(x))."""
    if x.is_nested:
        raise TypeError(f"{name}: a nested tensor; pass a regular (strided) tensor")
    if x.layout != torch.strided:
        raise TypeError(f"{name}: layout {str(x.layout).replace('torch.', '')} is not read by the library (expected "
                        f"strided); convert it explicitly, e.g. {name}.to_dense()")
    if x.is_quantized:
        raise TypeError(f"{name}: a quantized tensor; pass {name}.dequantize()")
    if x.is_neg():
        raise ValueError(f"{name}: a negative-bit view (its memory holds -{name}); pass {name}.resolve_neg()")
    if x.is_conj():
        raise ValueError(f"{name}: a conjugate-bit view; pass {name}.resolve_conj()")


def _library_view(x):
    """The library's description of a contiguous torch tensor: its memory (host or CUDA), dtype and shape; no copy."""
    t = Tensor()
    t.dtype, t.ndim = _H3S_DTYPE[x.dtype], x.dim()
    for d, s in enumerate(x.shape):
        t.shape[d] = s
    t.data = x.data_ptr() if x.numel() else None
    t.device = 1 if x.device.type == "cuda" else 0
    return t


class _Tape:
    """A forward's activations (h3s_tape); keeps the model alive, so the tape is freed before the model."""

    def __init__(self, handle, owner):
        self.handle, self.owner = handle, owner

    def __del__(self):
        if getattr(self, "handle", None):
            lib.h3s_tape_free(self.handle)
            self.handle = None


def _tape_token(tape):
    """A one-byte tensor that owns the tape: saved for backward, it is released by autograd with the graph (after
    the backward unless retain_graph=True, or when the outputs go without a backward), and the tape with it."""
    buf = (ctypes.c_uint8 * 1)()
    buf._owner = tape
    return torch.frombuffer(buf, dtype=torch.uint8)


class _Handle:
    """Owns the h3s_model; every parameter tensor keeps it alive, so the weights outlive their last view."""

    def __init__(self, handle):
        self.handle = handle

    def __del__(self):
        if getattr(self, "handle", None):
            lib.h3s_model_free(self.handle)
            self.handle = None


class _Model:
    """The library's resident model (h3s_model) and torch views of its parameters."""

    def __init__(self, path, device):
        if device not in _DEVICES:
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        raw = path_arg("path", path)
        self.device = device
        self.path = os.fsdecode(raw)
        h = ctypes.c_void_p()
        flags = _lib.LOAD_OWN_WEIGHTS if device == "cpu" else 0  # writable weights: an optimizer may step them
        check(lib.h3s_model_load(raw, _DEVICES[device], flags, ctypes.byref(h)))
        self.owner = _Handle(h)
        self.handle = h
        self.stream = None
        if device == "cuda":  # parameter gradients stay on the GPU: no round trip through host memory
            check(lib.h3s_model_set_device_grads(h, 1))
            # the backward returns once queued (h3s_model_set_deferred_backward): torch's stream waits for the
            # library's on the device, and the pass is finished (waited for, its device checks read) when autograd's
            # backward ends (_StrictFunction.backward), so the binding's and autograd's host work overlaps the device
            check(lib.h3s_model_set_deferred_backward(h, 1))
            ptr = ctypes.c_void_p()
            check(lib.h3s_device_stream(ctypes.byref(ptr)))
            self.stream = torch.cuda.ExternalStream(ptr.value)
        self.config = lib.h3s_model_config(h).contents
        self.grad_layout = None  # the device gradient block's layout of the last backward (_block_grads)
        self.params = []
        for i in range(lib.h3s_model_param_count(h)):
            name, t = ctypes.c_char_p(), Tensor()
            check(lib.h3s_model_param(h, i, ctypes.byref(name), ctypes.byref(t)))
            self.params.append((name.value.decode(), _view(t, self.owner)))


# ------------------------------------------------------------------ autograd

_ARG_NAMES = _lib.INPUT_NAMES  # the forward's arguments in h3s_inputs' order, attention_mask last
_FIRST_PARAM = 3 + len(_ARG_NAMES)  # forward(ctx, module, core, need_tape, *args, *params)


def _cotangent(name, g, shape, device):
    """The library's view of a cotangent: F32 and contiguous on the outputs' device (CUDA: read in device memory)."""
    if g is None:
        g = torch.zeros(shape, dtype=torch.float32, device=device)
    if g.layout != torch.strided:
        g = g.to_dense()
    if g.is_neg() or g.is_conj():  # the memory holds -g: the values, in memory of our own
        g = g.resolve_neg().resolve_conj()
    if g.dtype != torch.float32 or g.device.type != device or not g.is_contiguous():
        g = g.to(device=device, dtype=torch.float32).contiguous()  # autograd's own buffer: ours to convert
    return _library_view(g), g


def _output(x, device):
    """A CUDA model's output buffer: a torch CUDA tensor shaped like its input, which the library fills
    (h3s_model_forward_into); its library view."""
    out = torch.empty(tuple(x.shape), dtype=torch.float32, device=device)
    return out, _library_view(out)


def _order_after_torch(core):
    """CUDA: the library runs on a stream of its own, so whatever torch queued before a pass (an optimizer step
    writing the weights, the loss writing the cotangents, the allocation of the output buffers) is ordered before the
    pass's work on the device: the library's stream waits for torch's, with no wait on the host.  The forward
    synchronises the library's stream before it returns, so torch may read its outputs at once; the backward's
    gradients are ordered for torch by _order_torch_after."""
    if core.device == "cuda":
        core.stream.wait_stream(torch.cuda.current_stream())


def _order_torch_after(core):
    """CUDA: torch's stream waits (on the device) for the work the library queued, so that torch reads the
    gradients of a deferred backward only once they are written."""
    if core.device == "cuda":
        torch.cuda.current_stream().wait_stream(core.stream)


def _finish_later(core):
    """The deferred backward's end: h3s_model_finish (wait for the library's stream, read its kernels' index checks)
    once autograd's whole backward is done, after every gradient has been handed over; an error raises from
    loss.backward().  Where autograd offers no end-of-pass callback, the pass is finished at once (slower, the same
    result)."""
    if not lib.h3s_model_pending(core.handle):
        return

    def finish():
        check(lib.h3s_model_finish(core.handle))

    engine = getattr(torch.autograd.Variable, "_execution_engine", None)
    if engine is not None and hasattr(engine, "queue_callback"):
        engine.queue_callback(finish)
    else:
        finish()


class _HookCall:
    """The module's node_hook as the library's h3s_node_hook; an exception in it aborts the pass and is re-raised."""

    def __init__(self, fn):
        self.fn, self.error = fn, None

        def call(ctx, name, out, batched, rows_per_item):
            try:
                t = out.contents
                view = None if t.device else _view(t, None)  # host tensors only; device ones are passed as None
                self.fn(name.decode(), view, bool(batched), int(rows_per_item))
                return _lib.OK
            except BaseException as e:  # noqa: BLE001 -- carried across the C frames, re-raised by run()
                self.error = e
                return _lib.ERR_INVALID

        self.c_fn = _lib.NODE_HOOK(call) if fn is not None else _lib.NULL_HOOK

    def run(self, status):
        if self.error is not None:
            raise self.error
        check(status)


class _StrictFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, module, core, need_tape, *args):
        inputs = args[:len(_ARG_NAMES)]
        params = args[len(_ARG_NAMES):]
        c_in = Inputs()
        for name, x in zip(_ARG_NAMES, inputs):
            setattr(c_in, name, _as_library_tensor(name, x, optional=name == "attention_mask"))
        tape = ctypes.c_void_p()
        hook = _HookCall(module.node_hook)
        tape_p = ctypes.byref(tape) if need_tape else None
        if core.device == "cuda":  # outputs in torch's device memory, filled by the library: no host round trip
            s_out, s = _output(inputs[0], "cuda")
            a_out, a = _output(inputs[1], "cuda")
            _order_after_torch(core)
            hook.run(lib.h3s_model_forward_into(core.handle, ctypes.byref(c_in), hook.c_fn, None, tape_p,
                                                ctypes.byref(s), ctypes.byref(a)))
        else:
            s, a = Tensor(), Tensor()
            hook.run(lib.h3s_model_forward(core.handle, ctypes.byref(c_in), hook.c_fn, None, tape_p, ctypes.byref(s),
                                           ctypes.byref(a)))
            s_out, a_out = _view(s, _OwnedTensor(s)), _view(a, _OwnedTensor(a))
        ctx.module, ctx.core = module, core
        # the tape is owned by a saved tensor, not by ctx: autograd frees it with the graph's saved tensors, at the
        # end of the backward unless retain_graph=True (a loss kept for logging keeps no activations)
        ctx.tape_handle = tape if need_tape else None
        token = (_tape_token(_Tape(tape, core.owner)),) if need_tape else ()
        ctx.input_dtypes = tuple(x.dtype for x in inputs[:3])
        ctx.sample_shape, ctx.audio_shape = _shape(s), _shape(a)
        ctx.save_for_backward(*params, *token)  # an in-place change before backward is then refused by autograd
        return s_out, a_out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_sample, d_audio):
        ctx.saved_tensors  # noqa: B018 -- raises if a parameter was modified in place since the forward, or if
        # the graph (and the tape with it) was freed by an earlier backward without retain_graph
        if ctx.tape_handle is None:
            raise RuntimeError("h3strict: this forward kept no activations (it ran without grad)")
        core = ctx.core
        need = ctx.needs_input_grad
        need_params = need[_FIRST_PARAM:]
        want = (ctypes.c_ubyte * len(need_params))(*[1 if n else 0 for n in need_params])
        ds, keep_s = _cotangent("sample", d_sample, ctx.sample_shape, core.device)
        da, keep_a = _cotangent("audio_sample", d_audio, ctx.audio_shape, core.device)
        g = _lib.Grads()
        hook = _HookCall(ctx.module.node_hook)
        _order_after_torch(core)
        # model.grads_f32 keeps the last good backward's gradients until this one has succeeded
        hook.run(lib.h3s_model_backward_select(core.handle, ctx.tape_handle, ctypes.byref(ds), ctypes.byref(da), want,
                                               hook.c_fn, None, ctypes.byref(g)))
        owner = _OwnedGrads(g)
        _order_torch_after(core)
        _finish_later(core)
        input_grads = []
        for k, field in enumerate(("hidden_states", "audio_hidden_states", "encoder_hidden_states")):
            if need[3 + k]:
                # CUDA: the library hands the input gradients over in device memory (with the parameters'); the
                # input is a CPU tensor, so autograd needs its gradient there: one copy, only when it is asked for.
                # CPU: a copy too (small), so that an input's .grad does not pin the library's whole gradient set
                v = _view(getattr(g, field), owner)
                input_grads.append(v.to(device="cpu", dtype=ctx.input_dtypes[k], copy=True))
            else:
                input_grads.append(None)
        grads_f32, param_grads = {}, []
        # CUDA: the gradients are views into one device block (h3s_grads.block): one torch view of it, split in one
        # call (a torch view per gradient pointer cost about 25 us each, 3.5 ms for the release model's 134)
        block = _block_grads(core, g, owner, need_params) if g.block.data else None
        for i, (name, p) in enumerate(core.params):
            if not need_params[i]:
                param_grads.append(None)
                continue
            v = block[i] if block is not None else _view(g.params[i], owner)
            if v.dtype == torch.float32:
                grads_f32[name] = v
            # .grad lives where the parameter does, in its dtype (CUDA: the library's device gradient, converted
            # on the device when the parameter is BF16 and the library handed F32 over; with exact_grads off the
            # library hands a BF16 parameter's gradient over in BF16, the same bits).  Always a tensor of torch's own:
            # autograd adopts a gradient nothing else references as .grad, and a view of the library's memory would
            # then keep the whole gradient set alive for as long as any .grad lives
            param_grads.append(v.clone() if v.dtype == p.dtype and v.device == p.device else v.to(p.device, p.dtype))
        ctx.module.grads_f32 = grads_f32
        return (None, None, None, *input_grads, *([None] * (len(_ARG_NAMES) - 3)), *param_grads)


# ------------------------------------------------------------------ the module

class StrictTransformerOutput(SimpleNamespace):
    """What the forward returns with return_dict=True: .sample [B, Nv, video width], .audio_sample [B, Na, C]."""

    def to_tuple(self):
        return (self.sample, self.audio_sample)

    def __getitem__(self, i):
        return self.to_tuple()[i]


def _refuse_assign(local_metadata, prefix):
    """load_state_dict(assign=True) would put the state dict's tensors in place of the library's weights (the module
    would show them while the library computed with its own): refused before any parameter changes."""
    if local_metadata.get("assign_to_params_buffers", False):
        where = f" of {prefix.rstrip('.')}" if prefix else ""
        raise RuntimeError(f"h3strict: load_state_dict(..., assign=True) cannot replace the parameters{where}: they "
                           "are the library's resident weights, which the model computes with; call "
                           "load_state_dict(state_dict) without assign (it copies into the library's memory)")


class _Node(torch.nn.Module):
    """A plain container, so parameter names are the checkpoint's ("transformer_blocks.0.attn.to_q.weight")."""

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):
        _refuse_assign(local_metadata, prefix)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)


class StrictTransformer(torch.nn.Module):
    """MiniMax-H3 (diffusers MiniMaxH3Transformer3DModel's forward) computed by the strict library."""

    def __init__(self, core):
        super().__init__()
        self._core = core
        self.grads_f32 = {}
        # Called after every node of a pass, in execution order, as node_hook(name, tensor, batched, rows_per_item)
        # (names: docs/strict.md section 4; backward "<node>.grad" and "param.<name>").  The tensor is a view of
        # the library's buffer, valid during the call only (clone it to keep it), None for device memory.  An
        # exception aborts the pass and propagates.
        self.node_hook = None
        slots, nodes = [], []
        for name, tensor in core.params:
            *path, leaf = name.split(".")
            node = self
            for k, part in enumerate(path):
                child = node._modules.get(part)
                if child is None:
                    child = _Node()
                    node.add_module(part, child)
                    nodes.append((".".join(path[:k + 1]), node._modules, part, child))
                node = child
            node.register_parameter(leaf, torch.nn.Parameter(tensor, requires_grad=True))
            slots.append((name, node._parameters, leaf))
        self._param_list = [self.get_parameter(name) for name, _ in core.params]
        # what the library reads: each parameter's slot, the Parameter in it and the memory it had at load
        self._param_checks = [(name, params, leaf, p, p.data_ptr(), p.dtype, p.shape, p.stride())
                              for (name, params, leaf), p in zip(slots, self._param_list)]
        self._node_checks = nodes  # and each container module in its parent
        cfg = core.config
        self.config = SimpleNamespace(**{f: (tuple(getattr(cfg, f)) if f == "patch_size" else getattr(cfg, f))
                                         for f, _ in cfg._fields_})

    @classmethod
    def from_pretrained(cls, path, device="cpu", threads=None, grad_operands=None, recompute=None, exact_grads=True):
        """Load a model directory in diffusers layout, or a pipeline snapshot holding transformer/.

        path: str, bytes or os.PathLike.  device: "cpu" (strict CPU backend; the weights are copied once into
        memory the model owns, so an optimizer may update the parameters in place) or "cuda" (weights uploaded
        once; inputs stay host tensors).  threads: OpenMP threads, an int from 1 to 1024, for the whole process
        (None keeps the current setting; results never depend on it).  grad_operands: "bf16" or "split" (the CUDA
        backward's dy operands, for the whole process; see the README).  recompute: "none" (default) or "blocks"
        (see the `recompute` property).  exact_grads: see the property.  Every argument is checked and the model
        loaded before the process-wide settings (threads, grad_operands) change: a failed call changes nothing."""
        if not isinstance(exact_grads, bool):
            raise ValueError(f"exact_grads must be True or False, got {exact_grads!r}")
        threads = _threads_arg(threads)
        operands = None
        if grad_operands is not None:
            mode = ctypes.c_int()
            check(lib.h3s_grad_operands_parse(str(grad_operands).encode(), ctypes.byref(mode)))
            operands = mode.value
        recompute_mode = None
        if recompute is not None:
            if not isinstance(recompute, str):
                raise ValueError(f"recompute must be 'none' or 'blocks', got {recompute!r}")
            m = ctypes.c_int()
            check(lib.h3s_recompute_parse(recompute.encode(), ctypes.byref(m)))
            recompute_mode = m.value
        model = cls(_Model(path, device))
        if recompute_mode is not None:
            check(lib.h3s_model_set_recompute(model._core.handle, recompute_mode))
        model.exact_grads = exact_grads
        if operands is not None:
            check(lib.h3s_set_grad_operands(operands))
        if threads is not None:
            lib.h3s_set_num_threads(threads)
        return model

    @property
    def exact_grads(self):
        """True (the default): the library hands every parameter gradient over in F32; a BF16 parameter's .grad is
        that gradient rounded once to BF16, and the F32 gradients of the last backward stay in `model.grads_f32`.
        False: the library hands a BF16 parameter's gradient over already rounded (h3s_model_set_grad_dtype BF16:
        the same .grad bits, half the gradient memory, and on CUDA the F32 gradients of the blocks' weights are
        never written); `model.grads_f32` then holds the F32 parameters' gradients only."""
        return lib.h3s_model_grad_dtype(self._core.handle) != _lib.BF16

    @exact_grads.setter
    def exact_grads(self, on):
        if not isinstance(on, bool):
            raise ValueError(f"exact_grads must be True or False, got {on!r}")
        check(lib.h3s_model_set_grad_dtype(self._core.handle, _lib.F32 if on else _lib.BF16))

    @property
    def recompute(self):
        """Per-block activation recomputation of the forwards made from now on: "none" keeps every activation the
        backward needs; "blocks" keeps only each block's input and runs the block's forward again in the backward
        (less memory, one more block forward per block; the gradients are bit-identical either way)."""
        return "blocks" if lib.h3s_model_recompute(self._core.handle) == 1 else "none"

    @recompute.setter
    def recompute(self, mode):
        if not isinstance(mode, str):
            raise ValueError(f"recompute must be 'none' or 'blocks', got {mode!r}")
        m = ctypes.c_int()
        check(lib.h3s_recompute_parse(mode.encode(), ctypes.byref(m)))
        check(lib.h3s_model_set_recompute(self._core.handle, m.value))

    def memory_bytes(self, reset_peak=False):
        """(live, peak) bytes of the tensors the model's passes hold in backend memory (device memory on CUDA):
        tapes, the backward's temporaries and its parameter gradients before they are handed over; not the
        weights.  The peak counts from the model's creation or the last call with reset_peak=True (which starts
        a new peak from the bytes live after this reading)."""
        h = self._core.handle
        live, peak = int(lib.h3s_model_live_bytes(h)), int(lib.h3s_model_peak_bytes(h))
        if reset_peak:
            lib.h3s_model_reset_peak_bytes(h)
        return live, peak

    def seeded_inputs(self, batch=1, seed=0, t_video=0.25, t_audio=0.6, text_tokens=6, frames=2,
                      latent_height=4, latent_width=6, audio_latents=4):
        """A seeded request on the packed t2va layout, as a dict of the forward's arguments: exactly the tensors
        `h3strict inputs --seed SEED --batch BATCH` writes for this model.  Item b depends on (seed, b) only, so
        item 0 is the same request in a batch of any size.  The ints are checked as `h3strict inputs` checks them
        (an int, not a bool: seed in [0, 2^64), batch and the sizes in [1, 2^24]); a TypeError or ValueError names
        the argument."""
        seed = _int_arg("seed", seed, 0, (1 << 64) - 1)
        batch = _int_arg("batch", batch, 1, _MAX_LAYOUT)
        sizes = [_int_arg(name, v, 1, _MAX_LAYOUT) for name, v in (
            ("text_tokens", text_tokens), ("frames", frames), ("latent_height", latent_height),
            ("latent_width", latent_width), ("audio_latents", audio_latents))]
        lo = _lib.LayoutOpts(*sizes, 0, 0, 0)
        c_in = Inputs()
        check(lib.h3s_inputs_seeded(ctypes.byref(self._core.config), ctypes.byref(lo), batch, seed,
                                    float(t_video), float(t_audio), ctypes.byref(c_in)))
        return _inputs_dict(c_in)

    @property
    def device(self):
        return torch.device(self._core.device)

    def _apply(self, fn, *args, **kwargs):
        raise RuntimeError("StrictTransformer's parameters are the library's resident weights: they cannot be "
                           "moved or cast (.to/.cuda/.half ...); load with from_pretrained(path, device=...)")

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):
        _refuse_assign(local_metadata, prefix)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)

    _NO_COPY = ("StrictTransformer cannot be copied or pickled: its parameters are the library's resident weights. "
                "Save the weights with torch.save(model.state_dict(), f), and load them into a model made by "
                "StrictTransformer.from_pretrained(path) with load_state_dict")

    def __deepcopy__(self, memo):
        raise TypeError(self._NO_COPY)

    def __reduce_ex__(self, protocol):
        raise TypeError(self._NO_COPY)

    def __copy__(self):  # a shallow copy shares the library's model, as copy.copy of a module shares its parameters
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def _check_params(self):
        """The library computes with the memory each parameter had at load: refuse a pass once a parameter was
        replaced (load_state_dict(assign=True), register_parameter) or given other memory (p.data = ...,
        torch.nn.utils.vector_to_parameters), which the module would show while the library read the old weights."""
        for path, modules, key, node in self._node_checks:
            if modules.get(key) is not node:
                raise RuntimeError(f"h3strict: module {path} was replaced or removed; the library computes with the "
                                   "weights it loaded, so the module would show weights the model does not use. Load "
                                   "new weights in place (model.load_state_dict(state_dict) without assign=True); "
                                   "this model must be loaded again with from_pretrained")
        for name, params, leaf, p, ptr, dtype, shape, stride in self._param_checks:
            q = params.get(leaf)
            if q is not p:
                what = "was replaced by another object" if q is not None else "was removed"
            elif p.data_ptr() != ptr or p.dtype != dtype or p.shape != shape or p.stride() != stride:
                what = "was given other memory or another layout (p.data = ..., vector_to_parameters, set_, as_strided)"
            else:
                continue
            raise RuntimeError(
                f"h3strict: parameter {name} {what}; the library computes with the weights it loaded, in their "
                "memory, so the module would show weights the model does not use. Load new weights in place: "
                "`with torch.no_grad(): p.copy_(new)`, or model.load_state_dict(state_dict) without assign=True "
                "(torch.nn.utils.vector_to_parameters replaces the memory: copy each slice instead); "
                "this model must be loaded again with from_pretrained")

    def forward(self, hidden_states, audio_hidden_states, encoder_hidden_states, timestep, timestep_indices,
                token_tags, position_ids, video_indices, audio_indices, text_indices, attention_mask=None,
                return_dict=True):
        args = (hidden_states, audio_hidden_states, encoder_hidden_states, timestep, timestep_indices, token_tags,
                position_ids, video_indices, audio_indices, text_indices, attention_mask)
        self._check_params()
        if torch.is_grad_enabled():
            for name, x in zip(_ARG_NAMES[3:], args[3:]):
                if isinstance(x, torch.Tensor) and x.requires_grad:
                    raise ValueError(f"{name}: requires grad, but the library computes gradients only for "
                                     f"hidden_states, audio_hidden_states and encoder_hidden_states; pass "
                                     f"{name}.detach() (or run under torch.no_grad())")
        need_tape = torch.is_grad_enabled() and (
            any(p.requires_grad for p in self._param_list) or
            any(isinstance(x, torch.Tensor) and x.requires_grad for x in args[:3]))
        sample, audio_sample = _StrictFunction.apply(self, self._core, need_tape, *args, *self._param_list)
        if not return_dict:
            return (sample, audio_sample)
        return StrictTransformerOutput(sample=sample, audio_sample=audio_sample)


class _OwnedInputs:
    def __init__(self, c_in):
        self.c_in = c_in

    def __del__(self):
        lib.h3s_inputs_free(ctypes.byref(self.c_in))


def _inputs_dict(c_in):
    owner = _OwnedInputs(c_in)
    out = {name: _view(getattr(c_in, name), owner) for name in _ARG_NAMES[:-1]}
    if c_in.attention_mask.data:
        out["attention_mask"] = _view(c_in.attention_mask, owner)
    return out


def load_inputs(path):
    """An inputs file (safetensors under the forward's argument names, as `h3strict inputs` writes) as a dict of
    CPU tensors to pass to StrictTransformer's forward.  path: str, bytes or os.PathLike."""
    raw = path_arg("path", path)
    c_in = Inputs()
    check(lib.h3s_inputs_read(raw, ctypes.byref(c_in)))
    return _inputs_dict(c_in)


# ------------------------------------------------------------------ scheduler and trajectory

def _f32_cpu(name, x):
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.device.type != "cpu" \
            or x.layout != torch.strided or not x.is_contiguous():
        raise TypeError(f"{name}: expected a contiguous float32 CPU tensor")
    _plain_memory(name, x)
    return x


class _Scheduler:
    """The rectified-flow Euler scheduler of MiniMax-H3 (F32, the reference's rounding points)."""

    VIDEO_SHIFT = 12.0
    AUDIO_SHIFT = 3.0

    @staticmethod
    def sigmas(steps, shift=12.0):
        """The sigma grid of `steps` Euler steps (steps + 1 points down to 0; unique_consecutive may shorten it)."""
        steps = _int_arg("steps", steps, 1, _MAX_SIGMA_STEPS)
        out = torch.empty(steps + 1, dtype=torch.float32)
        count = ctypes.c_int64()
        check(lib.h3s_schedule_sigmas(steps + 1, float(shift), out.data_ptr(), ctypes.byref(count)))
        return out[:count.value].clone()

    @staticmethod
    def timesteps(sigmas):
        """1 - sigmas[:-1] (t = 1 is clean)."""
        sigmas = _f32_cpu("sigmas", sigmas)
        out = torch.empty(max(sigmas.numel() - 1, 0), dtype=torch.float32)
        check(lib.h3s_schedule_timesteps(sigmas.data_ptr(), sigmas.numel(), out.data_ptr()))
        return out

    @staticmethod
    def step(x, velocity, t, sigma, sigma_next):
        """One Euler step: x0 = x + (1 - t) * v; r = sigma_next / sigma; r*x + (1 - r)*x0 (a new tensor)."""
        x, velocity = _f32_cpu("x", x), _f32_cpu("velocity", velocity)
        if x.shape != velocity.shape:
            raise ValueError(f"x {tuple(x.shape)} and velocity {tuple(velocity.shape)} differ in shape")
        out = torch.empty_like(x)
        lib.h3s_euler_step(x.data_ptr(), velocity.data_ptr(), x.numel(), float(t), float(sigma), float(sigma_next),
                           out.data_ptr())
        return out


scheduler = _Scheduler()


def trajectory(path, seeds=(11, 22, 33), steps=4, batch=4, with_grad=True, device="cpu", inputs=None,
               condition_rows=None, shift_video=0.0, shift_audio=0.0):
    """The dual trajectory (rollout alone vs item 0 of a training batch, compared bitwise at every Euler step) on
    the model at `path`.  inputs: None for seeded requests, or a dict of CPU tensors under the forward's argument
    names (the user's own request; item 0 is the rollout's).  condition_rows: the request's keyframe condition rows,
    None to infer them from its timesteps as `h3strict trajectory` does without --condition-rows (a request whose
    t_video is 0.999 or more must name them).  Returns the report (a dict: "summary" holds
    comparisons / differing / gradient_comparisons / gradient_differing).  The ints are checked as
    `h3strict trajectory` checks them (ints, not bools: 1 to 64 seeds, each in [0, 2^64); steps in [1, 1000];
    batch in [2, 4096]; condition_rows in [0, 2^40]); a TypeError or ValueError names the argument."""
    if device not in _DEVICES:
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise TypeError(f"seeds must be a sequence of ints, got {type(seeds).__name__}")
    seeds = [_int_arg(f"seeds[{k}]", s, 0, (1 << 64) - 1) for k, s in enumerate(seeds)]
    if not 1 <= len(seeds) <= _MAX_SEEDS:
        raise ValueError(f"seeds: 1 to {_MAX_SEEDS} seeds, got {len(seeds)}")
    steps = _int_arg("steps", steps, 1, _MAX_STEPS)
    batch = _int_arg("batch", batch, *_TRAJ_BATCH)
    if condition_rows is not None:
        condition_rows = _int_arg("condition_rows", condition_rows, 0, _MAX_CONDITION_ROWS)
    raw = path_arg("path", path)
    w = ctypes.c_void_p()
    check(lib.h3s_weights_load(raw, ctypes.byref(w)))
    try:
        o = _lib.TrajectoryOpts()
        seed_arr = (ctypes.c_uint64 * len(seeds))(*seeds)
        o.seeds, o.nseeds, o.steps, o.batch = seed_arr, len(seeds), steps, batch
        o.backend, o.with_grad = _DEVICES[device], 1 if with_grad else 0
        o.layout = _lib.LayoutOpts(6, 2, 4, 6, 4, 0, 0, 0)  # `h3strict trajectory`'s seeded layout
        o.shift_video, o.shift_audio = float(shift_video), float(shift_audio)
        if inputs is not None:
            req = Inputs()
            for name in _ARG_NAMES:
                setattr(req, name, _as_library_tensor(name, inputs.get(name), optional=name == "attention_mask"))
            o.request = ctypes.pointer(req)
            if condition_rows is None:
                # inferred from the validated request, as the CLI infers it (h3s_layout_condition_rows)
                batch_of = ctypes.c_int64()
                check(lib.h3s_inputs_validate(lib.h3s_weights_config(w), ctypes.byref(req), ctypes.byref(batch_of)))
                condition_rows = lib.h3s_layout_condition_rows(ctypes.byref(req))
            o.condition_rows = condition_rows
        text = ctypes.c_void_p()
        tot = _lib.TrajectoryTotals()
        check(lib.h3s_trajectory(w, ctypes.byref(o), ctypes.byref(text), ctypes.byref(tot)))
        try:
            report = json.loads(ctypes.string_at(text.value).decode())
        finally:
            lib.h3s_free(text)
        return report
    finally:
        lib.h3s_weights_free(w)
