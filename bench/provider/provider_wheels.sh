# shellcheck shell=bash
# Sourced (bash): diffusers 0.42.1 and accelerate 1.15.0 for the provider side, on a machine without a package
# index.  The logic of scripts/provider_replay_evidence.sh, as a function:
#
#   . bench/provider/provider_wheels.sh
#   provider_wheels PYTHON WHEELS SITE || exit 4
#
# The given Python (with its own torch) is used as it is when it imports diffusers 0.42.1 and accelerate 1.15.0;
# else SITE is put on PYTHONPATH (exported) and, when that is not enough, the two wheels from WHEELS are installed
# there with no index and no requirements (the machine's torch, numpy, huggingface_hub and safetensors serve); only
# when they then do not import are their requirements that are not torch installed into SITE from WHEELS too.  The
# wheels are fetched beforehand on a machine with network access (the header of scripts/provider_replay_evidence.sh
# has the two `pip download` commands; .deps/wheels is ignored by git).  Expects a `log` function (a line to the
# log and the terminal); pip's own output goes to stderr.  Returns 0 when the probe passes, 4 otherwise.
provider_wheels() {
    local py=$1 wheels=$2 site=$3 whls
    local probe='import torch, diffusers, accelerate; from diffusers import MiniMaxH3Transformer3DModel
assert (diffusers.__version__, accelerate.__version__) == ("0.42.1", "1.15.0"), (diffusers.__version__, accelerate.__version__)'
    if "$py" -c "$probe" >/dev/null 2>&1; then
        log "provider: diffusers 0.42.1 and accelerate 1.15.0 from the Python's own packages"
        return 0
    fi
    export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
    if "$py" -c "$probe" >/dev/null 2>&1; then
        log "provider: diffusers 0.42.1 and accelerate 1.15.0 from $site"
        return 0
    fi
    whls=$(ls "$wheels"/diffusers-0.42.1-*.whl "$wheels"/accelerate-1.15.0-*.whl 2>/dev/null)
    if [ "$(echo "$whls" | grep -c .)" != 2 ]; then
        log "FAIL: no diffusers 0.42.1 and accelerate 1.15.0 wheels in $wheels (see scripts/provider_replay_evidence.sh)"
        return 4
    fi
    # shellcheck disable=SC2086
    if ! "$py" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" $whls >&2; then
        log "FAIL: pip could not install $whls"
        return 4
    fi
    if "$py" -c "$probe" >/dev/null 2>&1; then
        log "provider: diffusers 0.42.1 and accelerate 1.15.0 installed from $wheels into $site (no requirements)"
        return 0
    fi
    log "provider: diffusers or accelerate lacks requirements on this machine: installing them from $wheels"
    if ! "$py" -m pip install -q --no-index --no-compile --find-links "$wheels" --target "$site" --upgrade \
        diffusers==0.42.1 psutil pyyaml packaging >&2; then
        log "FAIL: the requirements are not all in $wheels"
        return 4
    fi
    if ! "$py" -c "$probe" >&2; then
        log "FAIL: diffusers 0.42.1 / accelerate 1.15.0 do not import"
        return 4
    fi
    log "provider: diffusers 0.42.1, accelerate 1.15.0 and their requirements installed from $wheels into $site"
    return 0
}
