# interop/lib.sh - shared settings and helpers for the kernel-CM interop run.
# Sourced by fetch.sh and run.sh; not executable on its own.

IC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
IC_ROOT="$(cd "$IC_DIR/.." && pwd)"
IC_CACHE="${IC_CACHE:-$IC_DIR/.cache}"
# Guest kernel: the Debian 12 ABI the lab verified; fetch.sh falls back to
# what linux-image-amd64 depends on when this one is no longer published.
IC_KVER="${IC_KVER:-6.1.0-56-amd64}"

# Addresses live only inside the private network namespace run.sh creates.
IC_HOST_IP=10.77.5.254
IC_GUEST_IP=10.77.5.1
IC_GUEST_MAC=52:54:00:77:05:01

# Host packages: qemu + initramfs tools, the rdma-core userland the guests
# run through 9p (rdmacm-utils and perftest: the tools of interop/rdmacm.sh),
# and the capture/decode tools.
IC_HOST_PKGS="qemu-system-x86 cpio kmod iproute2 rdmacm-utils ibverbs-providers
  ibverbs-utils libibverbs1 librdmacm1 perftest tcpdump tshark python3"

# Guest modules: their modules.dep closure goes into the initramfs.
IC_GUEST_MODS="virtio_pci virtio_net 9pnet_virtio 9p crc32_generic crc32_pclmul
  configfs rdma_rxe ib_core ib_uverbs ib_cm iw_cm rdma_cm rdma_ucm"

ic_say() { echo "[interop] $*"; }
ic_die() { echo "[interop] ERROR: $*" >&2; exit 1; }

# Elapsed seconds since $1 (a `date +%s.%N` stamp), one decimal.
ic_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

ic_pkg_missing() { # prints the packages of $* that are not installed
  local p out=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || out="$out $p"
  done
  echo "$out"
}

# ic_wait_file FILE SEC [PID]: wait until FILE exists; fails after SEC seconds
# or as soon as process PID (if given) is gone.
ic_wait_file() {
  local f=$1 n=$(( $2 * 20 )) pid=${3:-} i=0
  while [ ! -e "$f" ]; do
    [ $i -lt $n ] || return 1
    [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05; i=$((i + 1))
  done
}

# ic_wait_grep PATTERN FILE SEC [PID]: wait until FILE contains PATTERN.
ic_wait_grep() {
  local p=$1 f=$2 n=$(( $3 * 20 )) pid=${4:-} i=0
  until grep -q -- "$p" "$f" 2>/dev/null; do
    [ $i -lt $n ] || return 1
    [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05; i=$((i + 1))
  done
}
