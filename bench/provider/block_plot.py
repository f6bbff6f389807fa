#!/usr/bin/env python3
"""PNG plot of the block benchmark's ratios against S, from bench_block.json (bench/provider/run_gpu_bench.sh):
two panels, strict / provider and strict / deterministic provider, one line per B and phase (forward,
forward + backward), S on a log axis, a dashed line at 1.0 (below it strict is faster).

  python3 bench/provider/block_plot.py bench_block.json bench_block.png [--renderer auto|matplotlib|builtin]

Renderer: matplotlib when it can be imported (auto, the default); otherwise a small built-in one (the standard
library only: zlib and struct write the PNG, a 5x7 bitmap font the labels), so the device run, whose Python may have
no matplotlib and no network, still draws the figure.  `h3strict plot` (src/cli/plot.c, PLplot) draws replay and
trajectory reports only, and the device has no PLplot, so it is not used here.  The renderer used is printed and
returned by plot() for the JSON.
"""

import argparse
import json
import math
import struct
import sys
import zlib

PHASES = ("forward", "forward+backward")
COLORS = {  # (B, phase) -> RGB
    (1, "forward"): (31, 119, 180),
    (1, "forward+backward"): (214, 39, 40),
    (4, "forward"): (44, 160, 44),
    (4, "forward+backward"): (148, 103, 189),
}
PANELS = (("ratio", "strict / provider"), ("ratio_det", "strict / deterministic provider"))


def series(doc):
    """{(B, phase): {key: [(S, value), ...]}} for the two ratio keys, from the table rows with numbers."""
    out = {}
    for r in doc.get("table", []):
        if r.get("phase") not in PHASES or "S" not in r:
            continue
        d = out.setdefault((r["B"], r["phase"]), {k: [] for k, _ in PANELS})
        for k, _ in PANELS:
            v = r.get(k)
            if isinstance(v, (int, float)) and v > 0:
                d[k].append((r["S"], float(v)))
    for d in out.values():
        for k in d:
            d[k].sort()
    return out


def label(B, phase):
    return f"B = {B}, {phase.replace('+', ' + ')}"


def y_range(data):
    vals = [v for d in data.values() for pts in d.values() for _, v in pts] + [1.0]
    hi = max(vals) * 1.1
    lo = 0.0
    return lo, hi


def x_range(data):
    xs = [s for d in data.values() for pts in d.values() for s, _ in pts] or [10, 10000]
    lo = 10 ** math.floor(math.log10(min(xs)))
    hi = 10 ** math.ceil(math.log10(max(xs)))
    if hi <= lo:
        hi = lo * 10
    return lo, hi


def title(doc):
    dev = (doc.get("device") or {}).get("gpu") or "?"
    commit = str((doc.get("source") or {}).get("commit", "?"))[:10]
    return f"one H3 block, {dev}, commit {commit}"


