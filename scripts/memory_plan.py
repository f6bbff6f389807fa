#!/usr/bin/env python3
"""Memory of one forward + backward of the whole model, with and without per-block recomputation.

The arithmetic of docs/ARCHITECTURE.md ("The graph and its tape"), from the tensors src/model/model.c allocates
(the same per-row counts as the CLI's estimate, src/cli/main.c estimate_backward_memory) and the parameter table
of src/model/params.c.  Default: the released geometry (preset h3-33b: 50 blocks + 2 refiner blocks, hidden 5376,
FFN 14336, 56 x 128 heads), one request (B = 1) of S = 8762 packed rows of which --text-rows are text, on one
device of --capacity-gb (an H200: 141 GB).  Everything on the device (the CUDA backend: weights, tape, backward
temporaries, and the parameter gradients asked for, which stay in device memory until the backward ends), and the
largest kernel workspace, the attention backward's (its stored bf16(dS), one chunk of heads under the budget of
src/cuda/attention.cu, 8 GiB, with every item's rows one document, the most it can take, and its BF16 copy of dout).
Not counted: the other kernels' scratch (GEMM), the content-keyed index cache, the CUDA context.

    python3 scripts/memory_plan.py [--seq 8762] [--batch 1] [--text-rows 256] [--layers 50] [--capacity-gb 141]
"""
import argparse

GB = 1e9


def param_table(c):
    """(elements, bytes per element) of every checkpoint tensor, as src/model/params.c lists them."""
    H, HD, D, F, E = c["H"], c["heads"] * c["D"], c["D"], c["F"], c["E"]
    VW, A = c["video_width"], c["audio"]
    bf16, f32 = 2, 4
    out = []

    def block(adaln):
        t = [(H, bf16), (HD * H, bf16), (HD * H, bf16), (HD * H, bf16), (D, bf16), (D, bf16), (H * HD, bf16),
             (H, bf16), (2 * F * H, bf16), (H * F, bf16)]
        if adaln:
            t += [(18 * H * E, bf16), (18 * H, bf16)]
        return t

    out += [(H * VW, f32), (H, f32), (H * A, f32), (H, f32), (H * c["text_dim"], bf16), (H, bf16)]
    out += [(c["TH"] * c["freq"], f32), (c["TH"], f32), (E * c["TH"], f32), (E, f32)]
    for _ in range(c["refiner"]):
        out += block(False)
    out += [(H, bf16)]
    for _ in range(c["layers"]):
        out += block(True)
    out += [(H, bf16), (2 * H * E, bf16), (2 * H, bf16), (VW * H, f32), (VW, f32), (A * H, f32), (A, f32)]
    return out


DS_BUDGET = 8 << 30  # TC_DS_BUDGET_DEFAULT in src/cuda/attention.cu


