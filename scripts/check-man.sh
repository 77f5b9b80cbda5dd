#!/usr/bin/env bash
# Checks the manual pages in man/ (run by `make test-man`):
#   1. every page lints clean with `mandoc -Tlint -W warning` and renders,
#      with mandoc and with man-db/groff (`man -l`, groff warnings on), to
#      text with a NAME section; a .so link page is linted through its target (mandoc's
#      ".so is fragile" warning is the only one accepted there);
#   2. every function exported in ibcm.map has a section-3 page (a real page
#      or a .so link), whose SYNOPSIS names the function and whose NAME line
#      lists it; every struct, enum and handler type of <rdma/ib_cm.h> and
#      <ibcm.h> is described on a section-3 page;
#   3. every .so link is one line `.so manN/page.N` whose target exists and
#      is a real page (no link chains);
#   4. every command in `ibcm --help`'s command list has a section
#      `.SS "ibcm <command>"` in ibcm.1;
#   5. the C of every section-3 page compiles against include/ with
#      -Wall -Wextra -Werror: its SYNOPSIS prototypes, redeclared after the
#      headers (a prototype that differs from the header's is an error), the
#      member names of the structs and enums it shows (must be the header's,
#      in order), and
#      its EXAMPLES, placed in a function (fragments) or at file scope
#      (function definitions) after a prelude declaring the application's
#      names they use.
# Usage: scripts/check-man.sh   (IBCM_BIN overrides target/release/ibcm,
#                                CC the compiler)
set -uo pipefail
# One locale everywhere (man-db warns on stderr about a broken one).
export LC_ALL=C
cd "$(dirname "$0")/.."

MAN=man
MAP=ibcm.map
IBCM_BIN=${IBCM_BIN:-target/release/ibcm}
failures=0
fail() {
    echo "check-man: FAIL: $*" >&2
    failures=$((failures + 1))
}

for tool in mandoc man groff col python3 "${CC:-cc}"; do
    if ! command -v "$tool" >/dev/null; then
        echo "check-man: $tool is not installed (scripts/deps.sh installs it)" >&2
        exit 1
    fi
done

