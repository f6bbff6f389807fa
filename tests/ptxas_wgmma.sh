#!/usr/bin/env bash
# ptxas must not serialise the Hopper wgmma instructions of any kernel.
#
# When a non-wgmma instruction reads or writes accumulator registers of a wgmma that may still be in flight (or
# ptxas cannot prove that it is not), ptxas keeps the program correct by serialising every wgmma.mma_async of the
# function, and says so only in an info line:
#   ptxas info : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized ... in the
#   function '<kernel>'
# The build still succeeds and every result is still bitwise the same; the kernel is just much slower.  This
# check compiles each file that issues wgmma for sm_90a with the flags the CMake build gives the CUDA kernels
# (CMakeLists.txt, target h3s_cuda_kernels) plus -Xptxas -v, and fails when any output line has C7514.
#
# Usage: tests/ptxas_wgmma.sh [file.cu ...]
#   Without arguments: src/cuda/linear.cu, src/cuda/attention.cu and every other src/cuda/*.cu that contains
#   "wgmma".  The compiler is $NVCC, else $CMAKE_CUDA_COMPILER (CTest passes the configured one), else nvcc on
#   PATH.  No GPU is needed, only nvcc.
# Prints one line per file ("ptxas_wgmma: <file>: N serialised kernels", then the kernels' names).
# Exit 0: no kernel serialised; 1: some kernel serialised (or a file did not compile); 77: no nvcc (CTest skip).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

nvcc_bin=${NVCC:-${CMAKE_CUDA_COMPILER:-}}
if [ -z "$nvcc_bin" ]; then
    nvcc_bin=$(command -v nvcc 2>/dev/null || true)
fi
if [ -z "$nvcc_bin" ] || ! command -v "$nvcc_bin" >/dev/null 2>&1; then
    echo "SKIP: ptxas_wgmma: no CUDA compiler (nvcc) found${nvcc_bin:+ at $nvcc_bin} (set NVCC or CMAKE_CUDA_COMPILER)"
    exit 77
fi

# The CUDA kernels' flags from CMakeLists.txt (as in the generated build.ninja), with the object written to a
# temporary directory.
flags=(-O3 -DNDEBUG -Xcompiler=-fPIC -Xcompiler=-fvisibility=hidden "-gencode=arch=compute_90a,code=sm_90a"
       --fmad=false -prec-div=true -prec-sqrt=true -ftz=false -std=c++17 -I"$ROOT/include" -I"$ROOT/src"
       -Xptxas -v)

files=()
if [ $# -gt 0 ]; then
    files=("$@")
else
    files=("$ROOT/src/cuda/linear.cu" "$ROOT/src/cuda/attention.cu")
    for f in "$ROOT"/src/cuda/*.cu; do
        case $f in "$ROOT/src/cuda/linear.cu" | "$ROOT/src/cuda/attention.cu") continue ;; esac
        grep -q wgmma "$f" && files+=("$f")
    done
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

demangle() {
    if command -v c++filt >/dev/null 2>&1; then
        c++filt "$1"
    else
        echo "$1"
    fi
}

status=0
n=0
for f in "${files[@]}"; do
    n=$((n + 1))
    shown=${f#"$ROOT"/}
    log="$tmp/$n.log"
    if [ ! -f "$f" ]; then
        echo "ptxas_wgmma: $shown: no such file"
        status=1
        continue
    fi
    if ! "$nvcc_bin" "${flags[@]}" -c "$f" -o "$tmp/$n.o" >"$log" 2>&1; then
        echo "ptxas_wgmma: $shown: nvcc failed; its output:"
        sed 's/^/    /' "$log"
        status=1
        continue
    fi
    # One name per serialised kernel (a line without the function's name counts as itself).
    grep 'C7514' "$log" | sed -n "s/.*in the function '\([^']*\)'.*/\1/p;t;p" | sort -u >"$tmp/$n.names"
    count=$(wc -l <"$tmp/$n.names")
    echo "ptxas_wgmma: $shown: $count serialised kernels"
    if [ "$count" -gt 0 ]; then
        status=1
        while IFS= read -r name; do
            echo "    $name"
            dm=$(demangle "$name")
            [ "$dm" != "$name" ] && echo "      = $dm"
        done <"$tmp/$n.names"
        grep 'C7514' "$log" | sort -u | sed 's/^/    ptxas: /'
    fi
done
if [ "$status" -ne 0 ]; then
    echo "ptxas_wgmma: FAIL ($nvcc_bin, $("$nvcc_bin" --version | grep -o "release [0-9.]*" | head -n 1))"
fi
exit "$status"
