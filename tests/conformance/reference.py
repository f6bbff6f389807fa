#!/usr/bin/python3
"""Independent FP64 reference of the MiniMax-H3 transformer forward (docs/conformance.md).

Written from docs/model.md sections 3 and 4 (checked against the public diffusers sources), never
from this project's C code.  Python 3 + numpy only; run it with /usr/bin/python3.

  reference.py forward      --model DIR --inputs IN.safetensors --out OUT.npz|OUT.safetensors
                            [--precision fp64|bf16] [--save-nodes]
  reference.py compare      --model DIR --inputs IN --h3strict-out OUT.safetensors [--bound 0.03]
                            [--ref REF.npz] [--json RESULT.json]
  reference.py check-layout --inputs IN --text T --frames F --latent-height H --latent-width W
                            --audio-latents A [--keyframes first,last] [--pad-to N]
  reference.py mask-text    --inputs IN --rows [ITEM:]J,J,... [--rows ...] --out IN2 [--perturb-masked SEED]
  reference.py diff-outputs A.safetensors B.safetensors [--max-rel 0]

`--precision fp64` (the default) is the golden: every weight and input converted exactly to float64 and every
operation in float64, with no rounding to bf16 anywhere.  `--precision bf16` is a numpy emulation of the
strict-mode rounding points of docs/strict.md section 2, used only to calibrate the comparison bound.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

# --------------------------------------------------------------------------------------------- safetensors

_NP_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}


class InputError(Exception):
    """A malformed file or argument: reported as one line, exit status 2."""


def bf16_bits_to_f64(bits):
    """BF16 is the top half of an IEEE f32: shifting the 16 bits up is exact."""
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def f64_to_bf16_bits(x):
    """Round to nearest even (via f32, as every producer here does) and keep the top 16 bits."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def round_bf16(x):
    return bf16_bits_to_f64(f64_to_bf16_bits(x)).reshape(np.shape(x))