shopt -s nullglob
pages=("$MAN"/man1/*.1 "$MAN"/man3/*.3 "$MAN"/man7/*.7)
if ((${#pages[@]} == 0)); then
    echo "check-man: no pages under $MAN/" >&2
    exit 1
fi

# The target of a .so link page (empty for a real page).
so_target() {
    sed -n '1s/^\.so[[:space:]]\{1,\}\([^[:space:]]*\)[[:space:]]*$/\1/p' "$1"
}

# The NAME line of a real page (the line after .SH NAME).
name_line() {
    awk 'f { print; exit } /^\.SH[[:space:]]+"?NAME"?[[:space:]]*$/ { f = 1 }' "$1"
}

# ------------------------------------------------------------- 1 and 3
errs=$(mktemp)
trap 'rm -f "$errs"' EXIT
links=0
for p in "${pages[@]}"; do
    rel=${p#"$MAN"/}           # man3/foo.3: what .so and man -l resolve from man/
    target=$(so_target "$p")
    if grep -q '^\.so' "$p" || [ -n "$target" ]; then
        links=$((links + 1))
        if [ "$(grep -c . "$p")" != 1 ] || [ -z "$target" ]; then
            fail "$p: a link page must be exactly one line '.so manN/page.N'"
            continue
        fi
        if [ ! -f "$MAN/$target" ]; then
            fail "$p: .so target $target does not exist"
            continue
        fi
        if [ -n "$(so_target "$MAN/$target")" ]; then
            fail "$p: .so target $target is itself a link"
            continue
        fi
        base=$(basename "$p")
        if ! grep -qw -- "${base%.*}" <<<"$(name_line "$MAN/$target")"; then
            fail "$p: ${base%.*} is not in the NAME line of $target"
        fi
        lint=$(cd "$MAN" && mandoc -Tlint -W warning "$rel" 2>&1 | grep -v 'WARNING: \.so is fragile')
    else
        lint=$(cd "$MAN" && mandoc -Tlint -W warning "$rel" 2>&1)
    fi
    if [ -n "$lint" ]; then
        fail "$p: mandoc -Tlint:"$'\n'"$lint"
    fi
    # Rendered text: more than a header line, with its NAME section.
    text=$(cd "$MAN" && mandoc -Tutf8 "$rel" 2>/dev/null | col -b)
    if ! grep -qx 'NAME' <<<"$text"; then
        fail "$p: mandoc -Tutf8 renders no NAME section"
    fi
    text=$(cd "$MAN" && MANWIDTH=80 man --warnings=w -l "$rel" 2>"$errs")
    if [ -s "$errs" ]; then
        fail "$p: man -l (groff) warnings:"$'\n'"$(cat "$errs")"
    fi
    if ! col -b <<<"$text" | grep -x 'NAME' >/dev/null; then
        fail "$p: man -l renders no NAME section"
    fi
done

# ------------------------------------------------------------------- 2
# The exported functions: the `name;` lines of the global: part of ibcm.map.
mapfile -t funcs < <(awk '
    /global:/ { g = 1; next }
    /local:/  { g = 0 }
    g && match($0, /^[[:space:]]*[A-Za-z_][A-Za-z0-9_]*;/) {
        s = substr($0, RSTART, RLENGTH); gsub(/[[:space:];]/, "", s); print s
    }' "$MAP")
if ((${#funcs[@]} == 0)); then
    fail "$MAP: no exported functions found"
fi
for f in "${funcs[@]}"; do
    p="$MAN/man3/$f.3"
    if [ ! -f "$p" ]; then
        fail "$f (exported in $MAP) has no page $p"
        continue
    fi
    target=$(so_target "$p")
    real=$p
    [ -n "$target" ] && real="$MAN/$target"
    [ -f "$real" ] || continue # reported above
    if ! grep -qw -- "$f" <<<"$(name_line "$real")"; then
        fail "$f: not in the NAME line of $real"
    fi
    if ! grep -qF -- "$f(" <<<"$(awk '/^\.SH/ { s = ($0 ~ /SYNOPSIS/) } s' "$real")"; then
        fail "$f: the SYNOPSIS of $real has no prototype '$f('"
    fi
done

# Every struct, enum and typedef'd function type of the two headers is
# described on some section-3 page.
mapfile -t types < <(sed -nE \
    -e 's/^(struct|enum|union) ([A-Za-z_][A-Za-z0-9_]*) \{.*/\2/p' \
    -e 's/^typedef .*\(\*([A-Za-z_][A-Za-z0-9_]*)\).*/\1/p' \
    include/rdma/ib_cm.h include/ibcm.h)
if ((${#types[@]} == 0)); then
    fail "no types found in include/rdma/ib_cm.h and include/ibcm.h"
fi
for t in "${types[@]}"; do
    if ! grep -qw -- "$t" "$MAN"/man3/*.3; then
        fail "type $t (include/) is on no section-3 page"
    fi
done

# ------------------------------------------------------------------- 4
if [ ! -x "$IBCM_BIN" ]; then
    fail "$IBCM_BIN not built (make lib), cannot read its command list"
else
    # clap's list: "Commands:" then one indented line per command; its
    # own `help` command needs no page section.
    help=$("$IBCM_BIN" --help 2>&1)
    mapfile -t cmds < <(printf '%s\n' "$help" | awk '
        /^[Cc]ommands:/ { c = 1; next }
        c && /^[[:space:]]*$/ { exit }
        c && /^  [a-z]/ && $1 != "help" { print $1 }')
    if ((${#cmds[@]} == 0)); then
        fail "no command list in '$IBCM_BIN --help'"
    fi
    for c in "${cmds[@]}"; do
        if ! grep -Eq "^\.SS \"ibcm $c\"\$" "$MAN/man1/ibcm.1"; then
            fail "command '$c' (ibcm --help) has no section .SS \"ibcm $c\" in $MAN/man1/ibcm.1"
        fi
    done
fi

# ------------------------------------------------------------------- 5
# Writes the C file of one section-3 page to stdout (see the header).
page_c() {
    python3 - "$1" "$2" <<'PY'
import re, sys
page = sys.argv[1]
synopsis = "\n".join(l.strip() for l in open(sys.argv[2]).read().splitlines())
roff = open(page).read()

def strip_blocks(text):
    """Drops #lines and struct/enum/union definitions (nested braces)."""
    text = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))
    out, stmt, depth, skip_to_semi = [], [], 0, False
    for ch in text:
        if depth == 0 and skip_to_semi:
            if ch == ";":
                skip_to_semi = False
            continue
        if ch == "{":
            if depth == 0:
                stmt = []            # the statement owning the block goes
            depth += 1
            continue
        if ch == "}":
            depth -= 1
            if depth == 0:
                skip_to_semi = True
            continue
        if depth:
            continue
        stmt.append(ch)
        if ch == ";":
            out.append("".join(stmt))
            stmt = []
    return out

# Struct and enum definitions shown in the SYNOPSIS: their members (names,
# in order) must be the header's; a mismatch is printed as an #error.
headers = "".join(open(h).read() for h in ("include/rdma/ib_cm.h", "include/ibcm.h"))
def members(kind, body):
    body = re.sub(r"/\*.*?\*/", " ", body, flags=re.S)
    body = "\n".join(l for l in body.splitlines() if not l.lstrip().startswith("#"))
    if kind == "enum":
        return [d.split("=")[0].strip() for d in body.split(",") if d.strip()]
    names = []
    for decl in re.split(r"[;{}]", body):
        for d in decl.split(","):
            d = re.sub(r"\[.*?\]|:\s*\d+", "", d).strip()
            ids = re.findall(r"[A-Za-z_]\w*", d)
            if ids and ids[-1] not in ("union", "struct"):
                names.append(ids[-1])
    return names
shown = 0
for m in re.finditer(r"\b(struct|enum) (\w+) \{(.*?)\n\};", synopsis, re.S):
    kind, name, body = m.groups()
    shown += 1
    h = re.search(r"^%s %s \{(.*?)\n\};" % (kind, name), headers, re.S | re.M)
    if not h:
        print("#error \"SYNOPSIS: %s %s is not defined in the headers\"" % (kind, name))
    elif members(kind, body) != members(kind, h.group(1)):
        print("#error \"SYNOPSIS: %s %s members %s differ from the header's %s\""
              % (kind, name, members(kind, body), members(kind, h.group(1))))

protos = []
proto_re = re.compile(r"[A-Za-z_][\w\s\*]*?\b\w+\s*\((?:[\w\s\*,]|\(\s*\*?\s*\w*\s*\))*\)\s*;")
for st in strip_blocks(synopsis):
    st = " ".join(st.split())
    if st.startswith("typedef") or not proto_re.fullmatch(st):
        continue
    protos.append(st)

examples = []
for m in re.finditer(r"^\.EX\n(.*?)^\.EE\n", roff, re.S | re.M):
    t = m.group(1)
    for a, b in (("\\e", "\\"), ("\\-", "-"), ("\\&", ""), ("\\(aq", "'")):
        t = t.replace(a, b)
    examples.append(t)

print("""#define _POSIX_C_SOURCE 200809L
#include <rdma/ib_cm.h>
#include <ibcm.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <arpa/inet.h>
/* the application's names the examples use */
struct app_qp { u32 qp_num; };
struct app_conn { struct ib_cm_id *cm_id; };
extern struct app_qp *qp;
extern struct app_conn *conn;
extern void *my_context, *accept_later;
extern u32 my_qpn, my_psn;
extern struct sa_path_rec path;
int handler(struct ib_cm_id *id, const struct ib_cm_event *ev);
int accept_request(struct ib_cm_id *id, const struct ib_cm_event *ev);
int move_qp_to_rts(struct ib_cm_id *id, struct app_qp *qp);
int authorised(const void *private_data);
void queue_work(void *queue, struct ib_cm_id *id);
void use_ud_qp(u32 qpn, u32 qkey);
void run_connections(void);
/* the page's SYNOPSIS */""")
for p in protos:
    print(p)
for i, t in enumerate(examples):
    code = [l for l in t.splitlines() if l.strip() and not l.strip().startswith(("/*", "*"))]
    if code and re.match(r"(static\s+)?int\s+\w+\s*\(", code[0]):
        print(t)
    else:
        print("static int example_%d(struct ib_device *dev, struct ib_cm_id *id,\n"
              "                     const struct ib_cm_event *ev)\n{\n"
              "\tswitch (ev->event) {\n\tdefault: ;\n%s\n\t}\n\treturn 0;\n}" % (i, t))
print("/* %d prototypes, %d examples, %d definitions */" % (len(protos), len(examples), shown))
PY
}

cflags=(-std=c11 -fsyntax-only -Wall -Wextra -Werror -Wno-unused-variable
    -Wno-unused-but-set-variable -Wno-unused-parameter -Wno-unused-function
    -Wno-implicit-fallthrough -Iinclude)
csrc=$(mktemp --suffix=.c)
syn=$(mktemp)
trap 'rm -f "$errs" "$csrc" "$syn"' EXIT
compiled=0
for p in "$MAN"/man3/*.3; do
    [ -n "$(so_target "$p")" ] && continue
    (cd "$MAN" && mandoc -Tutf8 "${p#"$MAN"/}" | col -b) |
        awk '/^SYNOPSIS$/ { s = 1; next } /^[A-Z][A-Z ]*$/ { s = 0 } s' >"$syn"
    if ! page_c "$p" "$syn" >"$csrc"; then
        fail "$p: cannot extract its C"
        continue
    fi
    if grep -q '^/\* 0 prototypes, 0 examples, 0 definitions \*/$' "$csrc"; then
        fail "$p: neither a prototype nor an example found"
        continue
    fi
    if ! out=$("${CC:-cc}" "${cflags[@]}" "$csrc" 2>&1); then
        fail "$p: its SYNOPSIS/EXAMPLES do not compile:"$'\n'"$out"
        continue
    fi
    compiled=$((compiled + 1))
done

if ((failures)); then
    echo "check-man: $failures failure(s)" >&2
    exit 1
fi
echo "check-man: ${#pages[@]} pages ($links .so links) lint and render clean;" \
    "${#funcs[@]} exported functions and ${#types[@]} types documented;" \
    "commands: ${cmds[*]};" \
    "C of $compiled section-3 pages compiles"
