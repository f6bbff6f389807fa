"""h3strict.torch against the CLI on the tiny model: forward bits equal `h3strict forward`, autograd gradients
bitwise equal `h3strict grad` (inputs and every parameter), item 0 of batch 3 equals batch 1, parameters that do
not require grad get none, parameters share the library's memory, bad tensors raise clear exceptions and leave
nothing written.  The CLI is $H3S_CLI, else `h3strict` on PATH (the package installs it)."""

import ctypes
import gc
import inspect
import json
import os
import struct
import subprocess
import sys
import warnings
from types import SimpleNamespace

import pytest
import torch

import h3strict
from h3strict import _lib
from h3strict.torch import (H3StrictError, H3StrictInputError, StrictTransformer, _OwnedGrads, _block_grads,
                            load_inputs, scheduler, trajectory)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
_ST_DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "BOOL": torch.bool,
              "BF16": torch.bfloat16}
ARGS = ("hidden_states", "audio_hidden_states", "encoder_hidden_states", "timestep", "timestep_indices",
        "token_tags", "position_ids", "video_indices", "audio_indices", "text_indices")


def read_safetensors(path):
    """name -> torch tensor (a copy), in file order; and the header."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        buf = bytearray(raw[8 + n + a:8 + n + b])
        t = torch.frombuffer(buf, dtype=_ST_DTYPES[e["dtype"]]) if buf else torch.empty(0, dtype=_ST_DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"])
    return out


def bits_equal(a, b):
    """Bitwise equality (so -0.0 != 0.0 and NaNs compare by payload)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = {torch.float32: torch.int32, torch.float64: torch.int64, torch.bfloat16: torch.int16}.get(a.dtype)
    return torch.equal(a.view(view), b.view(view)) if view else torch.equal(a, b)


@pytest.fixture(scope="session")
def work(tmp_path_factory, run_cli):
    d = tmp_path_factory.mktemp("h3s")
    run = run_cli

    run("init", "--preset", "tiny", "--seed", 5, "--out", d / "m")
    os.makedirs(d / "snap")
    run("init", "--preset", "tiny", "--seed", 5, "--out", d / "snap" / "transformer")
    for b in (1, 2, 3):
        run("inputs", "--model", d / "m", "--seed", 7, "--batch", b, "--out", d / f"in{b}.safetensors")
    run("inputs", "--model", d / "m", "--seed", 7, "--batch", 2, "--pad-to", 32, "--attention-mask",
        "--out", d / "in_mask.safetensors")
    run("forward", "--model", d / "m", "--inputs", d / "in_mask.safetensors", "--out", d / "out_mask.safetensors")
    run("init", "--preset", "tiny", "--seed", 6, "--out", d / "m6")
    run("forward", "--model", d / "m6", "--inputs", d / "in2.safetensors", "--out", d / "out6.safetensors")
    run("cotangent", "--model", d / "m", "--inputs", d / "in2.safetensors", "--seed", 3, "--out", d / "ct.safetensors")
    run("forward", "--model", d / "m", "--inputs", d / "in2.safetensors", "--out", d / "out.safetensors")
    run("grad", "--model", d / "m", "--inputs", d / "in2.safetensors", "--cotangent", d / "ct.safetensors",
        "--out", d / "grads.safetensors")
    return d


def inputs(work, b):
    return read_safetensors(work / f"in{b}.safetensors")


@pytest.fixture(scope="module")
def model(work):
    return StrictTransformer.from_pretrained(work / "m", device="cpu", threads=2)


def test_forward_bits_equal_cli(model, work):
    expect = read_safetensors(work / "out.safetensors")
    with torch.no_grad():
        out = model(**inputs(work, 2))
    assert bits_equal(out.sample, expect["sample"])
    assert bits_equal(out.audio_sample, expect["audio_sample"])
    sample, audio = model(**inputs(work, 2), return_dict=False)
    assert bits_equal(sample, expect["sample"]) and bits_equal(audio, expect["audio_sample"])


def test_attention_mask_and_padding_equal_cli(model, work):
    x = read_safetensors(work / "in_mask.safetensors")
    assert x["attention_mask"].dtype == torch.bool and not bool(x["attention_mask"].all())
    expect = read_safetensors(work / "out_mask.safetensors")
    with torch.no_grad():
        out = model(**x)
        plain = model(**inputs(work, 2))
    assert bits_equal(out.sample, expect["sample"]) and bits_equal(out.audio_sample, expect["audio_sample"])
    assert bits_equal(out.sample, plain.sample), "padding rows hidden by the mask change no live row"


def test_gradients_bitwise_equal_cli(model, work):
    x = inputs(work, 2)
    for k in ("hidden_states", "audio_hidden_states", "encoder_hidden_states"):
        x[k].requires_grad_(True)
    ct = read_safetensors(work / "ct.safetensors")
    expect = read_safetensors(work / "grads.safetensors")
    model.zero_grad(set_to_none=True)
    out = model(**x)
    torch.autograd.backward([out.sample, out.audio_sample], [ct["sample"], ct["audio_sample"]])
    for k in ("hidden_states", "audio_hidden_states", "encoder_hidden_states"):
        assert bits_equal(x[k].grad, expect[k]), k
    names = [n for n, _ in model.named_parameters()]
    assert names == [n for n in expect if n not in x], "parameter names and order are the checkpoint's"
    for name, p in model.named_parameters():
        exact = model.grads_f32[name]
        assert bits_equal(exact, expect[name]), name
        if p.dtype == torch.float32:
            assert bits_equal(p.grad, expect[name]), name
        else:  # torch keeps .grad in the parameter's dtype: the exact gradient rounded once
            assert p.grad.dtype == p.dtype and bits_equal(p.grad, expect[name].to(p.dtype)), name


