#!/usr/bin/env bash
# H3S_CUDA: a plain configure builds the CUDA backend exactly when a CUDA compiler is found and says so;
# -DH3S_CUDA=OFF leaves it out and says why; a value other than AUTO/ON/OFF is refused.  Configure only.
set -u
SRC=${H3S_SOURCE_DIR:?H3S_SOURCE_DIR must name the source tree}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)

cmake -S "$SRC" -B "$dir/plain" "${gen[@]}" >"$dir/plain.log" 2>&1 || bad "plain configure failed: $(tail -n 3 "$dir/plain.log")"
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    grep -q "h3strict: CUDA backend ON (H3S_CUDA=AUTO" "$dir/plain.log" ||
        bad "nvcc is here but a plain configure did not build the CUDA backend: $(grep 'h3strict: CUDA' "$dir/plain.log")"
    grep -q "CMAKE_CUDA_COMPILER:" "$dir/plain/CMakeCache.txt" || bad "no CUDA compiler in the cache"
else
    grep -q "h3strict: CUDA backend OFF: no CUDA compiler (nvcc) found (H3S_CUDA=AUTO)" "$dir/plain.log" ||
        bad "without nvcc the configure does not say so: $(grep 'h3strict: CUDA' "$dir/plain.log")"
fi
grep -q "^H3S_CUDA:STRING=AUTO$" "$dir/plain/CMakeCache.txt" || bad "H3S_CUDA is not the cache string AUTO"

cmake -S "$SRC" -B "$dir/off" "${gen[@]}" -DH3S_CUDA=OFF >"$dir/off.log" 2>&1 || bad "configure with OFF failed"
grep -q "h3strict: CUDA backend OFF: H3S_CUDA=OFF" "$dir/off.log" || bad "OFF not reported: $(grep 'h3strict: CUDA' "$dir/off.log")"
grep -rhF 'H3S_NO_CUDA_REASON=' "$dir/off" | grep -qF 'configured with -DH3S_CUDA=OFF' ||
    bad "the OFF build's no-CUDA message does not name -DH3S_CUDA=OFF"

if cmake -S "$SRC" -B "$dir/bad" "${gen[@]}" -DH3S_CUDA=maybe >"$dir/bad.log" 2>&1; then
    bad "H3S_CUDA=maybe was accepted"
else
    grep -q "H3S_CUDA must be AUTO, ON or OFF (got 'maybe')" "$dir/bad.log" || bad "no clear message for H3S_CUDA=maybe"
fi
[ "$fails" -eq 0 ] || { echo "cmake_cuda_option: $fails failure(s)"; exit 1; }
echo "cmake_cuda_option: OK"
