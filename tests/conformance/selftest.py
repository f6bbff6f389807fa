#!/usr/bin/python3
"""Self-test of reference.py on fixtures from make_fixture.py (no h3strict needed).

Checks the properties the reference must have before it can judge anything: padding and attention_mask give live
rows exactly the unpadded result, a text row hidden by attention_mask influences no output (the token refiner honours
the mask too), batch items are independent, the three model-directory forms load the same
weights, the layout reproduces known values, check-layout and compare catch corrupted files, the bf16 emulation
lands inside the bound and typical implementation bugs land outside it.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference as R  # noqa: E402

PY = sys.executable
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def sh(*args):
    p = subprocess.run([PY] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def fixture(d, *args):
    rc, out = sh(os.path.join(HERE, "make_fixture.py"), *args)
    if rc:
        raise SystemExit(out)


def main():
    bound = 0.03
    with tempfile.TemporaryDirectory() as d:
        M, Msh, Msub = (os.path.join(d, n) for n in ("M", "Msh", "Msub"))
        fixture(d, "model", "--out", M, "--seed", "5")
        fixture(d, "model", "--out", Msh, "--seed", "5", "--shards", "3")
        fixture(d, "model", "--out", Msub, "--seed", "5", "--subfolder")
        geo = ["--batch", "2", "--text", "5", "--frames", "3", "--latent-height", "4", "--latent-width", "6",
               "--audio-latents", "3", "--keyframes", "first,last"]
        IN = os.path.join(d, "in.safetensors")
        INP = os.path.join(d, "inp.safetensors")
        INM = os.path.join(d, "inm.safetensors")
        fixture(d, "inputs", "--model", M, "--seed", "8", "--out", IN, *geo)
        fixture(d, "inputs", "--model", M, "--seed", "8", "--out", INP, "--pad-to", "64", *geo)
        fixture(d, "inputs", "--model", M, "--seed", "8", "--out", INM, "--pad-to", "64", "--attention-mask", *geo)

        m = R.Model(M)
        inp = R.load_inputs(IN, m.cfg)
        s0, a0 = R.forward(m, inp)

        # 1. model directory forms
        for name, md in (("sharded index.json", Msh), ("transformer/ subfolder", Msub)):
            s1, a1 = R.forward(R.Model(md), inp)
            check(f"{name} loads the same weights", np.array_equal(s0, s1) and np.array_equal(a0, a1))

        # 2. padding rows tagged -1 (own document), with and without attention_mask, and attention_mask alone
        def live_err(path, mutate=None):
            x = R.load_inputs(path, m.cfg)
            if mutate:
                mutate(x)
            s, a = R.forward(m, x)
            return max(R.rel_l2(s, s0), R.rel_l2(a, a0))
        e = live_err(INP)
        check("padding rows (tag -1) do not change live rows", e < 1e-13, f"rel {e:.1e}")
        e = live_err(INM)
        check("padding rows + attention_mask do not change live rows", e < 1e-13, f"rel {e:.1e}")

        def mask_only(x):  # padding rows re-tagged as video, excluded only by the key mask
            x["token_tags"] = np.where(x["token_tags"] == -1, 0, x["token_tags"])
        e = live_err(INM, mask_only)
        check("attention_mask alone excludes padding keys", e < 1e-13, f"rel {e:.1e}")

        def nomask(x):  # the same, without the mask: padding rows now leak into live rows
            mask_only(x)
            del x["attention_mask"]
        e = live_err(INM, nomask)
        check("unmasked untagged padding does change live rows (the test can fail)", e > 1e-3, f"rel {e:.1e}")

        # 2b. attention_mask hiding live text rows: never attended to, in the blocks and in the token refiner
        INT, INTP = os.path.join(d, "int.safetensors"), os.path.join(d, "intp.safetensors")
        spec = ["--rows", "0:1,3", "--rows", "1:0,2"]  # different rows per item
        for path, extra in ((INT, []), (INTP, ["--perturb-masked", "3"])):
            rc, out = sh(os.path.join(HERE, "reference.py"), "mask-text", "--inputs", INM, *spec, "--out", path, *extra)
            if rc:
                raise SystemExit(out)
        src, got = R.SafeTensors(INM), R.SafeTensors(INT)
        want = src.raw("attention_mask").copy()
        tix = src.raw("text_indices")
        for b, j in ((0, 1), (0, 3), (1, 0), (1, 2)):
            want[b, tix[j]] = False
        same = all(np.array_equal(src.raw(n), got.raw(n)) and src.dtype(n) == got.dtype(n)
                   for n in src.keys() if n != "attention_mask")
        check("mask-text hides exactly the chosen text rows per item, every other tensor byte-identical",
              same and np.array_equal(got.raw("attention_mask"), want))
        gp = R.SafeTensors(INTP)
        changed = np.nonzero((gp.raw("encoder_hidden_states") != src.raw("encoder_hidden_states")).any(axis=2))
        check("mask-text --perturb-masked changes exactly the hidden text rows",
              sorted(zip(*(c.tolist() for c in changed))) == [(0, 1), (0, 3), (1, 0), (1, 2)])
        rc, out = sh(os.path.join(HERE, "reference.py"), "mask-text", "--inputs", INM, "--rows", "0:5",
                     "--out", os.path.join(d, "x.safetensors"))
        check("mask-text rejects a text row out of range", rc == 2, out.strip().splitlines()[-1])

        xt, xtp = R.load_inputs(INT, m.cfg), R.load_inputs(INTP, m.cfg)
        st_, at_ = R.forward(m, xt)
        stp, atp = R.forward(m, xtp)
        check("features of masked text rows change no output (bitwise)",
              np.array_equal(st_, stp) and np.array_equal(at_, atp))
        e = min(R.rel_l2(st_, s0), R.rel_l2(at_, a0))
        check("hiding live text rows does change the outputs", e > 1e-3, f"rel {e:.1e}")
        for x in (xt, xtp):
            del x["attention_mask"]
        su, au = R.forward(m, xt)
        sup, aup = R.forward(m, xtp)
        e = min(R.rel_l2(su, sup), R.rel_l2(au, aup))
        check("without the mask the same feature change does change the outputs (the test can fail)", e > 1e-3,
              f"rel {e:.1e}")
        xt, xtp = R.load_inputs(INT, m.cfg), R.load_inputs(INTP, m.cfg)
        sv, av = R.forward(m, xt, refiner_mask=False)
        svp, avp = R.forward(m, xtp, refiner_mask=False)
        e = min(R.rel_l2(sv, svp), R.rel_l2(av, avp))
        check("a token refiner that ignores the mask fails the invariance (the old bug is caught)", e > 1e-3,
              f"rel {e:.1e}")
        x1 = {k: (v[1:] if k in ("hidden_states", "audio_hidden_states", "encoder_hidden_states", "attention_mask")
                  else v) for k, v in xt.items()}
        s1, a1 = R.forward(m, x1)
        e = max(R.rel_l2(s1[0], st_[1]), R.rel_l2(a1[0], at_[1]))
        check("item 1 alone, with its own mask row, equals item 1 of the masked batch", e < 1e-13, f"rel {e:.1e}")

        # 3. batch items are independent documents
        x1 = {k: (v[:1] if k in ("hidden_states", "audio_hidden_states", "encoder_hidden_states") else v)
              for k, v in inp.items()}
        s1, a1 = R.forward(m, x1)
        e = max(R.rel_l2(s1[0], s0[0]), R.rel_l2(a1[0], a0[0]))
        check("item 0 alone equals item 0 of the batch of 2", e < 1e-13, f"rel {e:.1e}")

        # 4. layout: known values
        L = R.build_layout(4, 2, 4, 4, 3)
        check("square 4x4 canvas: spatial grid is (0, 16) on both axes",
              sorted(set(L["position_ids"][L["video_indices"], 1])) == [0.0, 16.0]
              and sorted(set(L["position_ids"][L["video_indices"], 2])) == [0.0, 16.0])
        L = R.build_layout(5, 7, 4, 6, 3, ("first", "last"))
        p = L["position_ids"]
        vt = sorted(set(p[L["video_indices"][L["num_condition_video_rows"]:], 0]))
        check("frame times: 5 + 5/3 * cumsum(1,4,4,4,4,1)", np.allclose(
            vt, 5 + np.cumsum([0, 1, 4, 4, 4, 4, 1]) * 5 / 3, rtol=0, atol=1e-12), str(vt))
        rpf = L["rows_per_frame"]
        # "last" sits on the last *pixel* frame: 5/3 * (pixel frames - 1) after Nt, i.e. 5 units after the
        # last latent frame's time here (its span is 4 pixel frames), not on the last latent frame itself
        last_t = 5 + (sum((1, 4, 4, 4, 4, 1, 4)) - 1) * 5 / 3
        check("keyframe first at t = Nt, last at the last pixel frame's time",
              p[5, 0] == 5.0 and abs(p[5 + rpf, 0] - last_t) < 1e-12, f"{p[5, 0]}, {p[5 + rpf, 0]!r}")
        check("audio rows: t = Nt + a, h = 0, w = first/last width coordinate",
              np.array_equal(p[L["audio_indices"], 0], [5, 6, 7, 5, 6, 7])
              and not p[L["audio_indices"], 1].any()
              and np.array_equal(p[L["audio_indices"], 2], np.repeat([p[L["video_indices"][0], 2],
                                                                       p[L["video_indices"][2], 2]], 3)))
        # the pairwise sum of the spans differs from the sequential one from 16 frames on (source comment)
        n_diff = [n for n in range(1, 200) if float(np.sum(R.frame_spans(n))) != sum(R.frame_spans(n).tolist())]
        check("pairwise vs sequential span sums differ somewhere (the anchor rule matters)", len(n_diff) > 0,
              f"first n = {n_diff[:1]}")

        # 5. check-layout: passes on the fixture, catches a 1-ulp position change and a wrong tag
        cl = ["check-layout", "--text", "5", "--frames", "3", "--latent-height", "4", "--latent-width", "6",
              "--audio-latents", "3", "--keyframes", "first,last", "--pad-to", "64"]
        rc, out = sh(os.path.join(HERE, "reference.py"), *cl, "--inputs", INP)
        check("check-layout passes on a padded fl2va fixture", rc == 0, out.strip().splitlines()[-1])
        st = R.SafeTensors(INP)
        t = {n: (st.dtype(n), st.raw(n)) for n in st.keys()}
        pos = t["position_ids"][1].copy()
        pos[12, 1] = np.nextafter(pos[12, 1], np.inf)
        BAD = os.path.join(d, "bad.safetensors")
        R.write_safetensors(BAD, {**t, "position_ids": ("F64", pos)})
        rc, out = sh(os.path.join(HERE, "reference.py"), *cl, "--inputs", BAD)
        check("check-layout catches a 1-ulp position change", rc == 1, out.strip().splitlines()[-2])
        tags = t["token_tags"][1].copy()
        tags[0] = 0
        R.write_safetensors(BAD, {**t, "token_tags": ("I64", tags)})
        rc, out = sh(os.path.join(HERE, "reference.py"), *cl, "--inputs", BAD)
        check("check-layout catches a wrong tag", rc == 1)

        # 6. compare: the bf16 emulation passes with margin; a 5 % perturbation fails; wrong shape fails
        OUT = os.path.join(d, "out.safetensors")
        sb, ab = R.forward(m, inp, "bf16")
        R.write_safetensors(OUT, {"sample": ("F32", sb), "audio_sample": ("F32", ab)})
        rc, out = sh(os.path.join(HERE, "reference.py"), "compare", "--model", M, "--inputs", IN,
                     "--h3strict-out", OUT)
        eb = max(R.rel_l2(sb, s0), R.rel_l2(ab, a0))
        check("compare passes the bf16 emulation", rc == 0 and eb < bound / 2, f"rel {eb:.2e}")
        rng = np.random.default_rng(1)
        R.write_safetensors(OUT, {"sample": ("F32", sb + 0.05 * np.std(sb) * rng.standard_normal(sb.shape)),
                                  "audio_sample": ("F32", ab)})
        rc, _ = sh(os.path.join(HERE, "reference.py"), "compare", "--model", M, "--inputs", IN, "--h3strict-out", OUT)
        check("compare fails a 5 % perturbation", rc == 1)
        R.write_safetensors(OUT, {"sample": ("F32", sb[:, 1:]), "audio_sample": ("F32", ab)})
        rc, _ = sh(os.path.join(HERE, "reference.py"), "compare", "--model", M, "--inputs", IN, "--h3strict-out", OUT)
        check("compare fails a wrong shape", rc == 1)

        # 7. typical implementation bugs land outside the bound
        def mutant(name, patch):
            saved = {k: getattr(R, k) for k in patch}
            for k, f in patch.items():
                setattr(R, k, f)
            try:
                s, a = R.forward(m, inp)
            finally:
                for k, f in saved.items():
                    setattr(R, k, f)
            e = min(R.rel_l2(s, s0), R.rel_l2(a, a0))
            check(f"bug '{name}' is caught", e > bound, f"rel {e:.2e}")
        orig_rope, orig_block, orig_norm, orig_attn = R.apply_rope, R.block_forward, R.rmsnorm, R.attention

        def rope_interleaved(x, cos, sin):
            r = cos.shape[1]
            xr = x[..., :r]
            rot = np.stack([-xr[..., 1::2], xr[..., 0::2]], axis=-1).reshape(xr.shape)
            c = np.repeat(cos[:, : r // 2], 2, axis=1)[None, :, None, :]
            s = np.repeat(sin[:, : r // 2], 2, axis=1)[None, :, None, :]
            return np.concatenate([xr * c + rot * s, x[..., r:]], axis=-1)
        mutant("interleaved rope instead of rotate-half", {"apply_rope": rope_interleaved})
        mutant("rope on the last 6F channels", {"apply_rope": lambda x, c, s: orig_rope(
            x[..., ::-1], c, s)[..., ::-1]})

        def swap_shift_scale(m_, cfg, p, x, num, nodes, tag, rope=None, mod=None, allowed=None):
            if mod is not None:
                mod = (mod[1], mod[0]) + mod[2:]
            return orig_block(m_, cfg, p, x, num, nodes, tag, rope, mod, allowed)
        mutant("shift_msa/scale_msa swapped", {"block_forward": swap_shift_scale})

        def swap_gates(m_, cfg, p, x, num, nodes, tag, rope=None, mod=None, allowed=None):
            if mod is not None:
                mod = mod[:2] + (mod[5],) + mod[3:5] + (mod[2],)
            return orig_block(m_, cfg, p, x, num, nodes, tag, rope, mod, allowed)
        mutant("gate_msa/gate_mlp swapped", {"block_forward": swap_gates})
        mutant("rmsnorm without its weight", {"rmsnorm": lambda x, w, eps: orig_norm(x, 1.0, eps)})
        mutant("attention scale 1/head_dim", {"attention": lambda q, k, v, al, num: orig_attn(
            q / np.sqrt(q.shape[-1]), k, v, al, num)})

    failed = results.count(False)
    print(f"selftest: {len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