def test_exact_grads_off_gives_the_same_grad_bits(work):
    """exact_grads=False: the library hands a BF16 parameter's gradient over already rounded; .grad has the bits of
    the exact gradient rounded once, and grads_f32 keeps the F32 parameters' gradients only."""
    m = StrictTransformer.from_pretrained(work / "m", device="cpu", threads=2, exact_grads=False)
    assert m.exact_grads is False
    x = inputs(work, 2)
    ct = read_safetensors(work / "ct.safetensors")
    expect = read_safetensors(work / "grads.safetensors")

    def owned():  # the library gradient sets alive (isinstance on every object wakes torch's deprecation shims)
        gc.collect()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return sum(isinstance(o, _OwnedGrads) for o in gc.get_objects())

    before = owned()
    out = m(**x)
    torch.autograd.backward([out.sample, out.audio_sample], [ct["sample"], ct["audio_sample"]])
    n_bf16 = 0
    for name, p in m.named_parameters():
        assert p.grad.dtype == p.dtype and bits_equal(p.grad, expect[name].to(p.dtype)), name
        if p.dtype == torch.float32:
            assert bits_equal(m.grads_f32[name], expect[name]), name
        else:
            assert name not in m.grads_f32, name
            n_bf16 += 1
    assert n_bf16 > 0
    m.grads_f32 = {}  # the F32 gradients' views go; every .grad stays, and must not keep the library's set alive
    assert owned() == before, "a .grad keeps the library's gradient set alive (docs/api.md: torch's own tensor)"
    m.exact_grads = True
    assert m.exact_grads is True
    with pytest.raises(ValueError, match="exact_grads"):
        m.exact_grads = 1


def test_recompute_blocks_gives_the_same_gradients_in_less_memory(work):
    """recompute="blocks" keeps each block's input only and runs the block again in the backward: every gradient is
    the CLI's (no recomputation) bit for bit, and the model's peak pass memory is lower."""
    x = inputs(work, 2)
    ct = read_safetensors(work / "ct.safetensors")
    expect = read_safetensors(work / "grads.safetensors")
    peaks = {}
    for mode in ("none", "blocks"):
        m = StrictTransformer.from_pretrained(work / "m", device="cpu", threads=2, recompute=mode)
        assert m.recompute == mode
        xin = {k: (v.clone().requires_grad_(True) if k == "hidden_states" else v) for k, v in x.items()}
        out = m(**xin)
        torch.autograd.backward([out.sample, out.audio_sample], [ct["sample"], ct["audio_sample"]])
        assert bits_equal(xin["hidden_states"].grad, expect["hidden_states"]), mode
        for name, _ in m.named_parameters():
            assert bits_equal(m.grads_f32[name], expect[name]), (mode, name)
        live, peaks[mode] = m.memory_bytes(reset_peak=True)
        assert 0 <= live <= peaks[mode]
        assert m.memory_bytes()[1] <= peaks[mode], "reset_peak starts a new peak from the live bytes"
    assert 0 < peaks["blocks"] < peaks["none"], peaks
    with pytest.raises(H3StrictError, match="recompute|blocks"):
        m.recompute = "sometimes"
    with pytest.raises(ValueError):
        m.recompute = 1
    assert m.recompute == "blocks", "a refused mode leaves the model's mode as it was"


def test_item0_of_batch3_equals_batch1(model, work):
    outs, grads = [], []
    for b in (3, 1):
        x = inputs(work, b)
        x["hidden_states"].requires_grad_(True)
        out = model(**x)
        (out.sample.square().sum() + out.audio_sample.sum()).backward()
        outs.append(out)
        grads.append((x["hidden_states"].grad, model.grads_f32["proj_out.weight"]))
    assert bits_equal(outs[0].sample[:1], outs[1].sample)
    assert bits_equal(outs[0].audio_sample[:1], outs[1].audio_sample)
    assert bits_equal(grads[0][0][:1], grads[1][0]), "item 0's input gradient"
    assert not bits_equal(outs[0].sample[1:2], outs[1].sample), "items 1.. are other requests"


def test_frozen_parameters_get_no_gradient(model, work):
    chosen = {"proj_out.weight", "transformer_blocks.1.attn.to_q.weight", "token_refiner.final_norm.weight"}
    expect = read_safetensors(work / "grads.safetensors")
    ct = read_safetensors(work / "ct.safetensors")
    try:
        for name, p in model.named_parameters():
            p.requires_grad_(name in chosen)
            p.grad = None
        out = model(**inputs(work, 2))
        torch.autograd.backward([out.sample, out.audio_sample], [ct["sample"], ct["audio_sample"]])
        assert set(model.grads_f32) == chosen
        for name, p in model.named_parameters():
            if name in chosen:
                assert bits_equal(model.grads_f32[name], expect[name]), name
            else:
                assert p.grad is None, name
        for p in model.parameters():
            p.requires_grad_(False)
        x = inputs(work, 2)
        x["hidden_states"].requires_grad_(True)
        out = model(**x)
        torch.autograd.backward([out.sample, out.audio_sample], [ct["sample"], ct["audio_sample"]])
        assert model.grads_f32 == {} and bits_equal(x["hidden_states"].grad, expect["hidden_states"])
    finally:
        for p in model.parameters():
            p.requires_grad_(True)
            p.grad = None


