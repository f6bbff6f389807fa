#!/usr/bin/python3
"""Write a random tiny MiniMax-H3 model directory and an inputs file in the CLI's formats (docs/cli.md), with numpy
alone, so that reference.py can be exercised end to end without the h3strict CLI.

  make_fixture.py model  --out DIR [--seed N] [--layers N] [--shards N] [--subfolder]
  make_fixture.py inputs --model DIR --out IN.safetensors [--seed N] [--batch B] [--text T] [--frames F]
                         [--latent-height H] [--latent-width W] [--audio-latents A] [--keyframes first,last]
                         [--pad-to N] [--attention-mask] [--bf16]

The model is mixed precision like the released checkpoint (proj_in, audio_proj_in, time_embedder, proj_out,
audio_proj_out F32, everything else BF16).  The layout comes from reference.build_layout (docs/model.md section 4).
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as R  # noqa: E402

TINY = {
    "num_attention_heads": 4, "attention_head_dim": 32, "hidden_size": 96, "num_layers": 2,
    "num_refiner_layers": 1, "ffn_dim": 256, "in_channels": 24, "audio_in_channels": 32,
    "patch_size": [1, 2, 2], "text_dim": 64, "freq_dim": 32, "time_embed_hidden_dim": 96,
    "time_embed_dim": 48, "rope_freq_dim": 4, "rope_theta": 10000.0, "norm_eps": 1e-5,
    "qk_norm_eps": 1e-5, "final_norm_eps": 1e-5,
}
F32_MODULES = ("proj_in.", "audio_proj_in.", "time_embedder.", "proj_out.", "audio_proj_out.")


def make_model(a):
    cfg = dict(TINY)
    if a.layers is not None:
        cfg["num_layers"] = a.layers
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    d = os.path.join(a.out, "transformer") if a.subfolder else a.out
    os.makedirs(d, exist_ok=True)
    cfg_out = {"_class_name": "MiniMaxH3Transformer3DModel", **cfg}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg_out, f, indent=2)
    m = R.Model.__new__(R.Model)
    m.cfg = cfg
    tensors = {}
    H = cfg["hidden_size"]
    for name, shape in m.expected_shapes().items():
        if name.endswith(("norm1.weight", "norm2.weight", "norm.weight", "norm_q.weight", "norm_k.weight")):
            v = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            v = 0.05 * rng.standard_normal(shape)
            if "adaln_proj" in name:
                # gates (chunks 2 and 5 of each modality's 6H) near 0.5 so every block matters
                v = v.reshape(3, 6, H)
                v[:, 2] += 0.5
                v[:, 5] += 0.5
                v = v.reshape(shape)
        else:
            fan_in = shape[1]
            v = rng.standard_normal(shape) / np.sqrt(fan_in)
            if "adaln_proj" in name or "norm_out.linear" in name:
                v *= 0.3
        dt = "F32" if name.startswith(F32_MODULES) else "BF16"
        tensors[name] = (dt, v.astype(np.float32) if dt == "F32" else R.f64_to_bf16_bits(v).reshape(shape))
    names = list(tensors)
    if a.shards and a.shards > 1:
        wmap, parts = {}, np.array_split(np.arange(len(names)), a.shards)
        for k, part in enumerate(parts):
            fn = f"diffusion_pytorch_model-{k + 1:05d}-of-{a.shards:05d}.safetensors"
            R.write_safetensors(os.path.join(d, fn), {names[i]: tensors[names[i]] for i in part})
            wmap.update({names[i]: fn for i in part})
        with open(os.path.join(d, R.INDEX), "w") as f:
            json.dump({"metadata": {}, "weight_map": wmap}, f, indent=1)
    else:
        R.write_safetensors(os.path.join(d, R.WEIGHTS), tensors, {"format": "pt"})
    print(f"model -> {a.out} ({len(names)} tensors, {cfg['num_layers']} layers)")


def make_inputs(a):
    m = R.Model(a.model)
    cfg = m.cfg
    rng = np.random.default_rng(a.seed)
    kf = tuple(x for x in a.keyframes.split(",") if x) if a.keyframes else ()
    L = R.build_layout(a.text, a.frames, a.latent_height, a.latent_width, a.audio_latents, kf, a.pad_to,
                       tuple(cfg["patch_size"]))
    t_video = float(np.float32(rng.uniform(0.05, 0.95)))
    t_audio = float(np.float32(rng.uniform(0.05, 0.95)))
    ts, ti = R.row_timesteps(L, t_video, t_audio)
    B = a.batch
    vw = cfg["in_channels"] * int(np.prod(cfg["patch_size"]))
    fdt = "BF16" if a.bf16 else "F32"

    def act(shape):
        v = rng.standard_normal(shape)
        return (fdt, R.f64_to_bf16_bits(v).reshape(shape) if a.bf16 else v.astype(np.float32))

    t = {
        "hidden_states": act((B, L["video_indices"].size, vw)),
        "audio_hidden_states": act((B, L["audio_indices"].size, cfg["audio_in_channels"])),
        "encoder_hidden_states": act((B, a.text, cfg["text_dim"])),
        "timestep": ("F32", ts.astype(np.float32)),
        "timestep_indices": ("I64", ti),
        "token_tags": ("I64", L["token_tags"]),
        "position_ids": ("F64", L["position_ids"]),
        "video_indices": ("I64", L["video_indices"]),
        "audio_indices": ("I64", L["audio_indices"]),
        "text_indices": ("I64", L["text_indices"]),
    }
    if a.attention_mask:
        mk = np.zeros((B, L["S"]), dtype=np.bool_)
        mk[:, : L["live"]] = True
        t["attention_mask"] = ("BOOL", mk)
    R.write_safetensors(a.out, t)
    print(f"inputs -> {a.out} (B {B}, S {L['S']}, live {L['live']}, timesteps {ts.tolist()})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("model")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--layers", type=int)
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--subfolder", action="store_true")
    q = sub.add_parser("inputs")
    q.add_argument("--model", required=True)
    q.add_argument("--out", required=True)
    q.add_argument("--seed", type=int, default=7)
    q.add_argument("--batch", type=int, default=1)
    q.add_argument("--text", type=int, default=8)
    q.add_argument("--frames", type=int, default=2)
    q.add_argument("--latent-height", type=int, default=4)
    q.add_argument("--latent-width", type=int, default=4)
    q.add_argument("--audio-latents", type=int, default=4)
    q.add_argument("--keyframes", default="")
    q.add_argument("--pad-to", type=int, default=0)
    q.add_argument("--attention-mask", action="store_true")
    q.add_argument("--bf16", action="store_true", help="write the activation inputs as BF16")
    a = ap.parse_args()
    make_model(a) if a.cmd == "model" else make_inputs(a)


if __name__ == "__main__":
    main()
