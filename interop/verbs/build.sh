#!/bin/bash
# build.sh - assemble the Soft-RoCE (rdma_rxe) qemu guests for interop/verbs.sh into $LAB_CACHE
# (default build/interop-verbs/cache). Adapted from the rxe lab (shared/lab/rxe/build.sh).
#
# Produces (all under .cache/, git-ignored):
#   debs/                      downloaded Debian packages (kernel image, busybox-static)
#   kernel/                    dpkg -x of linux-image-$KVER, depmod'ed (modules.dep/alias)
#   vmlinuz                    guest kernel
#   initramfs.cpio.gz          busybox + module closure + guest/init
#   bin/                       host-compiled helper programs (run in the guest via 9p)
#   ENV                        KVER=..., used by run-pair.sh
#
# Idempotent: re-running only redoes what is missing or out of date.
# Needs root (apt-get install of the host userland that the guests use via 9p).
set -euo pipefail

LAB="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${LAB_CACHE:-$LAB/../../build/interop-verbs/cache}"
# Kernel ABI that is known to work; falls back to what linux-image-amd64 points at.
KVER="${LAB_KVER:-6.1.0-56-amd64}"

say() { echo "[build] $*"; }

# Modules the guests may need. Their dependency closure goes into the initramfs.
WANT_MODS="virtio_pci virtio_net 9pnet_virtio 9p crc32_generic crc32_pclmul configfs
  rdma_rxe ib_core ib_uverbs ib_umad ib_cm iw_cm rdma_cm rdma_ucm"

# --- 1. host packages (the guests run the host's userland through virtio-9p) ----------
HOST_PKGS="qemu-system-x86 cpio kmod busybox-static iproute2 gcc libc6-dev python3
  rdma-core ibverbs-providers ibverbs-utils libibverbs-dev librdmacm-dev rdmacm-utils
  perftest libibumad3 libibumad-dev infiniband-diags tshark"
missing=""
for p in $HOST_PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  say "installing host packages:$missing"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq --no-install-recommends $missing >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
else
  say "host packages present"
fi

mkdir -p "$CACHE/debs" "$CACHE/bin"

# --- 2. download the guest kernel + busybox-static ------------------------------------
dl() { # dl PKG -> prints path of the .deb in $CACHE/debs
  local pkg="$1" f
  f=$(ls "$CACHE/debs/${pkg}_"*.deb 2>/dev/null | head -1 || true)
  if [ -z "$f" ]; then
    (cd "$CACHE/debs" && apt-get download "$pkg" >/dev/null 2>&1) || {
      apt-get update -qq && (cd "$CACHE/debs" && apt-get download "$pkg" >/dev/null 2>&1); } || return 1
    f=$(ls "$CACHE/debs/${pkg}_"*.deb | head -1)
  fi
  echo "$f"
}
if ! KDEB=$(dl "linux-image-$KVER"); then
  say "linux-image-$KVER not downloadable, resolving linux-image-amd64"
  apt-get update -qq || true
  KVER=$(apt-cache depends linux-image-amd64 | sed -n 's/.*Depends: linux-image-\([0-9].*-amd64\)$/\1/p' | head -1)
  [ -n "$KVER" ] || { echo "cannot resolve kernel package" >&2; exit 1; }
  KDEB=$(dl "linux-image-$KVER")
fi
BBDEB=$(dl busybox-static)
say "kernel $KVER: $(basename "$KDEB")"

# --- 3. unpack kernel, depmod ----------------------------------------------------------
KROOT="$CACHE/kernel"
if [ ! -f "$KROOT/.ok-$KVER" ]; then
  say "unpacking kernel"
  rm -rf "$KROOT"; mkdir -p "$KROOT"
  dpkg -x "$KDEB" "$KROOT"
  depmod -b "$KROOT" "$KVER"
  touch "$KROOT/.ok-$KVER"
fi
cp -f "$KROOT/boot/vmlinuz-$KVER" "$CACHE/vmlinuz"
BB="$CACHE/busybox/bin/busybox"
if [ ! -x "$BB" ]; then
  rm -rf "$CACHE/busybox"; mkdir -p "$CACHE/busybox"; dpkg -x "$BBDEB" "$CACHE/busybox"
fi

# --- 4. initramfs ------------------------------------------------------------------------
STAGE="$CACHE/initramfs"
rm -rf "$STAGE"
mkdir -p "$STAGE"/{bin,sbin,dev,proc,sys,tmp,run,hostroot,etc,lib/modules/"$KVER"}
cp "$BB" "$STAGE/bin/busybox"
cp "$LAB/guest/init" "$STAGE/init"; chmod 755 "$STAGE/init"
MODDIR="$KROOT/lib/modules/$KVER"
# dependency closure via modules.dep (lists the full transitive dependency set)
python3 - "$MODDIR" $WANT_MODS > "$CACHE/modlist.txt" <<'EOF'
import sys, os
moddir, want = sys.argv[1], sys.argv[2:]
dep = {}
for line in open(os.path.join(moddir, "modules.dep")):
    k, _, v = line.partition(":")
    name = os.path.basename(k).split(".ko")[0].replace("-", "_")
    dep[name] = (k, v.split())
builtin = {os.path.basename(l.strip()).split(".ko")[0].replace("-", "_")
           for l in open(os.path.join(moddir, "modules.builtin"))}
out = set()
for w in want:
    w = w.replace("-", "_")
    if w in builtin:
        continue
    if w not in dep:
        sys.exit("module not found: " + w)
    out.add(dep[w][0]); out.update(dep[w][1])
print("\n".join(sorted(out)))
EOF
while read -r rel; do
  mkdir -p "$STAGE/lib/modules/$KVER/$(dirname "$rel")"
  cp "$MODDIR/$rel" "$STAGE/lib/modules/$KVER/$rel"
done < "$CACHE/modlist.txt"
cp "$MODDIR"/modules.builtin* "$MODDIR/modules.order" "$STAGE/lib/modules/$KVER/"
depmod -b "$STAGE" "$KVER"
say "initramfs: $(wc -l < "$CACHE/modlist.txt") modules"
(cd "$STAGE" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 | gzip -6 > "$CACHE/initramfs.cpio.gz.new")
mv "$CACHE/initramfs.cpio.gz.new" "$CACHE/initramfs.cpio.gz"

echo "KVER=$KVER" > "$CACHE/ENV"
say "done: $CACHE (vmlinuz, initramfs.cpio.gz $(du -h "$CACHE/initramfs.cpio.gz" | cut -f1))"