def test_seeded_and_loaded_inputs_are_the_cli_files(model, work):
    for b in (1, 3):
        want = inputs(work, b)
        for got in (model.seeded_inputs(batch=b, seed=7), load_inputs(work / f"in{b}.safetensors")):
            assert list(got) == list(ARGS)
            for k in ARGS:
                assert bits_equal(got[k], want[k]), (b, k)
    assert not bits_equal(model.seeded_inputs(batch=1, seed=8)["hidden_states"], inputs(work, 1)["hidden_states"])
    with pytest.raises(H3StrictError, match="nothing"):
        load_inputs(work / "nothing.safetensors")


def test_node_hook_sees_every_node_and_can_abort(model, work):
    seen = []
    model.node_hook = lambda name, t, batched, rows: seen.append((name, t.clone(), batched, rows))
    try:
        x = inputs(work, 2)
        model.get_parameter("proj_out.weight").requires_grad_(True)
        for name, p in model.named_parameters():
            p.requires_grad_(name == "proj_out.weight")
        out = model(**x)
        names = [n for n, *_ in seen]
        assert names[0] == "rope_table" and "block.1.attention" in names and names[-1] == "audio_proj_out"
        assert bits_equal(seen[-1][1].reshape(out.audio_sample.shape), out.audio_sample)
        assert seen[-1][2] is True and seen[-1][3] == out.audio_sample.shape[1]
        seen.clear()
        out.sample.sum().backward()
        names = [n for n, *_ in seen]
        assert "block.0.attention.grad_q" in names and [n for n in names if n.startswith("param.")] == [
            "param.proj_out.weight"]

        def boom(name, t, batched, rows):
            if name == "block.0.q_proj":
                raise KeyError("stop here")
        model.node_hook = boom
        with pytest.raises(KeyError, match="stop here"):
            model(**x)
    finally:
        model.node_hook = None
        for p in model.parameters():
            p.requires_grad_(True)
            p.grad = None


def test_parameters_share_the_library_memory(model, work):
    expect = read_safetensors(work / "out.safetensors")
    bias = model.get_parameter("proj_out.bias")
    assert bias.dtype == torch.float32 and bias.shape == (24,)
    with torch.no_grad():
        saved = bias.clone()
        bias.add_(1.0)  # an optimizer-style in-place step
        moved = model(**inputs(work, 2)).sample
        bias.copy_(saved)
        back = model(**inputs(work, 2)).sample
    assert not bits_equal(moved, expect["sample"]), "the library reads the parameter's memory"
    assert bits_equal(back, expect["sample"])
    with pytest.raises(RuntimeError, match="cannot be moved or cast"):
        model.to(torch.float64)


def test_load_state_dict_writes_the_library_weights(model, work):
    """Syncing trained weights into a rollout model: load_state_dict copies into the library's memory."""
    other = StrictTransformer.from_pretrained(work / "m6")
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        model.load_state_dict(other.state_dict())
        with torch.no_grad():
            out = model(**inputs(work, 2))
        expect = read_safetensors(work / "out6.safetensors")
        assert bits_equal(out.sample, expect["sample"]) and bits_equal(out.audio_sample, expect["audio_sample"])
    finally:
        model.load_state_dict(saved)
    with torch.no_grad():
        assert bits_equal(model(**inputs(work, 2)).sample, read_safetensors(work / "out.safetensors")["sample"])


def test_in_place_change_between_forward_and_backward_is_refused(model, work):
    out = model(**inputs(work, 2))
    p = model.get_parameter("proj_out.bias")
    with torch.no_grad():
        p.add_(0.0)  # bumps the version counter
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sample.sum().backward()
    model.zero_grad(set_to_none=True)


def test_snapshot_directory_loads(work):
    snap = StrictTransformer.from_pretrained(work / "snap", device="cpu")
    expect = read_safetensors(work / "out.safetensors")
    with torch.no_grad():
        assert bits_equal(snap(**inputs(work, 2)).sample, expect["sample"])


@pytest.mark.parametrize("name,bad,exc,match", [
    ("hidden_states", lambda t: t.double(), TypeError, "hidden_states: dtype float64"),
    ("video_indices", lambda t: t.int(), TypeError, "video_indices: dtype int32"),
    ("hidden_states", lambda t: t.transpose(1, 2).contiguous().transpose(1, 2), ValueError, "not contiguous"),
    ("hidden_states", lambda t: t.to("meta"), ValueError, "host memory"),
    ("hidden_states", lambda t: t[..., :-1].contiguous(), H3StrictInputError, "hidden_states"),
    ("audio_hidden_states", lambda t: t[:1].contiguous(), H3StrictInputError, "audio_hidden_states|batch"),
    ("video_indices", lambda t: t + 1000, H3StrictInputError, "video_indices"),
    ("token_tags", lambda t: t * 0 + 7, H3StrictInputError, "token_tags"),
    ("position_ids", lambda t: [1, 2], TypeError, "expected a torch.Tensor"),
])
def test_bad_tensors_raise_and_write_nothing(model, work, name, bad, exc, match):
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    x = inputs(work, 2)
    x[name] = bad(x[name])
    with pytest.raises(exc, match=match):
        model(**x)
    for n, p in model.named_parameters():
        assert bits_equal(p.detach(), before[n]), n
    with torch.no_grad():
        again = model(**inputs(work, 2)).sample
    assert bits_equal(again, read_safetensors(work / "out.safetensors")["sample"])


