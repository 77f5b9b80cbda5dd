#!/usr/bin/env bash
# Checks the manual pages in man/ (run by `make test-man`):
#   1. every page lints clean with `mandoc -Tlint -W warning` and renders,
#      with mandoc and with man-db/groff (`man -l`, groff warnings on), to
#      text with a NAME section; a .so link page is linted through its target (mandoc's
#      ".so is fragile" warning is the only one accepted there);
#   2. every function exported in ibcm.map has a section-3 page (a real page
#      or a .so link), whose SYNOPSIS names the function and whose NAME line
#      lists it;
#   3. every .so link is one line `.so manN/page.N` whose target exists and
#      is a real page (no link chains);
#   4. every command in `ibcm --help`'s command list has a section
#      `.SS "ibcm <command>"` in ibcm.1.
# Usage: scripts/check-man.sh   (IBCM_BIN overrides target/release/ibcm)
set -uo pipefail
cd "$(dirname "$0")/.."

MAN=man
MAP=ibcm.map
IBCM_BIN=${IBCM_BIN:-target/release/ibcm}
failures=0
fail() {
    echo "check-man: FAIL: $*" >&2
    failures=$((failures + 1))
}

for tool in mandoc man groff col; do
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

# ------------------------------------------------------------------- 4
if [ ! -x "$IBCM_BIN" ]; then
    fail "$IBCM_BIN not built (make lib), cannot read its command list"
else
    # `ibcm --help` exits 2 (usage); only its text matters here.
    help=$("$IBCM_BIN" --help 2>&1)
    mapfile -t cmds < <(printf '%s\n' "$help" | awk '
        /^commands:/ { c = 1; next }
        c && /^[[:space:]]*$/ { exit }
        c && /^  [a-z]/ { print $1 }')
    if ((${#cmds[@]} == 0)); then
        fail "no command list in '$IBCM_BIN --help'"
    fi
    for c in "${cmds[@]}"; do
        if ! grep -Eq "^\.SS \"ibcm $c\"\$" "$MAN/man1/ibcm.1"; then
            fail "command '$c' (ibcm --help) has no section .SS \"ibcm $c\" in $MAN/man1/ibcm.1"
        fi
    done
fi

if ((failures)); then
    echo "check-man: $failures failure(s)" >&2
    exit 1
fi
echo "check-man: ${#pages[@]} pages ($links .so links) lint and render clean;" \
    "${#funcs[@]} exported functions documented; commands: ${cmds[*]}"
