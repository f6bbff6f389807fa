#!/usr/bin/env bash
# `cmake --install` into a temporary prefix: the libraries (versioned soname), the public headers, the CLI,
# h3strict.pc and the CMake package; a three-line C program built with `pkg-config --cflags --libs h3strict` and
# one built through find_package(h3strict) load a model through the installed library; the shared library
# exports the public API and nothing else; the CLI is a user of that API alone (it includes only the public
# headers, links the shared library and carries none of the library's code).
set -u
BUILD=${H3S_BUILD_DIR:?H3S_BUILD_DIR must name the build directory}
SRC=${H3S_SOURCE_DIR:?H3S_SOURCE_DIR must name the source directory}
CC=${H3S_C_COMPILER:-cc}
XFLAGS=${H3S_CONSUMER_FLAGS:-} # a sanitizer build's library: its consumers use the same runtime
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

cmake --install "$BUILD" --prefix "$dir/prefix" >"$dir/install.log" 2>&1 || { cat "$dir/install.log"; echo "FAIL: cmake --install"; exit 1; }
P=$dir/prefix
lib=$(find "$P" -name 'libh3strict.so.*.*.*' -type f | head -n 1)
[ -n "$lib" ] || bad "no versioned libh3strict.so installed"
for f in include/h3s.h include/h3s_model.h include/h3s_sample.h include/h3s_ops.h include/h3s_dist.h include/h3s_io.h \
    include/h3s_replay.h bin/h3strict; do
    [ -e "$P/$f" ] || bad "$f not installed"
done
[ -n "$(find "$P" -name libh3strict.a)" ] || bad "no static library installed"
[ -n "$(find "$P" -name h3strictConfig.cmake)" ] || bad "no CMake package config installed"
pc=$(find "$P" -name h3strict.pc | head -n 1)
[ -n "$pc" ] || { bad "no h3strict.pc installed"; exit 1; }
soname=$(objdump -p "$lib" 2>/dev/null | awk '/SONAME/ {print $2}')
[ "$soname" = "libh3strict.so.0" ] || bad "soname is '$soname', expected libh3strict.so.0"

# exported symbols: every one declared in the installed headers, and the internals hidden
nm -D --defined-only "$lib" | awk '$2 ~ /^[TDB]$/ {print $3}' | sort >"$dir/exported"
cat "$P"/include/h3s*.h | grep -o 'h3s_[a-z0-9_]*(' | tr -d '(' | sort -u >"$dir/declared"
extra=$(comm -23 "$dir/exported" "$dir/declared")
[ -z "$extra" ] || bad "exported but not in the public headers: $(echo $extra | head -c 400)"
for sym in h3s_model_load h3s_model_forward h3s_model_backward_select h3s_trajectory h3s_last_error h3s_linear_forward \
    h3s_tensor_copy; do
    grep -qx "$sym" "$dir/exported" || bad "$sym is not exported"
done
for sym in h3s_linear_backward h3s_fail h3s_st_writer_begin h3s_trajectory_run h3s_replay h3s_json_parse_strict; do
    grep -qx "$sym" "$dir/exported" && bad "internal $sym is exported"
done

# every installed header stands alone, in C and (extern "C") in C++
for h in $(cd "$P/include" && ls h3s*.h); do
    printf '#include <%s>\nint main(void) { return 0; }\n' "$h" >"$dir/hdr.c"
    "$CC" -std=c11 -Wall -Wextra -Werror -pedantic -fsyntax-only -I"$P/include" "$dir/hdr.c" || bad "$h does not compile alone (C11)"
    if command -v c++ >/dev/null 2>&1; then
        c++ -Wall -Wextra -Werror -fsyntax-only -x c++ -I"$P/include" "$dir/hdr.c" || bad "$h does not compile in C++"
    fi
done

"$P/bin/h3strict" init --preset tiny --seed 5 --out "$dir/tiny" --quiet >/dev/null || bad "installed CLI: init"