class SafeTensors:
    """Minimal reader: 8-byte little-endian header length, JSON header, raw little-endian data."""

    def __init__(self, path):
        self.path = path
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                head = f.read(8)
                if len(head) != 8:
                    raise InputError(f"{path}: not a safetensors file (shorter than 8 bytes)")
                (n,) = struct.unpack("<Q", head)
                if n > size - 8:
                    raise InputError(f"{path}: header length {n} runs past the end of the file")
                header = json.loads(f.read(n).decode("utf-8"))
        except OSError as e:
            raise InputError(f"{path}: {e.strerror}")
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(f"{path}: malformed safetensors header ({e})")
        self.data_start = 8 + n
        self.metadata = header.pop("__metadata__", {})
        self.entries = {}
        for name, e in header.items():
            dt = e.get("dtype")
            if dt not in _NP_DTYPES:
                raise InputError(f"{path}: tensor {name!r} has unsupported dtype {dt!r}")
            shape = [int(d) for d in e["shape"]]
            b, end = (int(v) for v in e["data_offsets"])
            want = int(np.prod(shape, dtype=np.int64)) * np.dtype(_NP_DTYPES[dt]).itemsize
            if end - b != want or b < 0 or self.data_start + end > size:
                raise InputError(f"{path}: tensor {name!r} has bad data_offsets for {dt}{shape}")
            self.entries[name] = (dt, shape, b)

    def __contains__(self, name):
        return name in self.entries

    def keys(self):
        return list(self.entries)

    def dtype(self, name):
        return self.entries[name][0]

    def shape(self, name):
        return list(self.entries[name][1])

    def raw(self, name):
        dt, shape, b = self.entries[name]
        count = int(np.prod(shape, dtype=np.int64))
        a = np.fromfile(self.path, dtype=np.dtype(_NP_DTYPES[dt]).newbyteorder("<"), count=count,
                        offset=self.data_start + b)
        return a.reshape(shape)

    def get(self, name):
        """The tensor as numpy; BF16 comes back as exact float64."""
        a = self.raw(name)
        return bf16_bits_to_f64(a).reshape(a.shape) if self.dtype(name) == "BF16" else a


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype_string, numpy array)}; BF16 arrays are given as uint16 bits."""
    header, blobs, off = {}, [], 0
    for name, (dt, a) in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.dtype(_NP_DTYPES[dt]).newbyteorder("<"))
        blob = a.tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------- model files

CONFIG_DEFAULTS = {
    "num_attention_heads": 56, "attention_head_dim": 128, "hidden_size": 5376, "num_layers": 50,
    "num_refiner_layers": 2, "ffn_dim": 14336, "in_channels": 24, "audio_in_channels": 32,
    "patch_size": [1, 2, 2], "text_dim": 5120, "freq_dim": 256, "time_embed_hidden_dim": 5376,
    "time_embed_dim": 2688, "rope_freq_dim": 16, "rope_theta": 10000.0, "norm_eps": 1e-5,
    "qk_norm_eps": 1e-5, "final_norm_eps": 1e-5,
}
WEIGHTS = "diffusion_pytorch_model.safetensors"
INDEX = WEIGHTS + ".index.json"


def resolve_model_dir(d):
    for cand in (d, os.path.join(d, "transformer")):
        if os.path.isfile(os.path.join(cand, "config.json")) and (
                os.path.isfile(os.path.join(cand, WEIGHTS)) or os.path.isfile(os.path.join(cand, INDEX))):
            return cand
    raise InputError(f"{d}: no config.json with {WEIGHTS} (or {INDEX}), nor a transformer/ subfolder holding them")


class Model:
    def __init__(self, model_dir):
        self.dir = resolve_model_dir(model_dir)
        with open(os.path.join(self.dir, "config.json")) as f:
            raw = json.load(f)
        self.cfg = dict(CONFIG_DEFAULTS)
        self.cfg.update({k: v for k, v in raw.items() if k in CONFIG_DEFAULTS})
        self.files = {}
        self.where = {}
        if os.path.isfile(os.path.join(self.dir, WEIGHTS)):
            st = SafeTensors(os.path.join(self.dir, WEIGHTS))
            self.where = {k: st for k in st.keys()}
        else:
            with open(os.path.join(self.dir, INDEX)) as f:
                wmap = json.load(f)["weight_map"]
            for name, fn in wmap.items():
                if fn not in self.files:
                    self.files[fn] = SafeTensors(os.path.join(self.dir, fn))
                if name not in self.files[fn]:
                    raise InputError(f"{INDEX}: {name!r} is mapped to {fn} which does not hold it")
                self.where[name] = self.files[fn]
        self.cache = {}
        self.check_shapes()

    def has(self, name):
        return name in self.where

    def dtype(self, name):
        return self.where[name].dtype(name)

    def w(self, name):
        """A parameter as float64 (exact conversion from its stored dtype)."""
        if name not in self.cache:
            if name not in self.where:
                raise InputError(f"{self.dir}: missing parameter {name!r}")
            self.cache[name] = self.where[name].get(name).astype(np.float64)
        return self.cache[name]

    def expected_shapes(self):
        c = self.cfg
        H, hd, nh, ffn = c["hidden_size"], c["attention_head_dim"], c["num_attention_heads"], c["ffn_dim"]
        inner = nh * hd
        vw = c["in_channels"] * int(np.prod(c["patch_size"]))
        tdim, ted = c["time_embed_hidden_dim"], c["time_embed_dim"]
        s = {
            "proj_in.weight": [H, vw], "proj_in.bias": [H],
            "audio_proj_in.weight": [H, c["audio_in_channels"]], "audio_proj_in.bias": [H],
            "context_embedder.weight": [H, c["text_dim"]], "context_embedder.bias": [H],
            "time_embedder.linear_1.weight": [tdim, c["freq_dim"]], "time_embedder.linear_1.bias": [tdim],
            "time_embedder.linear_2.weight": [ted, tdim], "time_embedder.linear_2.bias": [ted],
            "token_refiner.final_norm.weight": [H],
            "norm_out.norm.weight": [H], "norm_out.linear.weight": [2 * H, ted], "norm_out.linear.bias": [2 * H],
            "proj_out.weight": [vw, H], "proj_out.bias": [vw],
            "audio_proj_out.weight": [c["audio_in_channels"], H], "audio_proj_out.bias": [c["audio_in_channels"]],
        }

        def block(p):
            s.update({
                p + "norm1.weight": [H], p + "norm2.weight": [H],
                p + "attn.to_q.weight": [inner, H], p + "attn.to_k.weight": [inner, H],
                p + "attn.to_v.weight": [inner, H], p + "attn.norm_q.weight": [hd], p + "attn.norm_k.weight": [hd],
                p + "attn.to_out.0.weight": [H, inner],
                p + "ff.net.0.proj.weight": [2 * ffn, H], p + "ff.net.2.weight": [H, ffn],
            })
        for i in range(c["num_refiner_layers"]):
            block(f"token_refiner.refiner_blocks.{i}.")
        for i in range(c["num_layers"]):
            block(f"transformer_blocks.{i}.")
            s[f"transformer_blocks.{i}.adaln_proj.linear.weight"] = [18 * H, ted]
            s[f"transformer_blocks.{i}.adaln_proj.linear.bias"] = [18 * H]
        return s

    def dtype_notes(self):
        """Parameters whose stored dtype differs from the released mixed-precision checkpoint (section 2)."""
        f32 = ("proj_in.", "audio_proj_in.", "time_embedder.", "proj_out.", "audio_proj_out.")
        odd = [n for n in self.expected_shapes() if self.dtype(n) != ("F32" if n.startswith(f32) else "BF16")]
        return f"{len(odd)} parameters stored in another dtype than the released checkpoint's, e.g. {odd[:3]}" \
            if odd else ""

    def check_shapes(self):
        c = self.cfg
        if 6 * c["rope_freq_dim"] > c["attention_head_dim"]:
            raise InputError(f"config: 6*rope_freq_dim = {6 * c['rope_freq_dim']} exceeds attention_head_dim")
        if c["freq_dim"] % 2:
            raise InputError("config: freq_dim must be even")
        for name, shape in self.expected_shapes().items():
            if name not in self.where:
                raise InputError(f"{self.dir}: missing parameter {name!r}")
            got = self.where[name].shape(name)
            if got != shape:
                raise InputError(f"{self.dir}: parameter {name!r} has shape {got}, expected {shape}")
            if self.dtype(name) not in ("F32", "BF16", "F16", "F64"):
                raise InputError(f"{self.dir}: parameter {name!r} has non-float dtype {self.dtype(name)}")


INPUT_NAMES = ("hidden_states", "audio_hidden_states", "encoder_hidden_states", "timestep", "timestep_indices",
               "token_tags", "position_ids", "video_indices", "audio_indices", "text_indices")


def load_inputs(path, cfg=None):
    st = SafeTensors(path)
    inp = {}
    for name in INPUT_NAMES + ("attention_mask",):
        if name not in st:
            if name == "attention_mask":
                continue
            raise InputError(f"{path}: missing tensor {name!r}")
        dt = st.dtype(name)
        a = st.get(name)
        if name in ("timestep_indices", "token_tags", "video_indices", "audio_indices", "text_indices"):
            if dt not in ("I64", "I32"):
                raise InputError(f"{path}: {name} must be I64, got {dt}")
            a = a.astype(np.int64)
        elif name == "attention_mask":
            if dt != "BOOL":
                raise InputError(f"{path}: attention_mask must be BOOL, got {dt}")
        else:
            if dt not in ("F32", "BF16", "F16", "F64"):
                raise InputError(f"{path}: {name} must be a float tensor, got {dt}")
            a = a.astype(np.float64) if name != "position_ids" else a  # position_ids keep their dtype (see rope)
        inp[name] = a
        inp["_dtype_" + name] = dt
    validate_inputs(inp, cfg, path)
    return inp


def validate_inputs(inp, cfg, path):
    def bad(msg):
        raise InputError(f"{path}: {msg}")
    hs, ahs, ehs = inp["hidden_states"], inp["audio_hidden_states"], inp["encoder_hidden_states"]
    if hs.ndim != 3 or ahs.ndim != 3 or ehs.ndim != 3:
        bad("hidden_states, audio_hidden_states, encoder_hidden_states must be [B, N, C]")
    B = hs.shape[0]
    if ahs.shape[0] != B or ehs.shape[0] != B:
        bad("the three activation inputs disagree on the batch size")
    pos = inp["position_ids"]
    if pos.ndim != 2 or pos.shape[1] != 3:
        bad(f"position_ids must be [S, 3], got {list(pos.shape)}")
    S = pos.shape[0]
    for n in ("timestep_indices", "token_tags"):
        if inp[n].shape != (S,):
            bad(f"{n} must be [S] = [{S}], got {list(inp[n].shape)}")
    if inp["timestep"].ndim != 1 or inp["timestep"].shape[0] < 1:
        bad("timestep must be [T] with T >= 1")
    T = inp["timestep"].shape[0]
    ti = inp["timestep_indices"]
    if ti.size and (ti.min() < 0 or ti.max() >= T):
        bad(f"timestep_indices out of range [0, {T})")
    tags = inp["token_tags"]
    if not np.isin(tags, (-1, 0, 1, 2)).all():
        bad("token_tags holds a value other than -1, 0, 1, 2")
    for n, x in (("video_indices", hs), ("audio_indices", ahs), ("text_indices", ehs)):
        idx = inp[n]
        if idx.shape != (x.shape[1],):
            bad(f"{n} has {idx.shape} entries but its activations have {x.shape[1]} rows")
        if idx.size and (idx.min() < 0 or idx.max() >= S):
            bad(f"{n} out of range [0, {S})")
    allidx = np.concatenate([inp["text_indices"], inp["video_indices"], inp["audio_indices"]])
    if np.unique(allidx).size != allidx.size:
        bad("text/video/audio indices overlap or repeat")
    if (tags[allidx] == -1).any():
        bad("an index list points at a padding row (token_tags == -1)")
    if "attention_mask" in inp:
        m = inp["attention_mask"]
        if m.shape == (B, 1, 1, S):
            inp["attention_mask"] = m = m.reshape(B, S)
        if m.shape != (B, S):
            bad(f"attention_mask must be [B, S] or [B, 1, 1, S], got {list(m.shape)}")
    if not all(np.isfinite(inp[n]).all() for n in ("hidden_states", "audio_hidden_states",
                                                      "encoder_hidden_states", "timestep")):
        bad("non-finite value in a float input")
    if cfg is not None:
        vw = cfg["in_channels"] * int(np.prod(cfg["patch_size"]))
        if hs.shape[2] != vw:
            bad(f"hidden_states has {hs.shape[2]} channels, the model wants {vw}")
        if ahs.shape[2] != cfg["audio_in_channels"]:
            bad(f"audio_hidden_states has {ahs.shape[2]} channels, the model wants {cfg['audio_in_channels']}")
        if ehs.shape[2] != cfg["text_dim"]:
            bad(f"encoder_hidden_states has {ehs.shape[2]} channels, the model wants {cfg['text_dim']}")


# --------------------------------------------------------------------------------------------- forward


class Numerics:
    """fp64: identity everywhere (the golden).  bf16: docs/strict.md section 2 rounding points, emulated."""

    def __init__(self, precision):
        self.emulate = precision == "bf16"

    def bf16(self, x):
        return round_bf16(x) if self.emulate else x

    def f32(self, x):
        return x.astype(np.float32).astype(np.float64) if self.emulate else x


def silu(x):
    return x / (1.0 + np.exp(-x))


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def linear(m, x, name, bias=True):
    y = x @ m.w(name + ".weight").T
    if bias and m.has(name + ".bias"):
        y = y + m.w(name + ".bias")
    return y


def rope_table(cfg, position_ids):
    """cos, sin [S, 6F].  The model casts position_ids to f32 first; that cast is part of the model."""
    F, theta = cfg["rope_freq_dim"], float(cfg["rope_theta"])
    pos = np.asarray(position_ids).astype(np.float32).astype(np.float64)
    inv_freq = 1.0 / theta ** (np.arange(0, 2 * F, 2, dtype=np.float64) / (2 * F))
    ang = np.concatenate([pos[:, 0:1] * inv_freq, pos[:, 1:2] * inv_freq, pos[:, 2:3] * inv_freq], axis=1)
    ang = np.concatenate([ang, ang], axis=1)
    return np.cos(ang), np.sin(ang)


def apply_rope(x, cos, sin):
    """x [B, S, heads, D]; rotate-half on the first 6F channels, the rest passes through."""
    r = cos.shape[1]
    xr, xp = x[..., :r], x[..., r:]
    x1, x2 = xr[..., : r // 2], xr[..., r // 2:]
    rot = np.concatenate([-x2, x1], axis=-1)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return np.concatenate([xr * c + rot * s, xp], axis=-1)


def attention(q, k, v, allowed, num):
    """q, k, v [B, S, heads, D]; allowed None or [B, S(query), S(key)] bool.  Softmax in float64."""
    B, S, nh, D = q.shape
    scale = 1.0 / math.sqrt(D)
    out = np.zeros_like(q)
    for b in range(B):
        for h in range(nh):
            s = (q[b, :, h, :] @ k[b, :, h, :].T) * scale
            if allowed is not None:
                s = np.where(allowed[b], s, -np.inf)
            m = np.max(s, axis=1, keepdims=True)
            m = np.where(np.isfinite(m), m, 0.0)
            p = np.exp(s - m)
            den = p.sum(axis=1, keepdims=True)
            o = p @ v[b, :, h, :]
            out[b, :, h, :] = np.divide(o, den, out=np.zeros_like(o), where=den > 0)
    return num.bf16(out)


def block_forward(m, cfg, p, x, num, nodes, tag, rope=None, mod=None, allowed=None):
    """One refiner block (mod is None) or transformer block; node names as docs/strict.md section 4."""
    nh, hd = cfg["num_attention_heads"], cfg["attention_head_dim"]
    ffn = cfg["ffn_dim"]

    def rec(name, val):
        if nodes is not None:
            nodes[f"{tag}.{name}"] = val
        return val

    if mod is not None:
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mod
    n = rmsnorm(x, m.w(p + "norm1.weight"), cfg["norm_eps"])
    if mod is not None:
        n = n * (1.0 + scale_msa) + shift_msa
    n = rec("norm1", num.bf16(n))
    B, S, _ = n.shape
    q = rec("q_proj", num.bf16(linear(m, n, p + "attn.to_q", bias=False))).reshape(B, S, nh, hd)
    k = rec("k_proj", num.bf16(linear(m, n, p + "attn.to_k", bias=False))).reshape(B, S, nh, hd)
    v = rec("v_proj", num.bf16(linear(m, n, p + "attn.to_v", bias=False))).reshape(B, S, nh, hd)
    q = num.bf16(rmsnorm(q, m.w(p + "attn.norm_q.weight"), cfg["qk_norm_eps"]))
    k = num.bf16(rmsnorm(k, m.w(p + "attn.norm_k.weight"), cfg["qk_norm_eps"]))
    rec("q_norm", q.reshape(B, S, -1))
    rec("k_norm", k.reshape(B, S, -1))
    if rope is not None:
        q = num.bf16(apply_rope(q, *rope))
        k = num.bf16(apply_rope(k, *rope))
        rec("rope_q", q.reshape(B, S, -1))
        rec("rope_k", k.reshape(B, S, -1))
    a = rec("attention", attention(q, k, v, allowed, num).reshape(B, S, nh * hd))
    o = rec("o_proj", num.bf16(linear(m, a, p + "attn.to_out.0", bias=False)))
    x = rec("residual_attn", num.bf16(x + (gate_msa * o if mod is not None else o)))
    n = rmsnorm(x, m.w(p + "norm2.weight"), cfg["norm_eps"])
    if mod is not None:
        n = n * (1.0 + scale_mlp) + shift_mlp
    n = rec("norm2", num.bf16(n))
    u = rec("ffn_gate_up", num.bf16(linear(m, n, p + "ff.net.0.proj", bias=False)))
    h = rec("swiglu", num.bf16(u[..., :ffn] * silu(u[..., ffn:])))
    f = rec("ffn_down", num.bf16(linear(m, h, p + "ff.net.2", bias=False)))
    x = rec("residual_mlp", num.bf16(x + (gate_mlp * f if mod is not None else f)))
    return x


def refiner_allowed(mask, text_indices, B):
    """[B, Nt, Nt] bool or None for the token refiner's attention over the text rows of each item: text key j of
    item b is attended only if attention_mask[b, text_indices[j]] is true (the project's rule, docs/model.md 3.6(b):
    masked rows are never attended to; diffusers' refiner ignores the mask, docs/conformance.md)."""
    if mask is None:
        return None
    keys = mask.astype(bool)[:, text_indices]  # [B, Nt]
    if keys.all():
        return None
    return np.broadcast_to(keys[:, None, :], (B, keys.shape[1], keys.shape[1])).copy()


def attention_allowed(tags, mask, B):
    """[B, S, S] bool or None.  Each batch item is its own document (the batch loop does that); rows tagged -1 are
    a separate document inside it; attention_mask (true = valid key) removes keys."""
    pad = tags == -1
    if not pad.any() and mask is None:
        return None
    same_doc = pad[:, None] == pad[None, :]
    allowed = np.broadcast_to(same_doc, (B,) + same_doc.shape).copy()
    if mask is not None:
        allowed &= mask.astype(bool)[:, None, :]
    return allowed


def forward(m, inp, precision="fp64", nodes=None, refiner_mask=True):
    """refiner_mask=False drops attention_mask from the token refiner only: diffusers' semantics, used by
    diffusers_compare.py for inputs whose mask hides live text rows; never the golden."""
    cfg = m.cfg
    num = Numerics(precision)
    H, ted = cfg["hidden_size"], cfg["time_embed_dim"]
    tags, ti = inp["token_tags"], inp["timestep_indices"]
    S, B = tags.shape[0], inp["hidden_states"].shape[0]

    def rec(name, val):
        if nodes is not None:
            nodes[name] = val
        return val

    # 1. rotary table (cos/sin are f32 in strict mode)
    cos, sin = rope_table(cfg, inp["position_ids"])
    cos, sin = rec("rope_table.cos", num.f32(cos)), rec("rope_table.sin", num.f32(sin))

    # 2. input projections (proj_in / audio_proj_in f32 modules, context_embedder bf16), token refiner
    video = rec("proj_in", num.f32(linear(m, num.f32(inp["hidden_states"]), "proj_in")))
    audio = rec("audio_proj_in", num.f32(linear(m, num.f32(inp["audio_hidden_states"]), "audio_proj_in")))
    text = rec("context_embedder", num.bf16(linear(m, num.bf16(inp["encoder_hidden_states"]), "context_embedder")))
    text_allowed = refiner_allowed(inp.get("attention_mask"), inp["text_indices"], B) if refiner_mask else None
    for i in range(cfg["num_refiner_layers"]):
        text = block_forward(m, cfg, f"token_refiner.refiner_blocks.{i}.", text, num, nodes, f"refiner.{i}",
                             allowed=text_allowed)
    text = rec("refiner.final_norm",
               num.bf16(rmsnorm(text, m.w("token_refiner.final_norm.weight"), cfg["final_norm_eps"])))

    # 3. pack: zero buffer, text then video then audio rows at their indices
    x = np.zeros((B, S, H))
    x[:, inp["text_indices"]] = text
    x[:, inp["video_indices"]] = num.bf16(video)
    x[:, inp["audio_indices"]] = num.bf16(audio)
    rec("pack", x)

    # 4. timestep embedding: [cos, sin] sinusoid, then linear_2(silu(linear_1))
    half = cfg["freq_dim"] // 2
    freq = np.exp(-math.log(10000.0) * np.arange(half, dtype=np.float64) / half)
    args = num.f32(inp["timestep"])[:, None] * freq[None, :]
    feats = rec("timestep_sinusoid", num.f32(np.concatenate([np.cos(args), np.sin(args)], axis=1)))
    temb = num.f32(linear(m, feats, "time_embedder.linear_1"))
    temb = rec("timestep_mlp", num.f32(linear(m, silu(temb), "time_embedder.linear_2")))
    T = temb.shape[0]
    silu_temb = num.bf16(silu(temb))

    # 5. AdaLN row of every packed row (padding rows use modality 0)
    adaln_index = ti * 3 + np.maximum(tags, 0)

    # 6. attention documents
    allowed = attention_allowed(tags, inp.get("attention_mask"), B)

    # 7. blocks
    for i in range(cfg["num_layers"]):
        p = f"transformer_blocks.{i}."
        table = num.bf16(linear(m, silu_temb, p + "adaln_proj.linear"))  # [T, 18H]
        table = rec(f"block.{i}.adaln_projection", table.reshape(T * 3, 6 * H))
        rows = table[adaln_index]  # [S, 6H]
        mod = tuple(rows[None, :, j * H:(j + 1) * H] for j in range(6))
        x = block_forward(m, cfg, p, x, num, nodes, f"block.{i}", rope=(cos, sin), mod=mod, allowed=allowed)

    # 8. output norm: shift first, rows by timestep_indices; cast to f32
    t2 = num.bf16(linear(m, silu_temb, "norm_out.linear"))
    shift, scale = t2[:, :H][ti][None], t2[:, H:][ti][None]
    y = rmsnorm(x, m.w("norm_out.norm.weight"), cfg["final_norm_eps"]) * (1.0 + scale) + shift
    y = rec("norm_out", num.bf16(y))

    # 9. heads
    sample = rec("proj_out", num.f32(linear(m, y[:, inp["video_indices"]], "proj_out")))
    audio_sample = rec("audio_proj_out", num.f32(linear(m, y[:, inp["audio_indices"]], "audio_proj_out")))
    return sample, audio_sample


# --------------------------------------------------------------------------------------------- layout (section 4)

FRAME_RESCALE = 5.0 / 3.0
FRAMES_PER_LATENT = (1, 4, 4, 4, 4)
SPATIAL_SCALE = 32
AUDIO_CHANNELS = 2
KEYFRAME_NOISE_AUG = 0.999


def spatial_axis(d, p, sqrt_area):
    """numpy linspace(left, left + ratio, d/p, endpoint=False) * 32: start + k*step, step = (stop - start)/n."""
    ratio = d / sqrt_area
    left = (1.0 - ratio) / 2.0
    return np.linspace(left, left + ratio, d // p, endpoint=False) * SPATIAL_SCALE


def frame_spans(nframes):
    return np.array([FRAME_RESCALE * FRAMES_PER_LATENT[f % 5] for f in range(nframes)], dtype=np.float64)


def build_layout(text, frames, lh, lw, audio_latents, keyframes=(), pad_to=0, patch=(1, 2, 2)):
    """The packed [text | keyframe conditions | target audio | target video] layout of docs/model.md section 4."""
    _, ph, pw = patch
    if lh % ph or lw % pw:
        raise InputError(f"latent {lh}x{lw} is not divisible by the patch {ph}x{pw}")
    rpf = (lh // ph) * (lw // pw)
    ncond = len(keyframes) * rpf
    naud = AUDIO_CHANNELS * audio_latents
    nvid = frames * rpf
    live = text + ncond + naud + nvid
    S = live if not pad_to else -(-live // pad_to) * pad_to
    c0, a0 = text, text + ncond
    v0 = a0 + naud
    pos = np.zeros((S, 3), dtype=np.float64)
    tags = np.full(S, -1, dtype=np.int64)
    pos[:text, 0] = np.arange(text, dtype=np.float64)
    tags[:text] = 1
    sqrt_area = np.sqrt(np.float64(lh * lw))
    hg, wg = spatial_axis(lh, ph, sqrt_area), spatial_axis(lw, pw, sqrt_area)
    grid_h, grid_w = np.repeat(hg, wg.size), np.tile(wg, hg.size)  # row-major (h, w)
    spans = frame_spans(frames)
    for i, anchor in enumerate(keyframes):
        if anchor == "first":
            t = float(text)
        elif anchor == "last":
            t = float(text) + float(np.sum(spans)) - FRAME_RESCALE  # numpy's pairwise sum, as the source
        else:
            raise InputError(f"keyframe anchor must be 'first' or 'last', got {anchor!r}")
        r = slice(c0 + i * rpf, c0 + (i + 1) * rpf)
        pos[r, 0], pos[r, 1], pos[r, 2] = t, grid_h, grid_w
        tags[r] = 0
    at = float(text) + np.arange(audio_latents, dtype=np.float64)
    pos[a0:v0, 0] = np.concatenate([at] * AUDIO_CHANNELS)
    pos[a0:v0, 2] = np.concatenate([np.full(audio_latents, wg[0]), np.full(audio_latents, wg[-1])])
    tags[a0:v0] = 2
    # frame f at origin + (sequential cumulative sum of the spans before it)
    ftime = float(text) + np.concatenate([np.zeros(1), np.cumsum(spans[:-1])]) if frames else np.zeros(0)
    pos[v0:live, 0] = np.repeat(ftime, rpf)
    pos[v0:live, 1] = np.tile(grid_h, frames)
    pos[v0:live, 2] = np.tile(grid_w, frames)
    tags[v0:live] = 0
    return {
        "S": S, "live": live, "position_ids": pos, "token_tags": tags,
        "video_indices": np.concatenate([np.arange(c0, a0), np.arange(v0, live)]).astype(np.int64),
        "audio_indices": np.arange(a0, v0, dtype=np.int64), "text_indices": np.arange(text, dtype=np.int64),
        "num_condition_video_rows": ncond, "rows_per_frame": rpf,
    }


def row_timesteps(layout, t_video, t_audio, t_cond=None):
    """(timestep [T] f32 sorted distinct, timestep_indices [S]) as the source's build_row_timesteps; padding rows
    get index 0.  t_cond defaults to the source's max(t_video, 0.999) (the spec says 0.999)."""
    f32 = np.float32
    if t_cond is None:
        t_cond = max(float(t_video), KEYFRAME_NOISE_AUG)
    rt = np.full(layout["live"], f32(t_video), dtype=np.float32)
    rt[layout["video_indices"][: layout["num_condition_video_rows"]]] = f32(t_cond)
    rt[layout["audio_indices"]] = f32(t_audio)
    ts, inv = np.unique(rt, return_inverse=True)
    ti = np.zeros(layout["S"], dtype=np.int64)
    ti[: layout["live"]] = inv
    return ts, ti


def check_layout(inp, args):
    """Returns (failures, warnings, notes)."""
    fails, warns, notes = [], [], []
    kf = tuple(a for a in args.keyframes.split(",") if a) if args.keyframes else ()
    L = build_layout(args.text, args.frames, args.latent_height, args.latent_width, args.audio_latents, kf,
                     args.pad_to)
    S = L["S"]
    pos = inp["position_ids"]
    if pos.shape != (S, 3):
        fails.append(f"position_ids shape {list(pos.shape)}, expected [{S}, 3] (live rows {L['live']})")
        return fails, warns, notes
    if inp["_dtype_position_ids"] != "F64":
        warns.append(f"position_ids stored as {inp['_dtype_position_ids']} (the pipeline's precision is F64)")
    live = L["live"]
    p = np.asarray(pos, dtype=np.float64)
    a, b = p[:live].view(np.uint64), L["position_ids"][:live].view(np.uint64)
    if not np.array_equal(a, b):
        r, c = np.argwhere(a != b)[0]
        fails.append(f"position_ids differ bitwise at {int((a != b).any(axis=1).sum())} live rows; first "
                     f"[{r}, {c}] = {p[r, c]!r}, expected {L['position_ids'][r, c]!r}")
    tags = inp["token_tags"]
    if not np.array_equal(tags, L["token_tags"]):
        diff = np.nonzero(tags != L["token_tags"])[0]
        textonly = (diff < args.text).all() and np.isin(tags[diff], (0, 1)).all()
        if textonly and args.allow_text_vision_tags:
            notes.append(f"{diff.size} text rows tagged 0 (keyframe vision block), allowed")
        else:
            fails.append(f"token_tags differ at {diff.size} rows; first row {diff[0]}: {tags[diff[0]]}, "
                         f"expected {L['token_tags'][diff[0]]}")
    for n in ("video_indices", "audio_indices", "text_indices"):
        if not np.array_equal(inp[n], L[n]):
            fails.append(f"{n} differ: got {inp[n].size} entries {inp[n][:8].tolist()}..., "
                         f"expected {L[n].size} entries {L[n][:8].tolist()}...")
    B = inp["hidden_states"].shape[0]
    for n, rows in (("hidden_states", L["video_indices"].size), ("audio_hidden_states", L["audio_indices"].size),
                    ("encoder_hidden_states", args.text)):
        if inp[n].shape[:2] != (B, rows):
            fails.append(f"{n} has shape {list(inp[n].shape)}, expected [{B}, {rows}, ...]")
    if S > live:
        pad_pos = p[live:]
        notes.append(f"{S - live} padding rows at the tail (pad_to {args.pad_to}); their positions span "
                     f"t in [{pad_pos[:, 0].min()}, {pad_pos[:, 0].max()}] (unchecked: never seen by live rows)")
    if "attention_mask" in inp:
        mk = inp["attention_mask"]
        if not mk[:, :live].all():
            fails.append("attention_mask excludes a live row (live rows must see what the unpadded sequence gives)")
        notes.append(f"attention_mask present; {int((~mk[:, live:]).sum())} of {B * (S - live)} padding keys masked")
    # timestep layout (docs/model.md section 5 and the source's build_row_timesteps)
    ts, ti = inp["timestep"], inp["timestep_indices"]
    ts32 = ts.astype(np.float32)
    val = ts32[ti]
    ncond = L["num_condition_video_rows"]
    target_video = L["video_indices"][ncond:]
    groups = {"text": L["text_indices"], "target video": target_video, "audio": L["audio_indices"],
              "condition": L["video_indices"][:ncond]}
    uniq = {}
    for g, idx in groups.items():
        if idx.size:
            u = np.unique(val[idx])
            if u.size != 1:
                fails.append(f"{g} rows carry {u.size} different timesteps: {u[:4].tolist()}")
            uniq[g] = u[0]
    tv = uniq.get("target video", uniq.get("text"))
    if "text" in uniq and tv is not None and uniq["text"] != tv:
        fails.append(f"text rows carry t = {uniq['text']!r}, not the video timestep {tv!r}")
    if "condition" in uniq:
        tc = uniq["condition"]
        spec_v, src_v = np.float32(KEYFRAME_NOISE_AUG), np.float32(max(float(tv), KEYFRAME_NOISE_AUG))
        if tc not in (spec_v, src_v):
            fails.append(f"condition rows carry t = {tc!r}; expected 0.999 (spec) or max(t_video, 0.999) (source)")
        elif spec_v != src_v:
            notes.append(f"condition rows carry t = {tc!r}: the {'spec' if tc == spec_v else 'source'} rule "
                         f"(t_video = {tv!r} > 0.999, where spec and source differ)")
    if not (np.all(np.diff(ts32) > 0)):
        warns.append(f"timestep {ts32.tolist()} is not sorted-distinct as torch.unique(sorted=True) gives it "
                     "(no numeric effect)")
    if S > live:
        pad_ti = ti[live:]
        notes.append(f"padding rows use timestep indices {np.unique(pad_ti).tolist()}")
    notes.append(f"S = {S} (live {live}), T = {ts.size}, timesteps {ts32.tolist()}, batch {B}")
    return fails, warns, notes


# --------------------------------------------------------------------------------------------- CLI


def rel_l2(got, ref):
    d = np.linalg.norm((got - ref).ravel())
    n = np.linalg.norm(ref.ravel())
    return float(d / n) if n > 0 else float(d)


def cmd_forward(a):
    m = Model(a.model)
    inp = load_inputs(a.inputs, m.cfg)
    nodes = {} if a.save_nodes else None
    sample, audio_sample = forward(m, inp, a.precision, nodes)
    if a.out.endswith(".safetensors"):
        write_safetensors(a.out, {"sample": ("F32", sample), "audio_sample": ("F32", audio_sample)})
    else:
        extra = {("node." + k): v for k, v in (nodes or {}).items()}
        tmp = a.out + ".tmp.npz"
        np.savez(tmp, sample=sample, audio_sample=audio_sample, **extra)
        os.replace(tmp, a.out)
    print(f"forward ({a.precision}): sample {list(sample.shape)}, audio_sample {list(audio_sample.shape)} -> {a.out}")
    return 0


def cmd_compare(a):
    m = Model(a.model)
    inp = load_inputs(a.inputs, m.cfg)
    if a.ref:
        z = np.load(a.ref)
        ref = {"sample": z["sample"], "audio_sample": z["audio_sample"]}
    else:
        s, au = forward(m, inp, "fp64")
        ref = {"sample": s, "audio_sample": au}
    if m.dtype_notes():
        print("note:", m.dtype_notes())
    out = SafeTensors(a.h3strict_out)
    result = {"bound": a.bound, "outputs": {}, "pass": True}
    mk = inp.get("attention_mask")
    hidden_text = int((~mk[:, inp["text_indices"]].astype(bool)).sum()) if mk is not None else 0
    variant = None
    if hidden_text and not a.ref:
        # informative only: the refiner-unmasked variant (diffusers' semantics, docs/conformance.md) is what an
        # implementation that ignores the mask in the refiner would match; the pass/fail is against the golden
        variant = dict(zip(("sample", "audio_sample"), forward(m, inp, "fp64", refiner_mask=False)))
        d = max(rel_l2(variant[k], ref[k]) for k in ref)
        print(f"note: attention_mask hides {hidden_text} live (item, text row) pairs; the refiner-unmasked variant "
              f"(what a refiner ignoring the mask computes) is rel {d:.3e} from the golden")
        result["masked_live_text_rows"] = hidden_text
    for name in ("sample", "audio_sample"):
        r = {}
        if name not in out:
            r["error"] = "missing"
        elif out.dtype(name) != "F32":
            r["error"] = f"dtype {out.dtype(name)}, expected F32"
        elif out.shape(name) != list(ref[name].shape):
            r["error"] = f"shape {out.shape(name)}, expected {list(ref[name].shape)}"
        else:
            got = out.get(name).astype(np.float64)
            if not np.isfinite(got).all():
                r["error"] = "non-finite values"
            else:
                r["rel_l2"] = rel_l2(got, ref[name])
                r["max_abs"] = float(np.max(np.abs(got - ref[name]))) if got.size else 0.0
                r["ref_rms"] = float(np.sqrt(np.mean(ref[name] ** 2))) if got.size else 0.0
                r["per_item_rel_l2"] = [rel_l2(got[i], ref[name][i]) for i in range(got.shape[0])]
                if variant is not None:
                    r["rel_l2_vs_refiner_unmasked_variant"] = rel_l2(got, variant[name])
        r["pass"] = "error" not in r and r["rel_l2"] <= a.bound
        result["pass"] &= r["pass"]
        result["outputs"][name] = r
        if "error" in r:
            print(f"{name:13s} FAIL: {r['error']}")
        else:
            items = " ".join(f"{e:.3e}" for e in r["per_item_rel_l2"])
            print(f"{name:13s} rel_l2 {r['rel_l2']:.4e}  max_abs {r['max_abs']:.4e}  (ref rms {r['ref_rms']:.3e}; "
                  f"per item {items})  bound {a.bound}  {'OK' if r['pass'] else 'FAIL'}")
            if variant is not None:
                print(f"{'':13s} (rel_l2 {r['rel_l2_vs_refiner_unmasked_variant']:.4e} from the refiner-unmasked "
                      f"variant)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    print("compare:", "PASS" if result["pass"] else "FAIL")
    return 0 if result["pass"] else 1


def cmd_check_layout(a):
    inp = load_inputs(a.inputs)
    fails, warns, notes = check_layout(inp, a)
    for n in notes:
        print("note:", n)
    for w in warns:
        print("WARN:", w)
    for f in fails:
        print("FAIL:", f)
    print("check-layout:", "PASS" if not fails else "FAIL")
    return 0 if not fails else 1


def parse_mask_rows(specs, B, Nt):
    """--rows values: 'J,J,...' (text rows J of every item) or 'ITEM:J,J,...' -> sorted [(item, J)]."""
    pairs = set()
    for spec in specs:
        items, rows = (range(B), spec) if ":" not in spec else (None, spec.split(":", 1)[1])
        try:
            if items is None:
                b = int(spec.split(":", 1)[0])
                if not 0 <= b < B:
                    raise InputError(f"--rows {spec!r}: item {b} out of range [0, {B})")
                items = (b,)
            js = [int(x) for x in rows.split(",") if x.strip()]
        except ValueError:
            raise InputError(f"--rows {spec!r}: expected 'J,J,...' or 'ITEM:J,J,...' with integers")
        if not js:
            raise InputError(f"--rows {spec!r}: no text row given")
        for j in js:
            if not 0 <= j < Nt:
                raise InputError(f"--rows {spec!r}: text row {j} out of range [0, {Nt})")
            pairs.update((b, j) for b in items)
    return sorted(pairs)


def cmd_mask_text(a):
    """Copy an inputs file, setting attention_mask false at the packed rows of the chosen *text* rows (live rows,
    i.e. text_indices[J]), per item.  An existing mask is kept and ANDed; without one, every other key stays valid.
    --perturb-masked replaces encoder_hidden_states at every text row the mask hides with other random values:
    by docs/model.md 3.6(b) that must leave every output unchanged."""
    inp = load_inputs(a.inputs)
    st = SafeTensors(a.inputs)
    B, Nt = inp["encoder_hidden_states"].shape[:2]
    S = inp["token_tags"].shape[0]
    tidx = inp["text_indices"]
    pairs = parse_mask_rows(a.rows, B, Nt)
    had = "attention_mask" in inp
    mask_shape = st.shape("attention_mask") if had else [B, S]
    mask = inp["attention_mask"].astype(bool).copy() if had else np.ones((B, S), dtype=bool)
    for b, j in pairs:
        mask[b, tidx[j]] = False
    tensors = {n: (st.dtype(n), st.raw(n)) for n in st.keys()}
    tensors["attention_mask"] = ("BOOL", mask.reshape(mask_shape))
    hidden = ~mask[:, tidx]  # [B, Nt]: text rows no key may see (the new ones and any the file already hid)
    if a.perturb_masked is not None:
        dt, raw = tensors["encoder_hidden_states"]
        e = inp["encoder_hidden_states"].copy()
        rng = np.random.default_rng(a.perturb_masked)
        e[hidden] = 3.0 * rng.standard_normal((int(hidden.sum()), e.shape[2]))
        conv = {"BF16": lambda x: f64_to_bf16_bits(x).reshape(x.shape), "F32": lambda x: x.astype(np.float32),
                "F16": lambda x: x.astype(np.float16), "F64": lambda x: x}
        tensors["encoder_hidden_states"] = (dt, conv[dt](e))
    write_safetensors(a.out, tensors, st.metadata or None)
    per_item = "; ".join(f"item {b}: text rows {np.nonzero(hidden[b])[0].tolist()}" for b in range(B))
    how = "ANDed into the existing one" if had else "added"
    print(f"mask-text: attention_mask {how} {mask_shape}; hidden {per_item}"
          f"{'; their encoder_hidden_states perturbed' if a.perturb_masked is not None else ''} -> {a.out}")
    return 0


def cmd_diff_outputs(a):
    """Two output files (docs/cli.md format): relative L2 per output; exit 1 outside [--min-rel, --max-rel]."""
    fa, fb = SafeTensors(a.a), SafeTensors(a.b)
    ok = True
    for name in ("sample", "audio_sample"):
        for f in (fa, fb):
            if name not in f:
                raise InputError(f"{f.path}: missing tensor {name!r}")
        x, y = fa.get(name).astype(np.float64), fb.get(name).astype(np.float64)
        if x.shape != y.shape:
            print(f"{name:13s} FAIL: shapes {list(x.shape)} vs {list(y.shape)}")
            ok = False
            continue
        r = rel_l2(x, y)
        bitwise = np.array_equal(fa.raw(name), fb.raw(name))
        good = r <= a.max_rel and (a.min_rel is None or r >= a.min_rel)
        ok &= good
        rng_s = f"[{a.min_rel}, {a.max_rel}]" if a.min_rel is not None else f"<= {a.max_rel}"
        print(f"{name:13s} rel_l2 {r:.4e}  {'bitwise equal' if bitwise else 'not bitwise equal'}  want {rng_s}  "
              f"{'OK' if good else 'FAIL'}")
    print("diff-outputs:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("forward", help="FP64 reference forward")
    f.add_argument("--model", required=True)
    f.add_argument("--inputs", required=True)
    f.add_argument("--out", required=True, help=".npz (float64) or .safetensors (F32, the CLI's output format)")
    f.add_argument("--precision", choices=("fp64", "bf16"), default="fp64",
                   help="fp64 = the golden; bf16 = emulation of strict-mode rounding, for calibration only")
    f.add_argument("--save-nodes", action="store_true", help="also store every node output (npz only)")
    c = sub.add_parser("compare", help="compare an h3strict output with the FP64 reference")
    c.add_argument("--model", required=True)
    c.add_argument("--inputs", required=True)
    c.add_argument("--h3strict-out", required=True)
    c.add_argument("--bound", type=float, default=0.03, help="max relative L2 per output (default 0.03)")
    c.add_argument("--ref", help="precomputed reference .npz from `forward` instead of recomputing")
    c.add_argument("--json", help="write the result as JSON here")
    k = sub.add_parser("check-layout", help="rebuild the packed layout of section 4 and compare with an inputs file")
    k.add_argument("--inputs", required=True)
    k.add_argument("--text", type=int, required=True)
    k.add_argument("--frames", type=int, required=True)
    k.add_argument("--latent-height", type=int, required=True)
    k.add_argument("--latent-width", type=int, required=True)
    k.add_argument("--audio-latents", type=int, required=True)
    k.add_argument("--keyframes", default="")
    k.add_argument("--pad-to", type=int, default=0)
    k.add_argument("--allow-text-vision-tags", action="store_true",
                   help="accept text rows tagged 0 (a keyframe's vision block inside the text)")
    t = sub.add_parser("mask-text", help="copy an inputs file with attention_mask hiding chosen live text rows")
    t.add_argument("--inputs", required=True)
    t.add_argument("--rows", action="append", required=True,
                   help="'J,J,...' = text rows J (positions in text_indices) of every item, or 'ITEM:J,J,...' for "
                        "one item; repeatable")
    t.add_argument("--out", required=True)
    t.add_argument("--perturb-masked", type=int, metavar="SEED",
                   help="also replace encoder_hidden_states at every hidden text row (outputs must not change)")
    d = sub.add_parser("diff-outputs", help="relative L2 between two output files")
    d.add_argument("a")
    d.add_argument("b")
    d.add_argument("--max-rel", type=float, default=0.0, help="largest accepted relative L2 (default 0)")
    d.add_argument("--min-rel", type=float, help="smallest accepted relative L2 (to show a change)")
    a = ap.parse_args(argv)
    try:
        return {"forward": cmd_forward, "compare": cmd_compare, "check-layout": cmd_check_layout,
                "mask-text": cmd_mask_text, "diff-outputs": cmd_diff_outputs}[a.cmd](a)
    except InputError as e:
        print(f"reference.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
