#!/usr/bin/env bash
# Installs what `make test` needs beyond the Rust toolchain, gcc and python3:
# pkg-config, valgrind, tshark (live decode cross-check), iproute2 (network
# namespace tests) and pytest. Installs only what is missing; needs root
# (or sudo) for the Debian packages.
set -euo pipefail

need=()
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v valgrind   >/dev/null || need+=(valgrind)
command -v tshark     >/dev/null || need+=(tshark)
command -v ip         >/dev/null || need+=(iproute2)
[ -e /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)

if ((${#need[@]})); then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null; then SUDO="sudo"; else
            echo "deps: missing ${need[*]} and not root: install them and rerun" >&2
            exit 1
        fi
    fi
    echo "deps: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! python3 -c 'import pytest' 2>/dev/null; then
    echo "deps: installing pytest"
    python3 -m pip install -q --disable-pip-version-check pytest
fi
