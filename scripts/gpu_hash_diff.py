#!/usr/bin/env python3
"""Compare the per-node SHA-256s of the GPU block test with a reference run.

test_gpu_block prints one line per node of a release-geometry block, forward and backward
(`  <node>  <sha256>`, as ctest shows it with a `<n>: ` prefix). A kernel change that is meant to
keep every bit (a new tile mapping, vector loads, another launch shape) must leave all of them
unchanged; one meant to change a node's arithmetic changes that node and the ones fed by it.

    python3 scripts/gpu_hash_diff.py NEW_LOG [REFERENCE_LOG]
    python3 scripts/gpu_hash_diff.py --run BUILD_DIR [REFERENCE_LOG]

NEW_LOG is a file holding test_gpu_block's output (or a ctest -V log that contains it); --run
runs BUILD_DIR/test_gpu_block and reads its output. REFERENCE_LOG defaults to the committed
docs/evidence/gpu/ctest.log. Prints every node whose hash differs or that only one side has.
Exit status: 0 all equal, 1 some differ, 2 a file cannot be read or holds no node hashes,
77 the test skipped (no GPU).
"""
import os
import re
import subprocess
import sys

LINE = re.compile(r"^(?:\d+: )?\s{2,}([A-Za-z_][\w.]*)\s+([0-9a-f]{64})(?:\s+\(cross-row\))?\s*$")
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_REF = os.path.join(HERE, "..", "docs", "evidence", "gpu", "ctest.log")


def hashes(text):
    """Node -> hash, in order of first appearance (a node printed twice must print the same)."""
    out = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        node, h = m.group(1), m.group(2)
        if node in out and out[node] != h:
            raise ValueError(f"node {node} printed twice with different hashes")
        out[node] = h
    return out


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError as e:
        print(f"gpu_hash_diff: cannot read {path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    if argv[0] == "--run":
        if len(argv) < 2:
            print("gpu_hash_diff: --run needs the build directory", file=sys.stderr)
            return 2
        exe = os.path.join(argv[1], "test_gpu_block")
        if not os.access(exe, os.X_OK):
            print(f"gpu_hash_diff: {exe} is not an executable (build with -DH3S_CUDA=ON)", file=sys.stderr)
            return 2
        run = subprocess.run([exe], capture_output=True, text=True)
        new_text = run.stdout + run.stderr
        if run.returncode == 77:
            print(f"gpu_hash_diff: SKIP: {new_text.strip().splitlines()[-1] if new_text.strip() else 'no GPU'}")
            return 77
        if run.returncode != 0:
            print(f"gpu_hash_diff: test_gpu_block failed (exit {run.returncode}); its hashes are compared anyway")
        new_name, rest = exe, argv[2:]
    else:
        new_name, rest = argv[0], argv[1:]
        new_text = read(new_name)
    ref_name = rest[0] if rest else DEFAULT_REF
    try:
        new, ref = hashes(new_text), hashes(read(ref_name))
    except ValueError as e:
        print(f"gpu_hash_diff: {e}", file=sys.stderr)
        return 2
    for name, h in ((new_name, new), (ref_name, ref)):
        if not h:
            print(f"gpu_hash_diff: no node hashes in {name}", file=sys.stderr)
            return 2
    differ = [n for n in ref if n in new and new[n] != ref[n]]
    only_ref = [n for n in ref if n not in new]
    only_new = [n for n in new if n not in ref]
    for n in differ:
        print(f"differs: {n}  {ref[n][:16]}... -> {new[n][:16]}...")
    for n in only_ref:
        print(f"missing: {n} (only in the reference)")
    for n in only_new:
        print(f"new:     {n} (not in the reference)")
    same = len(ref) - len(differ) - len(only_ref)
    print(f"gpu_hash_diff: {same} of {len(ref)} reference nodes equal, {len(differ)} differ, "
          f"{len(only_ref)} missing, {len(only_new)} new")
    return 0 if not differ and not only_ref and not only_new else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
