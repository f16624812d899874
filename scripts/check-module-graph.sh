#!/usr/bin/env bash
# check-module-graph: what a program that imports redlock finds in its module
# graph. A fresh consumer module imports the library and calls New; every
# module that redlock's go.mod adds to the consumer's graph must be one the
# consumer's binary compiles, apart from at most two test-only modules whose
# packages that redlock imports import only the standard library and their
# own module (the Lua interpreter of the in-process masters of the tests and
# the demo; porcupine, the linearizability checker of the fault suite).
# Fails, listing them, when that regresses.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
cat >go.mod <<EOM
module example.com/consumer

go 1.24

require github.com/redlock-go/redlock v0.0.0

replace github.com/redlock-go/redlock => $root
EOM
cat >main.go <<'EOM'
package main

import (
	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

func main() {
	_, _ = redlock.New([]redis.UniversalClient{redis.NewClient(&redis.Options{})})
}
EOM
go mod tidy
echo "A consumer's go list -m all:"
go list -m all | sed 's/^/  /'

# OpenTelemetry lives in the nested otel module: never in core's graph.
if go list -m all | grep -q '^go.opentelemetry.io/'; then
	echo "FAIL: OpenTelemetry is in a consumer's module graph" >&2
	exit 1
fi

compiled=$(go list -deps -f '{{with .Module}}{{.Path}}{{end}}' . | sort -u)
ours=$(go mod graph | awk '$1 ~ /^github.com\/redlock-go\/redlock@/ { sub(/@.*/, "", $2); print $2 }' |
	grep -vx 'go\|toolchain' | sort -u)
extra=$(comm -23 <(echo "$ours") <(echo "$compiled"))
echo "Modules redlock's go.mod adds that the consumer does not compile: ${extra:-none}"

n=$(echo -n "$extra" | grep -c . || true)
if [ "$n" -gt 2 ]; then
	echo "FAIL: $n modules, at most 2 are allowed" >&2
	exit 1
fi
cd "$root"
for m in $extra; do
	# Every package of that module that redlock's packages and tests use
	# may import only the standard library and its own module.
	bad=$(go list -deps -test -f '{{if .Module}}{{.Module.Path}}|{{.ImportPath}}|{{join .Imports " "}}{{end}}' ./... |
		awk -F'|' -v m="$m" '$1 == m { n = split($3, imps, " "); for (i = 1; i <= n; i++) {
			first = imps[i]; sub(/\/.*/, "", first)
			if (first ~ /\./ && index(imps[i], m) != 1) print $2 " imports " imps[i] } }' | sort -u)
	if [ -n "$bad" ]; then
		echo "FAIL: $m is not standard-library-only:" >&2
		echo "$bad" >&2
		exit 1
	fi
	echo "OK: $m imports only the standard library and itself"
done
