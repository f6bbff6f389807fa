# Sourced by the device scripts (scripts/gpu_evidence.sh, bench/provider/run_gpu_bench.sh):
# build dependencies on a machine without a package registry.  Expects SRC (repository root)
# and a `log` function; sets EXTRA_CMAKE (an array of cmake arguments).
#
# pkg-config, cJSON and the OpenSSL headers come from the system; when one is missing and
# .deps/ holds Debian packages of them (libcjson1, libcjson-dev, pkgconf, pkgconf-bin,
# libpkgconf3, libssl-dev, libssl3, fetched with `apt-get download`), they are unpacked under
# /tmp and used from there.
EXTRA_CMAKE=()
need_deps=0
command -v pkg-config >/dev/null 2>&1 || need_deps=1
pkg-config --exists libcjson 2>/dev/null || need_deps=1
[ -e /usr/include/openssl/evp.h ] || need_deps=1
if [ "$need_deps" = 1 ]; then
    if ls "$SRC"/.deps/*.deb >/dev/null 2>&1; then
        D=/tmp/h3s-deps
        mkdir -p "$D/bin"
        for f in "$SRC"/.deps/*.deb; do dpkg -x "$f" "$D"; done
        ML=$D/usr/lib/x86_64-linux-gnu
        if ! command -v pkg-config >/dev/null 2>&1; then
            printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$ML" "$D/usr/bin/pkgconf" >"$D/bin/pkg-config"
            chmod +x "$D/bin/pkg-config"
            export PATH=$D/bin:$PATH
            log "deps: pkg-config from .deps"
        fi
        if ! pkg-config --exists libcjson 2>/dev/null; then
            # cJSON alone in its own directories: the packages' openssl.pc beside its .pc would make CMake link the
            # packaged libcrypto, and their libcrypto.so.3 beside libcjson.so.1 would be found through the library's
            # run path before the machine's (see the OpenSSL case below)
            mkdir -p "$D/pc" "$D/cjson"
            cp -a "$ML"/libcjson.so* "$D/cjson/"
            sed "s|^libdir=.*|libdir=$D/cjson|; s|^includedir=.*|includedir=$D/usr/include|" \
                "$ML/pkgconfig/libcjson.pc" >"$D/pc/libcjson.pc"
            export PKG_CONFIG_PATH=$D/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
            log "deps: cJSON from .deps"
        fi
        # OpenSSL: the machine's libcrypto whenever it has one (with the packaged headers when it has none), so that a
        # process using the library and the machine's libssl (Python) holds one libcrypto.so.3, not two.
        sys_crypto=$(ldconfig -p 2>/dev/null | awk '/libcrypto\.so\.3 .*x86-64/ {print $NF; exit}')
        inc=/usr/include
        if [ ! -e /usr/include/openssl/evp.h ]; then
            cp -n "$D"/usr/include/x86_64-linux-gnu/openssl/* "$D/usr/include/openssl/" 2>/dev/null
            inc=$D/usr/include
        fi
        if [ -n "$sys_crypto" ]; then
            EXTRA_CMAKE+=("-DOPENSSL_INCLUDE_DIR=$inc" "-DOPENSSL_CRYPTO_LIBRARY=$sys_crypto")
            log "deps: OpenSSL headers from $inc, the machine's libcrypto ($sys_crypto)"
        elif [ "$inc" != /usr/include ]; then
            EXTRA_CMAKE+=("-DOPENSSL_ROOT_DIR=$D/usr")
            log "deps: OpenSSL headers and libcrypto from .deps"
        fi
    else
        log "deps: missing system packages and no .deps/ to fall back on"
    fi
fi