# ------------------------------------------------------------------ matplotlib
def plot_matplotlib(doc, data, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    lo, hi = y_range(data)
    for ax, (key, name) in zip(axes, PANELS):
        for (B, phase), d in sorted(data.items()):
            pts = d[key]
            if pts:
                ax.plot([s for s, _ in pts], [v for _, v in pts], marker="o", label=label(B, phase),
                        color=[c / 255 for c in COLORS.get((B, phase), (0, 0, 0))])
        ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlim(*x_range(data))
        ax.set_ylim(lo, hi)
        ax.set_xlabel("S (rows per item)")
        ax.set_title(name)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylabel("time ratio (strict / provider; < 1: strict faster)")
    fig.suptitle(title(doc))
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return f"matplotlib {matplotlib.__version__}"


# ------------------------------------------------------------------ built-in (standard library only)
FONT = {  # 5 x 7, rows top to bottom, '#' set
    "A": ".###.,#...#,#...#,#####,#...#,#...#,#...#", "B": "####.,#...#,#...#,####.,#...#,#...#,####.",
    "C": ".###.,#...#,#....,#....,#....,#...#,.###.", "D": "####.,#...#,#...#,#...#,#...#,#...#,####.",
    "E": "#####,#....,#....,####.,#....,#....,#####", "F": "#####,#....,#....,####.,#....,#....,#....",
    "G": ".###.,#...#,#....,#.###,#...#,#...#,.####", "H": "#...#,#...#,#...#,#####,#...#,#...#,#...#",
    "I": ".###.,..#..,..#..,..#..,..#..,..#..,.###.", "J": "..###,...#.,...#.,...#.,...#.,#..#.,.##..",
    "K": "#...#,#..#.,#.#..,##...,#.#..,#..#.,#...#", "L": "#....,#....,#....,#....,#....,#....,#####",
    "M": "#...#,##.##,#.#.#,#.#.#,#...#,#...#,#...#", "N": "#...#,#...#,##..#,#.#.#,#..##,#...#,#...#",
    "O": ".###.,#...#,#...#,#...#,#...#,#...#,.###.", "P": "####.,#...#,#...#,####.,#....,#....,#....",
    "Q": ".###.,#...#,#...#,#...#,#.#.#,#..#.,.##.#", "R": "####.,#...#,#...#,####.,#.#..,#..#.,#...#",
    "S": ".####,#....,#....,.###.,....#,....#,####.", "T": "#####,..#..,..#..,..#..,..#..,..#..,..#..",
    "U": "#...#,#...#,#...#,#...#,#...#,#...#,.###.", "V": "#...#,#...#,#...#,#...#,#...#,.#.#.,..#..",
    "W": "#...#,#...#,#...#,#.#.#,#.#.#,#.#.#,.#.#.", "X": "#...#,#...#,.#.#.,..#..,.#.#.,#...#,#...#",
    "Y": "#...#,#...#,.#.#.,..#..,..#..,..#..,..#..", "Z": "#####,....#,...#.,..#..,.#...,#....,#####",
    "0": ".###.,#...#,#..##,#.#.#,##..#,#...#,.###.", "1": "..#..,.##..,..#..,..#..,..#..,..#..,.###.",
    "2": ".###.,#...#,....#,...#.,..#..,.#...,#####", "3": "#####,...#.,..#..,...#.,....#,#...#,.###.",
    "4": "...#.,..##.,.#.#.,#..#.,#####,...#.,...#.", "5": "#####,#....,####.,....#,....#,#...#,.###.",
    "6": "..##.,.#...,#....,####.,#...#,#...#,.###.", "7": "#####,....#,...#.,..#..,.#...,.#...,.#...",
    "8": ".###.,#...#,#...#,.###.,#...#,#...#,.###.", "9": ".###.,#...#,#...#,.####,....#,...#.,.##..",
    ".": ".....,.....,.....,.....,.....,.##..,.##..", ",": ".....,.....,.....,.....,.##..,..#..,.#...",
    "=": ".....,.....,#####,.....,#####,.....,.....", "/": ".....,....#,...#.,..#..,.#...,#....,.....",
    "+": ".....,..#..,..#..,#####,..#..,..#..,.....", "-": ".....,.....,.....,#####,.....,.....,.....",
    "(": "...#.,..#..,.#...,.#...,.#...,..#..,...#.", ")": ".#...,..#..,...#.,...#.,...#.,..#..,.#...",
    ":": ".....,.##..,.##..,.....,.##..,.##..,.....", "<": "...#.,..#..,.#...,#....,.#...,..#..,...#.",
    ";": ".....,.##..,.##..,.....,.##..,..#..,.#...", "?": ".###.,#...#,....#,...#.,..#..,.....,..#..",
    "_": ".....,.....,.....,.....,.....,.....,#####", " ": ".....,.....,.....,.....,.....,.....,.....",
}


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def set(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(c)

    def rect(self, x0, y0, x1, y1, c):
        for y in range(max(0, y0), min(self.h, y1 + 1)):
            for x in range(max(0, x0), min(self.w, x1 + 1)):
                self.set(x, y, c)

    def line(self, x0, y0, x1, y1, c, width=1, dash=0):
        n = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(n + 1):
            if dash and (i // dash) % 2:
                continue
            x = round(x0 + (x1 - x0) * i / n)
            y = round(y0 + (y1 - y0) * i / n)
            r = width // 2
            self.rect(x - r, y - r, x - r + width - 1, y - r + width - 1, c)

    def dot(self, x, y, c, r=4):
        for dy in range(-r, r + 1):
            for dx in range(-r, r + 1):
                if dx * dx + dy * dy <= r * r:
                    self.set(x + dx, y + dy, c)

    def text(self, x, y, s, c=(0, 0, 0), scale=2, anchor="left"):
        s = s.upper()
        w = len(s) * 6 * scale
        if anchor == "center":
            x -= w // 2
        elif anchor == "right":
            x -= w
        for ch in s:
            rows = FONT.get(ch, FONT["?"]).split(",")
            for j, row in enumerate(rows):
                for i, bit in enumerate(row):
                    if bit == "#":
                        self.rect(x + i * scale, y + j * scale, x + (i + 1) * scale - 1, y + (j + 1) * scale - 1, c)
            x += 6 * scale
        return w

    def png(self):
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3]) for y in range(self.h))

        def chunk(kind, data):
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def nice_step(span):
    raw = span / 6
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def plot_builtin(doc, data, out):
    W, Hh = 1400, 660
    cv = Canvas(W, Hh)
    black, gray, light = (0, 0, 0), (128, 128, 128), (225, 225, 225)
    cv.text(W // 2, 10, title(doc), scale=2, anchor="center")
    cv.text(W // 2, 34, "time ratio; below the dashed line at 1 strict is faster", scale=2, anchor="center")
    lo, hi = y_range(data)
    xlo, xhi = x_range(data)
    step = nice_step(hi - lo)
    pw, ph, top = 560, 420, 100
    for pi, (key, name) in enumerate(PANELS):
        left = 90 + pi * 690
        right, bottom = left + pw, top + ph

        def X(s):
            return round(left + (math.log10(s) - math.log10(xlo)) / (math.log10(xhi) - math.log10(xlo)) * pw)

        def Y(v):
            return round(bottom - (v - lo) / (hi - lo) * ph)

        cv.text((left + right) // 2, top - 24, name, scale=2, anchor="center")
        # grid and ticks
        t = lo
        while t <= hi + 1e-9:
            cv.line(left, Y(t), right, Y(t), light)
            cv.text(left - 8, Y(t) - 7, f"{t:g}", scale=2, anchor="right")
            t += step
        d = xlo
        while d <= xhi * 1.0001:
            cv.line(X(d), top, X(d), bottom, light)
            cv.text(X(d), bottom + 8, f"{d:g}", scale=2, anchor="center")
            d *= 10
        cv.line(left, Y(1.0), right, Y(1.0), gray, width=2, dash=8)
        cv.line(left, top, left, bottom, black, width=2)
        cv.line(left, bottom, right, bottom, black, width=2)
        cv.line(left, top, right, top, black)
        cv.line(right, top, right, bottom, black)
        cv.text((left + right) // 2, bottom + 34, "S (rows per item, log)", scale=2, anchor="center")
        # series
        for (B, phase), dd in sorted(data.items()):
            c = COLORS.get((B, phase), black)
            pts = dd[key]
            for (s0, v0), (s1, v1) in zip(pts, pts[1:]):
                cv.line(X(s0), Y(v0), X(s1), Y(v1), c, width=3)
            for s, v in pts:
                cv.dot(X(s), Y(v), c)
    # the legend, shared, under the panels: two columns
    for i, (B, phase) in enumerate(sorted(data)):
        c = COLORS.get((B, phase), black)
        lx, ly = 250 + (i % 2) * 520, Hh - 62 + (i // 2) * 26
        cv.line(lx, ly + 7, lx + 40, ly + 7, c, width=3)
        cv.dot(lx + 20, ly + 7, c)
        cv.text(lx + 52, ly, label(B, phase), scale=2)
    with open(out, "wb") as f:
        f.write(cv.png())
    return "builtin (standard library PNG writer)"


def plot(doc, out, renderer="auto"):
    """Draw; returns the renderer used (a string)."""
    data = series(doc)
    if renderer in ("auto", "matplotlib"):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            if renderer == "matplotlib":
                raise
            print("block_plot: matplotlib is not installed; drawing with the built-in renderer", flush=True)
        else:
            return plot_matplotlib(doc, data, out)
    return plot_builtin(doc, data, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json")
    ap.add_argument("png")
    ap.add_argument("--renderer", choices=("auto", "matplotlib", "builtin"), default="auto")
    a = ap.parse_args()
    with open(a.json) as f:
        doc = json.load(f)
    used = plot(doc, a.png, a.renderer)
    print(f"block_plot: wrote {a.png} ({used})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
