#!/usr/bin/env bash
# The artifact librdmacm.so.1 against rdma-core's ABI (docs/RDMACM.md):
#  1. SONAME librdmacm.so.1, BIND_NOW-safe: version definitions = the
#     nodes of rdmacm/librdmacm.map with their parents, and each node's
#     defined symbols = the map's list (nothing else exported);
#  2. when the system's librdmacm.so.1 is installed: every node it has
#     exports exactly the same symbols here;
#  3. a C program linked -z now against the system's -lrdmacm that
#     references every RDMACM_1.0-1.3 symbol loads and runs with our
#     library through LD_PRELOAD and through LD_LIBRARY_PATH, and the
#     real librdmacm is never mapped (/proc/self/maps).
# Usage: exports.sh <our librdmacm.so.1> <scratch dir>
set -euo pipefail
so=$1
dir=$2
map=$(dirname "$0")/../librdmacm.map
mkdir -p "$dir"
fail() { echo "rdmacm exports: FAIL: $*" >&2; exit 1; }

# --- 1. SONAME, version definitions, per-node symbols -----------------------
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = librdmacm.so.1 ] || fail "SONAME is '$soname', not librdmacm.so.1"

# "<node> <parent>" from the map, and from the object.
awk '/^RDMACM_[0-9.]+ \{/ {node=$1} /^\} RDMACM/ {gsub(/[};]/,""); print node, $1; node=""}
     /^};/ && node {print node, "-"; node=""}' "$map" | sort > "$dir/map.nodes"
node_defs() {
    objdump -p "$1" | awk '/^Version definitions:/ {on=1; next} /^$/ {on=0}
        on && $2 == "0x00" {cur=$4; parent[cur]="-"; order[++n]=cur}
        on && NF == 1 {parent[cur]=$1}
        END {for (i=1;i<=n;i++) print order[i], parent[order[i]]}' | sort
}
node_defs "$so" > "$dir/so.nodes"
diff -u "$dir/map.nodes" "$dir/so.nodes" || fail "version definitions differ from $map"

# "<node> <symbol>" from the map, and the defined dynamic symbols.
awk '/^RDMACM_[0-9.]+ \{/ {node=$1; next} /^\}/ {node=""} node && /^\t\t[a-z_]+;/ {gsub(/[\t;]/,""); print node, $0}' \
    "$map" | sort -u > "$dir/map.syms"
exports() {
    objdump -T "$1" | awk 'NF >= 6 && !/\*UND\*/ && $NF != $(NF-1) && $(NF-1) ~ /^RDMACM_/ {print $(NF-1), $NF}' | sort -u
}
exports "$so" > "$dir/so.syms"
diff -u "$dir/map.syms" "$dir/so.syms" || fail "exported symbols differ from $map"
others=$(objdump -T "$so" | awk 'NF >= 6 && !/\*UND\*/ && / (DF|DO) / && $(NF-1) !~ /^RDMACM_/' | wc -l)
[ "$others" = 0 ] || fail "$others symbols exported outside the RDMACM nodes"
echo "rdmacm exports: SONAME, $(wc -l < "$dir/so.nodes") nodes and $(wc -l < "$dir/so.syms") symbols match $map"

# --- 2. the system librdmacm ------------------------------------------------
sys=$(ldconfig -p | awk '!found && /librdmacm\.so\.1 .*x86-64|librdmacm\.so\.1 \(libc6/ {print $NF; found=1}')
if [ -z "$sys" ] || [ ! -e "$sys" ]; then
    [ -z "${CI:-}" ] || fail "the system librdmacm.so.1 is missing (scripts/deps.sh installs librdmacm1)"
    echo "rdmacm exports: system librdmacm not installed: comparison and load test skipped"
    exit 0
fi
exports "$sys" > "$dir/sys.syms"
for node in $(cut -d' ' -f1 "$dir/sys.syms" | sort -u); do
    diff -u <(grep "^$node " "$dir/sys.syms") <(grep "^$node " "$dir/so.syms") \
        || fail "node $node differs from $sys"
done
echo "rdmacm exports: every node of $sys ($(cut -d' ' -f1 "$dir/sys.syms" | sort -u | tr '\n' ' ')) exports the same symbols"

# --- 3. a BIND_NOW program importing every system symbol -------------------
{
    echo '#include <stdio.h>'
    echo '#include <string.h>'
    echo '#include <errno.h>'
    cut -d' ' -f2 "$dir/sys.syms" | sed 's/.*/void &(void);/'
    echo 'static void (*const all[])(void) = {'
    cut -d' ' -f2 "$dir/sys.syms" | sed 's/.*/\t&,/'
    echo '};'
    cat <<'C'
int main(void)
{
	const char *(*event_str)(int) = (const char *(*)(int))rdma_event_str;
	int (*sock)(int, int, int) = (int (*)(int, int, int))rsocket;
	char line[4096];
	FILE *maps = fopen("/proc/self/maps", "r");
	int ours = 0, bad = 0;

	if (strcmp(event_str(9), "RDMA_CM_EVENT_ESTABLISHED") != 0)
		return 2;
	errno = 0;
	if (sock(2, 1, 0) != -1 || errno != ENOSYS)
		return 3;
	while (maps && fgets(line, sizeof(line), maps)) {
		if (strstr(line, SO_PATH)) {
			ours = 1;
		} else if (strstr(line, "librdmacm")) {
			bad = 1;
			fputs(line, stderr);
		}
	}
	printf("%zu symbols bound, ours mapped %d, other librdmacm mapped %d\n",
	       sizeof(all) / sizeof(all[0]), ours, bad);
	return ours && !bad ? 0 : 4;
}
C
} > "$dir/importer.c"
real=$(readlink -f "$so")
${CC:-gcc} -O1 -w -DSO_PATH="\"$real\"" "$dir/importer.c" -o "$dir/importer" -Wl,-z,now -Wl,--no-as-needed "$sys"
readelf -d "$dir/importer" > "$dir/importer.dyn"
grep -q 'BIND_NOW\|FLAGS.*NOW' "$dir/importer.dyn" || fail "importer is not BIND_NOW"
IBCM_LOG=off LD_PRELOAD="$real" "$dir/importer" || fail "LD_PRELOAD run failed ($?)"
mkdir -p "$dir/libdir"
ln -sf "$real" "$dir/libdir/librdmacm.so.1"
IBCM_LOG=off LD_LIBRARY_PATH="$dir/libdir" "$dir/importer" || fail "LD_LIBRARY_PATH run failed ($?)"
echo "rdmacm exports: a -z now binary built against $sys runs on ours (LD_PRELOAD and LD_LIBRARY_PATH); the real one is never mapped"
