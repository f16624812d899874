#!/usr/bin/env bash
# nested: runs a command in one of this repository's nested modules against
# this checkout of the core, not against a published version.
#
#   scripts/nested.sh otel go test -count=1 ./...
#   scripts/nested.sh otel go mod tidy -diff    # go mod tidy: writes go.mod/go.sum back
#   scripts/nested.sh otel go get go.opentelemetry.io/otel@v1.41.0
#
# A nested module's go.mod requires the core, and any other module of this
# repository it imports, at a released version (v0.1.0) with no replace, so
# that a user can fetch it (docs/release.md). Here that version may not exist
# yet, and is not the code under review anyway. So the command runs with each
# such requirement replaced by its directory in this checkout, what a user
# who replaces them sees:
#   - go mod and go get, which ignore a workspace or write go.mod, get
#     -modfile naming a scratch go.mod with the replaces and a scratch go.sum
#     without this repository's modules (a directory needs no checksum, and
#     tidy would drop them). When the command succeeds and changed them,
#     they are written back, without the replaces, those checksums kept.
#   - every other command (go vet, go test, golangci-lint) runs in a scratch
#     workspace of this one module with the replaces (GOWORK): go/packages,
#     under golangci-lint, asks go for its version in GOPATH mode, where
#     GOFLAGS=-modfile is an error.
#
# Why not a go.work at the root: docs/release.md.
set -euo pipefail
if [ $# -lt 2 ]; then
	echo "usage: scripts/nested.sh <module dir> <command> [args...]" >&2
	echo "(the directory relative to the current one: the Makefile's NESTED from the root)" >&2
	exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$1
shift
cd "$dir"
[ -f go.mod ] || { echo "nested: $dir has no go.mod" >&2; exit 2; }
export LC_ALL=C GOWORK=off
core=$(awk '$1 == "module" { print $2; exit }' "$root/go.mod")

# This repository's modules among the requirements, direct or not.
mods=$(awk -v core="$core" '
	$1 == "require" && $2 == "(" { block = 1; next }
	block && $1 == ")" { block = 0; next }
	$1 == "require" { p = $2 } block { p = $1 }
	($1 == "require" || block) && (p == core || index(p, core "/") == 1) { print p }
' go.mod)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for m in $mods; do
	d=$root${m#"$core"}
	if [ "$(awk '$1 == "module" { print $2; exit }' "$d/go.mod" 2>/dev/null)" != "$m" ]; then
		echo "nested: $dir requires $m, which is not the module in $d" >&2
		exit 2
	fi
done

if [ "$1" != go ] || { [ "$2" != mod ] && [ "$2" != get ]; }; then
	printf 'go %s\n\nuse %s\n' "$(awk '$1 == "go" { print $2; exit }' go.mod)" "$(pwd)" >"$tmp/go.work"
	for m in $mods; do
		go work edit -replace="$m=$root${m#"$core"}" "$tmp/go.work"
	done
	GOWORK=$tmp/go.work "$@"
	exit
fi

cp go.mod "$tmp/go.mod"
ours=$(awk -v core="$core" '$1 == core || index($1, core "/") == 1' go.sum 2>/dev/null || true)
awk -v core="$core" '!($1 == core || index($1, core "/") == 1)' go.sum >"$tmp/go.sum" 2>/dev/null || true
for m in $mods; do
	go mod edit -replace="$m=$root${m#"$core"}" "$tmp/go.mod"
done
cp "$tmp/go.mod" "$tmp/before.mod"
cp "$tmp/go.sum" "$tmp/before.sum"

# GOFLAGS from go env too: the variable replaces what go env -w set.
GOFLAGS="$(go env GOFLAGS) -modfile=$tmp/go.mod" "$@"

if ! cmp -s "$tmp/go.mod" "$tmp/before.mod"; then
	for m in $mods; do
		go mod edit -dropreplace="$m" "$tmp/go.mod"
	done
	cp "$tmp/go.mod" go.mod
	echo "nested: wrote $dir/go.mod" >&2
fi
if ! cmp -s "$tmp/go.sum" "$tmp/before.sum"; then
	# Put this repository's checksums back where go would sort them.
	printf '%s\n' "$ours" | awk 'NR == FNR { if ($0 != "") { o[++n] = $0; k[n] = $1 } next }
		{ while (i < n && k[i + 1] < $1) print o[++i]; print }
		END { while (i < n) print o[++i] }' - "$tmp/go.sum" >go.sum
	echo "nested: wrote $dir/go.sum" >&2
fi