def test_library_errors_are_clear(work):
    with pytest.raises(H3StrictError, match="nothing: No such file"):
        StrictTransformer.from_pretrained(work / "nothing")
    with pytest.raises(ValueError, match="device must be"):
        StrictTransformer.from_pretrained(work / "m", device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(H3StrictError, match="CUDA|GPU"):
            StrictTransformer.from_pretrained(work / "m", device="cuda")
    assert h3strict.__version__ == "0.1.0"


def test_package_imports_torch_before_the_library():
    """`import h3strict` loads torch first when it is installed (a CUDA build of the library loaded before torch made
    a later `import torch` abort the process on the H200 machine: docs/RELIABILITY.md); the library is loaded after."""
    probe = ("import ctypes, sys\n"
             "orig, seen = ctypes.CDLL, []\n"
             "def cdll(name, *args, **kwargs):\n"
             "    if 'h3strict' in str(name):\n"
             "        seen.append('torch' in sys.modules)\n"
             "    return orig(name, *args, **kwargs)\n"
             "ctypes.CDLL = cdll\n"
             "import h3strict\n"
             "print(seen)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[True]"  # the library loaded once, with torch already imported


def test_scheduler_and_rollout_vs_training(model, work):
    sig = scheduler.sigmas(4, shift=12.0)
    assert sig[0].item() == 1.0 and sig[-1].item() == 0.0 and sig.dtype == torch.float32
    ts = scheduler.timesteps(sig)
    assert bits_equal(ts, (1 - sig[:-1]))
    # a rollout (batch 1) and the same request inside a training batch of 3, two Euler steps each
    lat = {}
    for b in (1, 3):
        x = inputs(work, b)
        v, a = x["hidden_states"], x["audio_hidden_states"]
        with torch.no_grad():
            for i in range(2):
                x["hidden_states"], x["audio_hidden_states"] = v, a
                out = model(**x)
                v = scheduler.step(v, out.sample, ts[i].item(), sig[i].item(), sig[i + 1].item())
                a = scheduler.step(a, out.audio_sample, ts[i].item(), sig[i].item(), sig[i + 1].item())
        lat[b] = (v, a)
    assert bits_equal(lat[3][0][:1], lat[1][0]) and bits_equal(lat[3][1][:1], lat[1][1])
    report = trajectory(work / "m", seeds=(11,), steps=2, batch=3, with_grad=True)
    s = report["summary"]
    assert (s["comparisons"], s["differing"], s["gradient_comparisons"], s["gradient_differing"]) == (8, 0, 6, 0)
    own = trajectory(work / "m", seeds=(11,), steps=1, batch=2, with_grad=False, inputs=inputs(work, 2))
    assert own["summary"]["comparisons"] == 4 and own["summary"]["differing"] == 0


def test_trajectory_infers_condition_rows_as_the_cli(work, run_cli):
    """A keyframed request without condition_rows: the binding infers them from the timesteps as the CLI does (it
    ran them as 0: other velocities at every step), so both reports carry the same layout and the same digests."""
    kf = work / "in_kf.safetensors"
    run_cli("inputs", "--model", work / "m", "--seed", 7, "--keyframes", "first", "--out", kf)
    run_cli("trajectory", "--model", work / "m", "--inputs", kf, "--steps", 1, "--batch", 2, "--no-grad", "--quiet",
            "--out", work / "traj_kf.json")
    cli_report = json.loads((work / "traj_kf.json").read_text())
    ours = trajectory(work / "m", seeds=(11,), steps=1, batch=2, with_grad=False, inputs=load_inputs(kf))
    assert cli_report["layout"]["condition_rows"] > 0
    assert ours["layout"] == cli_report["layout"]
    assert ours["seeds"] == cli_report["seeds"]
    named = trajectory(work / "m", seeds=(11,), steps=1, batch=2, with_grad=False, inputs=load_inputs(kf),
                       condition_rows=cli_report["layout"]["condition_rows"])
    assert named["seeds"] == cli_report["seeds"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_cuda_bits_equal_cli_cuda(work, cli):
    for name, extra in (("out_cuda", []), ("grads_cuda", ["--cotangent", work / "ct.safetensors"])):
        cmd = "forward" if name == "out_cuda" else "grad"
        subprocess.run([cli, cmd, "--device", "cuda", "--model", work / "m", "--inputs", work / "in2.safetensors",
                        *extra, "--out", work / f"{name}.safetensors"], check=True, stdout=subprocess.DEVNULL)
    m = StrictTransformer.from_pretrained(work / "m", device="cuda")
    assert m.get_parameter("proj_out.weight").device.type == "cuda"
    x = inputs(work, 2)
    x["hidden_states"].requires_grad_(True)
    out = m(**x)
    assert out.sample.device.type == "cuda" and out.audio_sample.device.type == "cuda"  # the model's device
    expect = read_safetensors(work / "out_cuda.safetensors")
    assert bits_equal(out.sample.cpu(), expect["sample"]) and bits_equal(out.audio_sample.cpu(), expect["audio_sample"])
    ct = {k: v.cuda() for k, v in read_safetensors(work / "ct.safetensors").items()}  # read in device memory
    torch.autograd.backward([out.sample, out.audio_sample], [ct["sample"], ct["audio_sample"]])
    # the library's backward returned with its pass queued (deferred); autograd's end finished it
    assert _lib.lib.h3s_model_deferred_backward(m._core.handle) == 1
    assert _lib.lib.h3s_model_pending(m._core.handle) == 0
    g = read_safetensors(work / "grads_cuda.safetensors")
    assert bits_equal(x["hidden_states"].grad, g["hidden_states"])
    for name, p in m.named_parameters():
        assert m.grads_f32[name].device.type == "cuda", name  # the library's device gradients, no host round trip
        assert bits_equal(m.grads_f32[name].cpu(), g[name]), name
        assert p.grad.device == p.device and bits_equal(p.grad.cpu(), g[name].to(p.dtype)), name
    with torch.no_grad():
        o3, o1 = m(**inputs(work, 3)), m(**inputs(work, 1))
    assert bits_equal(o3.sample[:1], o1.sample) and bits_equal(o3.audio_sample[:1], o1.audio_sample)
    # a loss computed on the GPU (the outputs' device) gives the bits of its cotangents passed explicitly; a cotangent
    # with a NaN is refused by the library's device check, with its index
    m.zero_grad(set_to_none=True)
    out = m(**x)
    (out.sample.square().sum() + out.audio_sample.sum()).backward()
    m2 = {name: p.grad.clone() for name, p in m.named_parameters()}
    m.zero_grad(set_to_none=True)
    out = m(**x)
    torch.autograd.backward([out.sample, out.audio_sample], [2 * out.sample.detach(), torch.ones_like(out.audio_sample)])
    for name, p in m.named_parameters():
        assert bits_equal(p.grad, m2[name]), name
    out = m(**x)
    bad = torch.ones_like(out.sample)
    bad.view(-1)[7] = float("nan")
    with pytest.raises(H3StrictError, match=r"sample\[7\] is not finite"):
        torch.autograd.backward([out.sample, out.audio_sample], [bad, torch.ones_like(out.audio_sample)])
    # exact_grads off: the library's BF16 device gradients become .grad as they are, with the same bits
    m.exact_grads = False
    m.zero_grad(set_to_none=True)
    out = m(**x)
    torch.autograd.backward([out.sample, out.audio_sample], [ct["sample"], ct["audio_sample"]])
    for name, p in m.named_parameters():
        assert p.grad.device == p.device and bits_equal(p.grad.cpu(), g[name].to(p.dtype)), name
        assert (name in m.grads_f32) == (p.dtype == torch.float32), name
    # a partial request (every third parameter frozen) lays the device block out anew: the others keep their bits
    frozen = {name for k, (name, _) in enumerate(m.named_parameters()) if k % 3 == 0}
    try:
        for name, p in m.named_parameters():
            p.requires_grad_(name not in frozen)
        m.zero_grad(set_to_none=True)
        out = m(**x)
        torch.autograd.backward([out.sample, out.audio_sample], [ct["sample"], ct["audio_sample"]])
        for name, p in m.named_parameters():
            if name in frozen:
                assert p.grad is None, name
            else:
                assert p.grad.device == p.device and bits_equal(p.grad.cpu(), g[name].to(p.dtype)), name
    finally:
        for p in m.parameters():
            p.requires_grad_(True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_cuda_deferred_backward_error_raises_from_backward(work, monkeypatch):
    """A device error of the deferred backward (h3s_model_finish failing) raises from loss.backward(), after autograd
    has handed the gradients over; the model's next pass runs normally."""
    import h3strict.torch as ht
    m = StrictTransformer.from_pretrained(work / "m", device="cuda")
    x = inputs(work, 1)
    real = ht.lib

    class FailingFinish:
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def h3s_model_finish(handle):
            assert real.h3s_model_pending(handle) == 1  # the backward returned with its pass queued
            real.h3s_model_finish(handle)
            real.h3s_set_error(_lib.ERR_DEVICE, b"injected device failure")
            return _lib.ERR_DEVICE

    monkeypatch.setattr(ht, "lib", FailingFinish())
    out = m(**x)
    with pytest.raises(H3StrictError, match="injected device failure"):
        (out.sample.square().sum() + out.audio_sample.sum()).backward()
    monkeypatch.setattr(ht, "lib", real)
    assert real.h3s_model_pending(m._core.handle) == 0
    out = m(**x)
    (out.sample.square().sum() + out.audio_sample.sum()).backward()
    assert all(p.grad is not None for p in m.parameters())


def test_device_block_layout_is_read_once_and_checked(monkeypatch):
    """The binding's view of a gradient block (h3s_grads.block): each gradient at its offset with its dtype and shape;
    the layout is kept for the next backward with the same request and block size, read again when an offset moved,
    and a layout whose gradients overlap is refused.  Host memory stands in for the device block here."""
    buf = torch.arange(1024, dtype=torch.int32)  # 4096 bytes, each word its index
    base = buf.data_ptr()
    specs = [(0, _lib.F32, (4, 8)), (256, _lib.BF16, (3,)), (512, _lib.F32, (16,))]  # (offset, dtype, shape)

    def grads(offsets):
        g = _lib.Grads()
        params = (_lib.Tensor * 4)()
        for k, ((_, dt, shape), off) in enumerate(zip(specs, offsets)):
            t = params[k if k < 1 else k + 1]  # parameter 1 not asked for
            t.dtype, t.ndim, t.data, t.device = dt, len(shape), base + off, 0
            for d, n in enumerate(shape):
                t.shape[d] = n
        g.params = ctypes.cast(params, ctypes.POINTER(_lib.Tensor))
        g.block.dtype, g.block.ndim, g.block.data, g.block.device = _lib.F32, 1, base, 0
        g.block.shape[0] = 1024
        g._keep = params
        return g

    need = (True, False, True, True)
    core = SimpleNamespace(grad_layout=None, handle=None)  # h3s_model_grad_dtype(NULL): one value for every call
    v = _block_grads(core, grads([0, 256, 512]), buf, need)
    assert sorted(v) == [0, 2, 3]
    assert v[0].dtype == torch.float32 and v[0].shape == (4, 8)
    assert bits_equal(v[0].view(torch.int32), buf[:32].view(4, 8))
    assert v[2].dtype == torch.bfloat16 and v[2].shape == (3,)
    assert bits_equal(v[2], buf[64:66].view(torch.bfloat16)[:3])
    assert bits_equal(v[3].view(torch.int32), buf[128:144])
    kept = core.grad_layout
    _block_grads(core, grads([0, 256, 512]), buf, need)
    assert core.grad_layout is kept  # the same request and block: the kept layout
    v = _block_grads(core, grads([0, 256, 768]), buf, need)  # the last gradient moved: read again
    assert core.grad_layout is not kept and bits_equal(v[3].view(torch.int32), buf[192:208])
    kept = core.grad_layout
    # another gradient dtype for the model (exact_grads): read again, even with every offset and the size unchanged
    monkeypatch.setattr(h3strict.torch.lib, "h3s_model_grad_dtype", lambda handle: _lib.BF16)
    _block_grads(core, grads([0, 256, 768]), buf, need)
    assert core.grad_layout is not kept
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match="does not follow the previous one"):
        # 128 bytes at 0, then a gradient at 64
        _block_grads(SimpleNamespace(grad_layout=None, handle=None), grads([0, 64, 512]), buf, need)


# ------------------------------------------------------------------ the binding's guards (review findings)

def fresh(work):
    return StrictTransformer.from_pretrained(work / "m", device="cpu", threads=2)


def test_replaced_parameter_memory_is_refused(work):
    """The library computes with the memory each parameter had at load: a pass after a parameter got other memory
    (p.data = ..., vector_to_parameters) or was replaced by another object raises, naming the parameter and the
    in-place way; load_state_dict(assign=True) is refused before any parameter changes."""
    x = inputs(work, 2)
    expect = read_safetensors(work / "out.safetensors")
    m = fresh(work)
    p = m.get_parameter("proj_out.bias")
    p.data = p.data.clone()  # the same values in torch's memory: the module would show what the model ignores
    with pytest.raises(RuntimeError, match=r"proj_out\.bias was given other memory.*copy_"):
        m(**x)
    m = fresh(work)
    torch.nn.utils.vector_to_parameters(torch.nn.utils.parameters_to_vector(m.parameters()), m.parameters())
    with pytest.raises(RuntimeError, match="was given other memory"):
        m(**x)
    m = fresh(work)
    w = m.get_parameter("proj_out.weight")  # the same memory and shape, read in another layout (transposed strides)
    w.data = torch.as_strided(w.data, w.shape, (1, w.shape[0]))
    with pytest.raises(RuntimeError, match=r"proj_out\.weight was given other memory"):
        m(**x)
    m = fresh(work)
    m.proj_out.weight = torch.nn.Parameter(m.proj_out.weight.detach().clone())
    with pytest.raises(RuntimeError, match=r"proj_out\.weight was replaced"):
        m(**x)
    m = fresh(work)
    m.proj_out = torch.nn.Linear(1, 1)
    with pytest.raises(RuntimeError, match="module proj_out was replaced"):
        m(**x)
    m = fresh(work)
    before = list(m.parameters())
    zeros = {k: torch.zeros_like(v) for k, v in m.state_dict().items()}
    if "assign" in inspect.signature(torch.nn.Module.load_state_dict).parameters:  # torch >= 2.1
        with pytest.raises(RuntimeError, match="assign=True"):
            m.load_state_dict(zeros, assign=True)
        wrapper = torch.nn.ModuleDict({"transformer": m})
        with pytest.raises(RuntimeError, match="assign=True"):
            wrapper.load_state_dict({"transformer." + k: v for k, v in zeros.items()}, assign=True)
    assert all(a is b for a, b in zip(m.parameters(), before)), "no parameter was replaced"
    with torch.no_grad():
        assert bits_equal(m(**x).sample, expect["sample"]), "the weights are the loaded ones"
    m.load_state_dict(zeros)  # without assign: copied into the library's memory, which the next pass reads
    with torch.no_grad():
        assert bool((m(**x).sample == 0).all())


def test_backward_frees_the_tape_while_the_loss_is_kept(work):
    """backward() without retain_graph frees the forward's activations even while the loss is kept (for logging);
    with retain_graph=True the tape stays for a second backward (twice the gradients), then goes with the last."""
    m = fresh(work)
    x = inputs(work, 2)
    base = m.memory_bytes()[0]
    losses = []
    for _ in range(3):
        loss = m(**x).sample.square().sum()
        assert m.memory_bytes()[0] > base, "the tape is live until the backward"
        loss.backward()
        losses.append(loss)
        assert m.memory_bytes()[0] == base, "the backward freed the tape"
    out = m(**x)
    del out
    assert m.memory_bytes()[0] == base, "outputs dropped without a backward free the tape"
    m.zero_grad(set_to_none=True)
    m(**x).sample.sum().backward()
    once = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad(set_to_none=True)
    loss = m(**x).sample.sum()
    loss.backward(retain_graph=True)
    assert m.memory_bytes()[0] > base, "retain_graph keeps the tape"
    loss.backward()
    assert m.memory_bytes()[0] == base
    for n, p in m.named_parameters():
        assert bits_equal(p.grad, once[n] + once[n]), n
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()


def test_input_gradient_is_a_copy_not_a_view_of_the_gradient_set(work, monkeypatch):
    """An input's .grad is its own tensor: dropping the parameters' gradients frees the library's gradient set
    while the input's gradient is kept."""
    import h3strict.torch as ht
    freed = []
    real = ht.lib.h3s_grads_free
    monkeypatch.setattr(ht.lib, "h3s_grads_free", lambda g: (freed.append(1), real(g)))
    m = fresh(work)
    m.requires_grad_(False)
    m.get_parameter("proj_out.weight").requires_grad_(True)
    x = inputs(work, 2)
    x["encoder_hidden_states"].requires_grad_(True)
    ct = read_safetensors(work / "ct.safetensors")
    gc.collect()  # the earlier tests' garbage goes first
    freed.clear()
    out = m(**x)
    torch.autograd.backward([out.sample, out.audio_sample], [ct["sample"], ct["audio_sample"]])
    del out
    m.grads_f32 = {}
    m.zero_grad(set_to_none=True)
    gc.collect()
    assert freed == [1], "the gradient set is freed while the input's gradient lives"
    assert bits_equal(x["encoder_hidden_states"].grad, read_safetensors(work / "grads.safetensors")[
        "encoder_hidden_states"])


def test_threads_out_of_range_is_refused_and_changes_nothing(work):
    _lib.lib.h3s_set_num_threads(2)
    for bad in (0, 1025, 2**31, 2**32 + 1, 100000, True, 2.0, "2"):
        with pytest.raises(ValueError, match="threads"):
            StrictTransformer.from_pretrained(work / "m", threads=bad)
        assert _lib.lib.h3s_get_num_threads() == 2, bad
    StrictTransformer.from_pretrained(work / "m", threads=1)
    assert _lib.lib.h3s_get_num_threads() == 1
    _lib.lib.h3s_set_num_threads(2)


def test_paths_are_os_paths(work, tmp_path):
    """Paths are encoded as the OS encodes them (str, bytes, os.PathLike, non-UTF-8 names); an embedded NUL is
    refused (C would read up to it and open another file)."""
    with pytest.raises(ValueError, match="embedded null byte"):
        StrictTransformer.from_pretrained(str(work / "m") + "\0/no/such/dir")
    with pytest.raises(ValueError, match="embedded null byte"):
        load_inputs(str(work / "in2.safetensors") + "\0.bak")
    with pytest.raises(ValueError, match="embedded null byte"):
        trajectory(os.fsencode(work / "m") + b"\0x", seeds=(11,), steps=1, batch=2)
    x = inputs(work, 2)
    expect = read_safetensors(work / "out.safetensors")["sample"]
    m = StrictTransformer.from_pretrained(os.fsencode(work / "m"))
    assert bits_equal(load_inputs(os.fsencode(work / "in2.safetensors"))["hidden_states"], x["hidden_states"])
    odd = os.fsencode(tmp_path) + b"/m\xff"  # not UTF-8: a str path holds it surrogate-escaped
    try:
        os.mkdir(odd)
    except OSError:
        pytest.skip("this filesystem refuses non-UTF-8 names")
    for f in os.listdir(work / "m"):
        with open(work / "m" / f, "rb") as src, open(odd + b"/" + os.fsencode(f), "wb") as dst:
            dst.write(src.read())
    for path in (os.fsdecode(odd), odd):
        m = StrictTransformer.from_pretrained(path)
        with torch.no_grad():
            assert bits_equal(m(**x).sample, expect)


def test_failed_from_pretrained_changes_no_process_setting(work):
    _lib.lib.h3s_set_num_threads(2)
    operands = _lib.lib.h3s_get_grad_operands()
    other = "split" if operands == 0 else "bf16"
    for kw in (dict(grad_operands=other, device="tpu"), dict(threads=1, recompute="bogus"),
               dict(threads=1, grad_operands=other, exact_grads=1)):
        with pytest.raises((ValueError, H3StrictError)):
            StrictTransformer.from_pretrained(work / "m", **kw)
        assert _lib.lib.h3s_get_num_threads() == 2 and _lib.lib.h3s_get_grad_operands() == operands, kw
    with pytest.raises(H3StrictError, match="nothing"):
        StrictTransformer.from_pretrained(work / "nothing", threads=1, grad_operands=other)
    assert _lib.lib.h3s_get_num_threads() == 2 and _lib.lib.h3s_get_grad_operands() == operands


@pytest.mark.parametrize("name", ["timestep", "position_ids"])
def test_requires_grad_on_an_argument_without_gradient_is_refused(work, name):
    m = fresh(work)
    for frozen in (False, True):
        m.requires_grad_(not frozen)
        x = inputs(work, 2)
        x[name].requires_grad_(True)
        with pytest.raises(ValueError, match=f"{name}: requires grad.*detach"):
            m(**x)
    with torch.no_grad():  # no graph: nothing to refuse
        m(**x)


def test_seeded_inputs_and_trajectory_refuse_wrapping_integers(model, work):
    for kw, exc in ((dict(seed=-1), ValueError), (dict(seed=2**64), ValueError), (dict(seed=2**64 + 7), ValueError),
                    (dict(seed=True), TypeError), (dict(seed=7.0), TypeError), (dict(batch=0), ValueError),
                    (dict(batch=2**64 + 1), ValueError), (dict(batch=2.9), TypeError),
                    (dict(frames=2**64 + 2), ValueError), (dict(audio_latents=0), ValueError)):
        with pytest.raises(exc, match=next(iter(kw))):
            model.seeded_inputs(**kw)
    assert model.seeded_inputs(seed=2**64 - 1)["hidden_states"].shape[0] == 1
    # scheduler.sigmas checks its steps as the others do: numpy-style integer scalars pass, bool does not, and a
    # count beyond the library's grid is a ValueError before any allocation
    for steps, exc in ((True, TypeError), (0, ValueError), (2**24, ValueError), (2.0, TypeError)):
        with pytest.raises(exc, match="steps"):
            scheduler.sigmas(steps)
    assert torch.equal(scheduler.sigmas(torch.tensor(4)), scheduler.sigmas(4))
    for kw, exc in ((dict(seeds=(-1,)), ValueError), (dict(seeds=(2**64,)), ValueError),
                    (dict(seeds=tuple(range(65))), ValueError), (dict(seeds=(1.5,)), TypeError),
                    (dict(steps=2**64 + 2), ValueError), (dict(steps=0), ValueError), (dict(batch=2.0), TypeError),
                    (dict(batch=2**64 + 3), ValueError), (dict(condition_rows=-1), ValueError)):
        with pytest.raises(exc, match=next(iter(kw))):
            trajectory(work / "m", **kw)
    # a shift whose float sigma schedule rounds sigma 0 above 1 (a negative timestep) is refused before any work
    with pytest.raises(H3StrictError, match="audio shift 0.001: with 1 steps .* above 1"):
        trajectory(work / "m", seeds=(11,), steps=1, batch=2, with_grad=False, shift_audio=0.001)


def test_refused_backward_keeps_the_last_gradients(work):
    m = fresh(work)
    x = inputs(work, 2)
    m(**x).sample.sum().backward()
    good = dict(m.grads_f32)
    assert len(good) == len(list(m.parameters()))
    out = m(**x)
    with pytest.raises(H3StrictError, match="not finite"):
        out.sample.backward(torch.full_like(out.sample, float("nan")))
    assert m.grads_f32.keys() == good.keys() and all(m.grads_f32[k] is v for k, v in good.items())


@pytest.mark.parametrize("bad,exc,match", [
    (lambda t: torch._neg_view(t.clone()), ValueError, "a negative-bit view"),
    (lambda t: t.to_sparse(), TypeError, "layout sparse_coo"),
    (lambda t: t.to_mkldnn(), TypeError, "layout _mkldnn"),
])
def test_odd_layouts_are_refused(model, work, bad, exc, match):
    x = inputs(work, 2)
    try:
        x["hidden_states"] = bad(x["hidden_states"])
    except RuntimeError:
        pytest.skip("this torch cannot make that layout")
    with torch.no_grad(), pytest.raises(exc, match="hidden_states: " + match):
        model(**x)


def test_module_cannot_be_deep_copied_or_pickled(model, work):
    import copy
    import io
    import pickle
    for f in (copy.deepcopy, pickle.dumps, lambda mm: torch.save(mm, io.BytesIO())):
        with pytest.raises(TypeError, match="cannot be copied or pickled.*state_dict"):
            f(model)
    shallow = copy.copy(model)  # shares the library's model, as a shallow copy of a module shares its parameters
    with torch.no_grad():
        assert bits_equal(shallow(**inputs(work, 2)).sample, read_safetensors(work / "out.safetensors")["sample"])
    from h3strict.torch import _Handle
    _Handle.__new__(_Handle).__del__()  # a handle made without __init__ (unpickling) frees nothing and says nothing