# The CLI uses the public API only.  Its sources include no header of the library's src/ (only include/h3s*.h, its
# own src/cli headers and system headers), ...
for f in "$SRC"/src/cli/*.c "$SRC"/src/cli/*.h; do
    while IFS= read -r inc; do
        case "$inc" in
        h3s*.h) [ -e "$SRC/include/$inc" ] || bad "$(basename "$f") includes \"$inc\", not a public header" ;;
        *) [ -e "$SRC/src/cli/$inc" ] || bad "$(basename "$f") includes the library's internal header \"$inc\"" ;;
        esac
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done
# ... and the built and the installed CLI load libh3strict.so.0, carry none of the library's functions (no static
# copy), and every library function they call is one the public headers declare (the library exports nothing
# else, so this holds by construction and is checked here against a change of the link).
for cli in "$BUILD/h3strict" "$P/bin/h3strict"; do
    objdump -p "$cli" 2>/dev/null | awk '/NEEDED/ {print $2}' | grep -qx 'libh3strict.so.0' ||
        bad "$cli does not link the shared library libh3strict.so.0"
    own=$(nm "$cli" 2>/dev/null | awk '$2 ~ /^[TtDdBb]$/ && $3 ~ /^h3s_/ {print $3}' | head -n 5)
    [ -z "$own" ] || bad "$cli carries library code of its own: $(echo $own)"
    nm -D --undefined-only "$cli" | awk '{print $2}' | grep '^h3s_' | sort -u >"$dir/cli_calls"
    [ -s "$dir/cli_calls" ] || bad "$cli calls no library function dynamically"
    hidden=$(comm -23 "$dir/cli_calls" "$dir/declared")
    [ -z "$hidden" ] || bad "$cli calls functions the public headers do not declare: $(echo $hidden)"
done
# the installed CLI finds the installed library by itself (its run path), not the build tree's
cli_lib=$(env -u LD_LIBRARY_PATH ldd "$P/bin/h3strict" | awk '/libh3strict/ {print $3}')
case "$cli_lib" in "$P"/*) ;; *) bad "the installed CLI resolves libh3strict to '$cli_lib', outside the prefix" ;; esac

# the three-line program, through pkg-config
cat >"$dir/prog.c" <<'CEOF'
#include <h3s_model.h>
#include <stdio.h>
int main(int argc, char **argv) { h3s_model *m = NULL; if (argc < 2 || h3s_model_load(argv[1], H3S_BACKEND_CPU, 0, &m) != H3S_OK) return fprintf(stderr, "%s\n", h3s_last_error()), 1; printf("h3strict %s: %lld parameters\n", h3s_version(), (long long)h3s_model_param_count(m)); h3s_model_free(m); return 0; }
CEOF
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs h3strict) || bad "pkg-config --cflags --libs h3strict"
# shellcheck disable=SC2086
if "$CC" -std=c11 -Wall -Werror $XFLAGS "$dir/prog.c" -o "$dir/prog" $flags; then
    out=$(LD_LIBRARY_PATH=$(dirname "$lib") "$dir/prog" "$dir/tiny") || bad "prog failed: $out"
    [ "$out" = "h3strict $(LD_LIBRARY_PATH=$(dirname "$lib") "$P/bin/h3strict" --version | awk '{print $2}'): 52 parameters" ] ||
        [ "$out" = "h3strict 0.1.0: 52 parameters" ] || bad "prog printed '$out'"
    # the program uses the installed library, not the build tree's
    ldd_out=$(LD_LIBRARY_PATH=$(dirname "$lib") ldd "$dir/prog" | grep libh3strict)
    case "$ldd_out" in *"$P"*) ;; *) bad "prog resolves libh3strict outside the prefix: $ldd_out" ;; esac
    LD_LIBRARY_PATH=$(dirname "$lib") "$dir/prog" "$dir/nothing" 2>"$dir/err" && bad "prog accepted a missing model"
    grep -q . "$dir/err" || bad "no message for a missing model"
else
    bad "the three-line program does not compile against the installed tree ($flags)"
fi

# the same through find_package(h3strict)
mkdir -p "$dir/cm"
cp "$dir/prog.c" "$dir/cm/prog.c"
cat >"$dir/cm/CMakeLists.txt" <<'CEOF'
cmake_minimum_required(VERSION 3.20)
project(h3s_consumer C)
find_package(h3strict 0.1 REQUIRED)
add_executable(prog prog.c)
target_link_libraries(prog PRIVATE h3strict::h3strict)
CEOF
if cmake -S "$dir/cm" -B "$dir/cm/build" -DCMAKE_PREFIX_PATH="$P" -DCMAKE_C_COMPILER="$CC" \
    -DCMAKE_C_FLAGS="$XFLAGS" -DCMAKE_EXE_LINKER_FLAGS="$XFLAGS" >"$dir/cm.log" 2>&1 &&
    cmake --build "$dir/cm/build" >>"$dir/cm.log" 2>&1; then
    out=$("$dir/cm/build/prog" "$dir/tiny") || bad "find_package program failed: $out"
    case "$out" in *": 52 parameters") ;; *) bad "find_package program printed '$out'" ;; esac
else
    cat "$dir/cm.log"
    bad "find_package(h3strict) consumer does not build"
fi

[ "$fails" -eq 0 ] || { echo "install_tree: $fails failure(s)"; exit 1; }
echo "install_tree: OK (prefix layout, soname $soname, $(wc -l <"$dir/exported") exported symbols, pkg-config and find_package consumers)"
