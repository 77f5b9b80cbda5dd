#!/usr/bin/env bash
# Installs what `make test` needs beyond the Rust toolchain, gcc and python3:
# pkg-config, valgrind, tshark (live decode cross-check), iproute2 (network
# namespace tests), mandoc, man-db and col (man page checks), python3-venv
# (the wheel test's clean venv), pytest, mypy (`mypy --strict` on the Python
# package) and wheel (`make wheel`), librdmacm-dev and rdmacm-utils
# (librdmacm.so.1's ABI and export checks). Installs only what is missing; needs
# root (or sudo) for the Debian packages.
set -euo pipefail

need=()
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v valgrind   >/dev/null || need+=(valgrind)
command -v tshark     >/dev/null || need+=(tshark)
command -v ip         >/dev/null || need+=(iproute2)
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
command -v mandoc     >/dev/null || need+=(mandoc)
command -v man        >/dev/null || need+=(man-db)
command -v col        >/dev/null || need+=(bsdextrautils)
[ -e /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
# librdmacm.so.1 is checked against rdma-core's header and library, and
# run by its tools (make test-rdmacm).
[ -e /usr/include/rdma/rdma_cma.h ] || need+=(librdmacm-dev)
command -v rping      >/dev/null || need+=(rdmacm-utils)

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

pip_need=()
python3 -c 'import pytest' 2>/dev/null || pip_need+=(pytest)
python3 -c 'import mypy' 2>/dev/null || pip_need+=(mypy)
python3 -c 'import wheel' 2>/dev/null || pip_need+=(wheel)
if ((${#pip_need[@]})); then
    echo "deps: installing ${pip_need[*]}"
    # Debian's own python3 refuses pip installs outside a venv (PEP 668);
    # the test tools go beside the system packages then.
    python3 -m pip install -q --disable-pip-version-check "${pip_need[@]}" 2>/dev/null ||
        python3 -m pip install -q --disable-pip-version-check --break-system-packages \
            "${pip_need[@]}"
fi
