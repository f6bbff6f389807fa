#!/usr/bin/env python3
"""Compare the kernels of two PTX files, entry by entry, without a GPU.

    python3 scripts/ptx_same.py OLD.ptx NEW.ptx [--only REGEX] [--old-sub PATTERN REPLACEMENT]

Make the files with the build's flags, e.g. for src/cuda/linear.cu at two commits:

    nvcc -std=c++17 -O3 -arch=sm_90a --fmad=false -prec-div=true -prec-sqrt=true -ftz=false \
         -Iinclude -Isrc -I<cuda build dir> -ptx src/cuda/linear.cu -o new.ptx

A kernel (`.entry`) is "same" when its body is the other's once comments and register declarations are dropped
and every register and every branch label is renumbered in the order of its first use (a label's number carries the
kernel's position in the file, which moves when a kernel is added or taken out before it). The same PTX means that ptxas gets the same input,
so a refactor that changes no kernel's PTX changes no machine code. A kernel that differs is also compared as a
multiset of instructions, registers and numbers abstracted; "same instructions" there says only that the two have
the same instructions in another register order or arrangement, which is weaker and must be argued. Kernels found
in only one file are listed. --old-sub applies a regular-expression substitution to the old file before the
comparison, for a change that renames kernels: e.g. a template parameter added with a default changes every mangled
name (--old-sub 'ELi0EEEEEv14CUtensorMap' 'EEEEEv14CUtensorMap' drops a trailing 0 argument).

Exit status: 0 every kernel in both files is the same and none is missing; 1 some differ or are missing; 2 a file
cannot be read or holds no kernel.
"""
import collections
import re
import sys

ENTRY = re.compile(r"(?m)^(?=(?:\.visible |\.weak )?\.entry )")
NAME = re.compile(r"(?:\.visible |\.weak )?\.entry (\S+?)\(")
REG = re.compile(r"%(?:rd|rs|r|fd|f|hh|h|p)\d+\b")
LABEL = re.compile(r"\$L__BB\d+_\d+\b")


def entries(path, subs=()):
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError as e:
        print(f"ptx_same: {path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    for pattern, repl in subs:
        text = pattern.sub(repl, text)
    parts = ENTRY.split(text)[1:]
    out = {}
    for p in parts:
        m = NAME.match(p)
        if m:
            out[m.group(1)] = re.sub(r"//[^\n]*", "", p)
    if not out:
        print(f"ptx_same: {path} holds no .entry", file=sys.stderr)
        sys.exit(2)
    return out


def renumbered(body):
    body = re.sub(r"(?m)^\s*\.reg [^\n]*\n", "", body)
    names = {}

    def rep(m):
        k = m.group(0)
        if k not in names:
            cls = re.match(r"%[a-z]+", k).group(0)
            names[k] = f"{cls}#{len(names)}"
        return names[k]

    labels = {}

    def rep_label(m):
        return labels.setdefault(m.group(0), f"$L#{len(labels)}")

    body = LABEL.sub(rep_label, REG.sub(rep, body))
    return [line.strip() for line in body.splitlines() if line.strip()]


def instructions(body):
    c = collections.Counter()
    for line in body.splitlines():
        line = line.strip()
        if not line or line.startswith((".", "$", "{", "}")):
            continue
        line = LABEL.sub("L", REG.sub("R", line))
        line = re.sub(r"\b\d+\b", "N", line)
        c[line] += 1
    return c


def main(argv):
    only = None
    subs = []
    args = []
    i = 0
    while i < len(argv):
        if argv[i] == "--only" and i + 1 < len(argv):
            only = re.compile(argv[i + 1])
            i += 2
            continue
        if argv[i] == "--old-sub" and i + 2 < len(argv):
            try:
                subs.append((re.compile(argv[i + 1]), argv[i + 2]))
            except re.error as e:
                print(f"ptx_same: --old-sub {argv[i + 1]!r}: {e}", file=sys.stderr)
                return 2
            i += 3
            continue
        if argv[i] in ("-h", "--help"):
            print(__doc__)
            return 0
        args.append(argv[i])
        i += 1
    if len(args) != 2:
        print("usage: ptx_same.py OLD.ptx NEW.ptx [--only REGEX] [--old-sub PATTERN REPLACEMENT]", file=sys.stderr)
        return 2
    a, b = entries(args[0], subs), entries(args[1])
    names = sorted(set(a) | set(b))
    if only:
        names = [n for n in names if only.search(n)]
    same = differ = missing = 0
    for n in names:
        if n not in a or n not in b:
            print(f"only in {'new' if n in b else 'old'}: {n}")
            missing += 1
        elif renumbered(a[n]) == renumbered(b[n]):
            same += 1
        else:
            kind = "same instructions, other order" if instructions(a[n]) == instructions(b[n]) else "different"
            print(f"differs ({kind}): {n}")
            differ += 1
    print(f"ptx_same: {same} kernels the same, {differ} differ, {missing} in one file only")
    return 0 if differ == 0 and missing == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