def attention_workspace(B, S, heads, D):
    """Bytes of the attention backward's workspace at its peak, and its heads per chunk: one chunk's stored dS
    (16 ceil(S / 64)^2 blocks of 512 bytes per item and head when the item is one document) and bf16(dout)."""
    per_head = B * 16 * ((S + 63) // 64) ** 2 * 512
    hpc = max(1, min(heads, DS_BUDGET // per_head))
    chunks = (heads + hpc - 1) // hpc
    hpc = (heads + chunks - 1) // chunks
    return per_head * hpc + B * S * heads * D * 2, hpc, chunks


def plan(c, B, S, Nt, capacity):
    H, F, heads = c["H"], c["F"], c["heads"]
    HD = heads * c["D"]
    L, R = c["layers"], c["refiner"]
    table = param_table(c)
    n_params = sum(n for n, _ in table)
    weights = sum(n * b for n, b in table)
    block_params = sum(n for n, _ in param_table(dict(c, layers=1, refiner=0))) - sum(
        n for n, _ in param_table(dict(c, layers=0, refiner=0)))
    # per packed row and block: BF16 activations kept for the backward (6H + 8 heads*D + 3F) and two F32 softmax
    # statistics per head; a block's backward temporaries on the GPU with BF16 gradient operands and no node hook:
    # F32 (8H + 5 heads*D + F) and the BF16 copies of df, dout_o, dq, dk, dv, du that their linears read (2H + 3 heads*D
    # + 2F BF16; their F32 values are not allocated; on the host, or with a node hook, the F32 ones: 10H + 8 heads*D +
    # 3F)
    act_row = (6 * H + 8 * HD + 3 * F) * 2 + 2 * heads * 4
    grad_row = (8 * H + 5 * HD + F) * 4 + (2 * H + 3 * HD + 2 * F) * 2
    M, Mt = B * S, B * Nt
    widest = max(M, Mt)
    tape_none = (M * L + Mt * R) * act_row
    tape_blocks = (M * L + Mt * R) * H * 2 + widest * act_row  # block inputs + one block rebuilt
    temporaries = widest * grad_row + M * H * 4 * 2  # one block's gradients + the carried dx and norm_out's dx
    attn_ws, attn_hpc, attn_chunks = max(attention_workspace(B, S, heads, c["D"]),
                                         attention_workspace(B, Nt, heads, c["D"]))
    temporaries += attn_ws
    rows = []
    for mode, tape in (("none", tape_none), ("blocks", tape_blocks)):
        for grads, elems in (("inputs only", 0), ("all parameters", n_params)):
            total = weights + tape + temporaries + elems * 4
            rows.append((mode, grads, tape, elems * 4, total, total <= capacity))
    # with recomputation, how many whole blocks' parameter gradients fit beside the rest (a --param-grads glob)
    base = weights + tape_blocks + temporaries
    fit_blocks = max(0, int((capacity - base) // (block_params * 4)))
    return dict(n_params=n_params, weights=weights, block_params=block_params, act_row=act_row, grad_row=grad_row,
                tape_none=tape_none, tape_blocks=tape_blocks, temporaries=temporaries, rows=rows, attn_ws=attn_ws,
                attn_hpc=attn_hpc, attn_chunks=attn_chunks,
                fit_blocks=min(fit_blocks, L))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, default=8762, help="packed rows S of the request (default 8762)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--text-rows", type=int, default=256, help="text rows Nt (the refiner's rows; default 256)")
    ap.add_argument("--layers", type=int, default=50)
    ap.add_argument("--capacity-gb", type=float, default=141.0, help="device memory in 1e9 bytes (H200: 141)")
    a = ap.parse_args()
    c = dict(H=5376, heads=56, D=128, F=14336, E=2688, TH=5376, freq=256, text_dim=5120, video_width=24 * 4,
             audio=32, layers=a.layers, refiner=2)
    p = plan(c, a.batch, a.seq, a.text_rows, a.capacity_gb * GB)
    print(f"geometry: {a.layers} blocks + 2 refiner blocks, hidden {c['H']}, FFN {c['F']}, {c['heads']} x {c['D']} "
          f"heads; B = {a.batch}, S = {a.seq} ({a.text_rows} text rows); device {a.capacity_gb:g} GB")
    print(f"parameters: {p['n_params'] / 1e9:.2f} G ({p['block_params'] / 1e9:.3f} G per block); weights "
          f"{p['weights'] / GB:.1f} GB; F32 gradients of all of them {p['n_params'] * 4 / GB:.1f} GB")
    print(f"per packed row and block: {p['act_row']} bytes of BF16 activations kept without recomputation, "
          f"{c['H'] * 2} bytes (the block input) with it; {p['grad_row']} bytes of backward temporaries")
    print(f"tape: {p['tape_none'] / GB:.1f} GB without recomputation, {p['tape_blocks'] / GB:.2f} GB with "
          f"(block inputs + one block rebuilt); backward temporaries {p['temporaries'] / GB:.2f} GB, of which "
          f"{p['attn_ws'] / GB:.2f} GB the attention backward's workspace ({p['attn_chunks']} chunk(s) of "
          f"{p['attn_hpc']} heads)")
    print("| recompute | gradients | tape GB | parameter gradients GB | total GB | fits |")
    print("|---|---|---|---|---|---|")
    for mode, grads, tape, pg, total, fits in p["rows"]:
        print(f"| {mode} | {grads} | {tape / GB:.1f} | {pg / GB:.1f} | {total / GB:.1f} | {'yes' if fits else 'no'} |")
    print(f"with recomputation, the parameter gradients of {p['fit_blocks']} whole blocks fit beside the rest "
          f"(a --param-grads glob over their names)")


if __name__ == "__main__":
    main()
