#!/usr/bin/env bash
# Keeps the repository's references resolvable inside the repository (run by
# `make test-docs`):
#   1. no tracked file points at notes that live outside the repository:
#      the project's old shared fact and design notes (by file name), a
#      `../shared/` path, or their lettered section numbers (`§D.5`,
#      `facts A.2`, `table D.6`);
#   2. every section heading of docs/CM_RULES.md has the form
#      `## <a id="<name>"></a>§<name> — Title` with the same name twice, and
#      no name is used by two headings;
#   3. every lowercase `§<name>` written in a tracked file (the citation form
#      is `CM_RULES.md §<name>`) names a section of docs/CM_RULES.md.
# tests/vectors/ (kernel captures and their notes) and this script are not
# checked. Exit status 1 and one line per problem when anything is wrong.
set -euo pipefail
cd "$(dirname "$0")/.."

RULES=docs/CM_RULES.md
SELF=scripts/check-refs.sh
fail=0
problem() {
	echo "check-refs: $*" >&2
	fail=1
}

# The files to check: tracked text files (a plain directory without git
# falls back to every file outside build outputs).
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	mapfile -t files < <(git ls-files)
else
	mapfile -t files < <(find . -type f -not -path './.git/*' -not -path './target/*' \
		-not -path './build/*' -not -path '*/target/*' | sed 's|^\./||' | sort)
fi
checked=()
for f in "${files[@]}"; do
	case "$f" in
	tests/vectors/* | "$SELF") continue ;;
	esac
	[ -f "$f" ] && checked+=("$f")
done
[ "${#checked[@]}" -gt 0 ] || {
	echo "check-refs: no files to check" >&2
	exit 1
}
[ -f "$RULES" ] || {
	echo "check-refs: $RULES is missing" >&2
	exit 1
}

# 1. Pointers to notes outside the repository.
external='ib_cm_facts\.md|rdmacm_facts\.md|DESIGN\.md|anchors\.md|\.\./shared/'
lettered='§[A-F]\.[0-9]|(facts|table|tables|section|sections) §?[A-F]\.[0-9]'
while IFS= read -r hit; do
	problem "$hit: points outside the repository (cite docs/CM_RULES.md §<name> instead)"
done < <(grep -I -n -H -E "$external|$lettered" -- "${checked[@]}" || true)

# 2. The anchors of CM_RULES.md.
declare -A anchor=()
lineno=0
while IFS= read -r line; do
	lineno=$((lineno + 1))
	case "$line" in
	'#'*) ;;
	*) continue ;;
	esac
	if [[ "$line" =~ ^#+\ \<a\ id=\"([a-z0-9-]+)\"\>\</a\>§([a-z0-9-]+)\ —\ [^\ ] ]]; then
		id="${BASH_REMATCH[1]}"
		name="${BASH_REMATCH[2]}"
		if [ "$id" != "$name" ]; then
			problem "$RULES:$lineno: anchor id \"$id\" differs from its §$name"
		elif [ -n "${anchor[$id]:-}" ]; then
			problem "$RULES:$lineno: §$id is already defined on line ${anchor[$id]}"
		else
			anchor[$id]=$lineno
		fi
	elif [[ "$line" =~ ^##\  ]]; then
		problem "$RULES:$lineno: section heading without the '<a id=\"name\"></a>§name — Title' form"
	fi
done <"$RULES"
[ "${#anchor[@]}" -gt 0 ] || problem "$RULES: no section anchors found"

# 3. Every §name cited anywhere resolves.
cited=0
while IFS= read -r hit; do
	file="${hit%%:*}"
	rest="${hit#*:}"
	line="${rest%%:*}"
	name="${rest#*:}"
	name="${name#§}"
	name="${name%-}"
	cited=$((cited + 1))
	[ -n "${anchor[$name]:-}" ] ||
		problem "$file:$line: cites §$name, which is not a section of $RULES"
done < <(grep -I -n -H -o -E '§[a-z][a-z0-9-]*' -- "${checked[@]}" || true)

if [ "$fail" -ne 0 ]; then
	exit 1
fi
echo "check-refs: ${#checked[@]} files, ${#anchor[@]} sections in $RULES, $cited citations: all resolve"
