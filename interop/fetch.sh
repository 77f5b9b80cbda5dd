#!/bin/bash
# interop/fetch.sh - everything the interop run needs, cached under interop/.cache/:
#   host packages (apt-get install, only the missing ones): qemu, cpio, kmod, the rdma-core
#     tools the guest runs from the host's root via 9p, tcpdump, tshark;
#   debs/       linux-image-$KVER and busybox-static (apt-get download, never installed);
#   vmlinuz     the guest kernel;
#   initramfs.cpio.gz  busybox + interop/guest/init + the module closure of $IC_GUEST_MODS;
#   KVER        the kernel ABI actually used.
# Idempotent: a warm run only checks (about a second). Needs root.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ "$(id -u)" = 0 ] || ic_die "fetch.sh needs root (apt-get)"
# cannot REASON: the machine cannot run the interop tests (run.sh skips).
cannot() { echo "[interop] cannot: $*"; exit 77; }
command -v apt-get >/dev/null || cannot "no apt-get to install qemu and rdma-core"
export DEBIAN_FRONTEND=noninteractive
updated=0
apt_update() {
  [ $updated = 1 ] && return 0
  apt-get update -qq >/dev/null 2>&1 || ic_say "apt-get update failed (continuing)"
  updated=1
}

# --- host packages ---------------------------------------------------------------------
missing=$(ic_pkg_missing $IC_HOST_PKGS)
if [ -n "$missing" ]; then
  ic_say "apt-get update; apt-get install$missing"
  apt_update
  apt-get install -y -qq --no-install-recommends $missing >/dev/null 2>&1 ||
    cannot "apt-get install$missing failed"
fi
for t in qemu-system-x86_64 rping ucmatose udaddy mckey cmtime rdma_server ib_write_bw rdma tcpdump tshark cpio depmod; do
  command -v $t >/dev/null || cannot "$t missing after installing$missing"
done

mkdir -p "$IC_CACHE/debs"
# deb PKG: path of PKG's .deb in the cache, downloading it if needed
deb() {
  local f
  f=$(ls "$IC_CACHE/debs/${1}_"*.deb 2>/dev/null | head -1 || true)
  if [ -z "$f" ]; then
    ( cd "$IC_CACHE/debs" && apt-get download -qq "$1" >/dev/null 2>&1 ) ||
      { apt_update; ( cd "$IC_CACHE/debs" && apt-get download -qq "$1" >/dev/null ); } || return 1
    f=$(ls "$IC_CACHE/debs/${1}_"*.deb | head -1)
  fi
  echo "$f"
}

# --- guest kernel + busybox ---------------------------------------------------------------
KVER=$IC_KVER
if ! KDEB=$(deb "linux-image-$KVER"); then
  apt_update
  KVER=$(apt-cache depends linux-image-amd64 2>/dev/null |
         sed -n 's/.*Depends: linux-image-\([0-9][^ ]*-amd64\)$/\1/p' | head -1)
  [ -n "$KVER" ] || cannot "no linux-image package to download"
  ic_say "linux-image-$IC_KVER unavailable, using $KVER"
  KDEB=$(deb "linux-image-$KVER") || cannot "apt-get download linux-image-$KVER failed"
fi
BBDEB=$(deb busybox-static) || cannot "apt-get download busybox-static failed"

INITRD="$IC_CACHE/initramfs.cpio.gz"
STAMP="$IC_CACHE/initramfs.stamp"
want_stamp="$KVER $(basename "$KDEB") $(basename "$BBDEB") $(md5sum < "$IC_DIR/guest/init" | cut -c1-32) $IC_GUEST_MODS"
if [ -f "$INITRD" ] && [ -f "$IC_CACHE/vmlinuz" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want_stamp" ]; then
  ic_say "cache ok: kernel $KVER, $(du -h "$INITRD" | cut -f1) initramfs"
  echo "$KVER" > "$IC_CACHE/KVER"
  exit 0
fi

ic_say "building the initramfs for $KVER"
WORK="$IC_CACHE/work"
rm -rf "$WORK"; mkdir -p "$WORK/kernel" "$WORK/bb"
trap 'rm -rf "$WORK"' EXIT
dpkg -x "$KDEB" "$WORK/kernel"
dpkg -x "$BBDEB" "$WORK/bb"
MODDIR="$WORK/kernel/lib/modules/$KVER"
depmod -b "$WORK/kernel" "$KVER"

ROOT="$WORK/root"
mkdir -p "$ROOT"/{bin,dev,proc,sys,tmp,run,hostroot,lib/modules/"$KVER"}
cp "$WORK/bb/bin/busybox" "$ROOT/bin/busybox"
install -m 0755 "$IC_DIR/guest/init" "$ROOT/init"

# The transitive closure: modules.dep lists every dependency of a module.
closure=$(
  for m in $IC_GUEST_MODS; do
    m=${m//-/_}
    line=$(awk -v m="$m" -F: '{ n=$1; sub(/.*\//, "", n); sub(/\.ko.*/, "", n); gsub(/-/, "_", n)
                                if (n == m) { print; exit } }' "$MODDIR/modules.dep")
    if [ -z "$line" ]; then
      grep -q "/$m.ko" "$MODDIR/modules.builtin" 2>/dev/null && continue
      ic_die "module $m not in $KVER"
    fi
    echo "${line%%:*}"; for d in ${line#*:}; do echo "$d"; done
  done | sort -u)
for rel in $closure; do
  mkdir -p "$ROOT/lib/modules/$KVER/$(dirname "$rel")"
  cp "$MODDIR/$rel" "$ROOT/lib/modules/$KVER/$rel"
done
cp "$MODDIR"/modules.order "$MODDIR"/modules.builtin* "$ROOT/lib/modules/$KVER/"
depmod -b "$ROOT" "$KVER"
( cd "$ROOT" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip -6 ) > "$INITRD.new"
mv "$INITRD.new" "$INITRD"
cp "$WORK/kernel/boot/vmlinuz-$KVER" "$IC_CACHE/vmlinuz"
echo "$KVER" > "$IC_CACHE/KVER"
echo "$want_stamp" > "$STAMP"
ic_say "initramfs: $(echo "$closure" | wc -l) modules, $(du -h "$INITRD" | cut -f1); kernel $KVER"
