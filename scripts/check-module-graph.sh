#!/usr/bin/env bash
# check-module-graph: what a program that imports redlock compiles. A fresh
# consumer module imports the library and calls New; the modules whose
# packages its binary compiles must be the library's own dependencies of
# today: go-redis (and what it compiles), google/uuid and
# hashicorp/go-multierror (with errwrap). Fails, listing them, when one is
# added. The modules of the library's tests and of its test kit
# (redlocktest: miniredis, gopher-lua; goleak, porcupine) may be listed in
# a consumer's module graph: they are compiled only into the tests that
# import redlocktest, and Go's graph pruning keeps a consumer from loading
# their own requirements. OpenTelemetry lives in the nested otel module, and
# the rueidis, valkey-go and redigo adapters in nested modules of their own:
# never in the core's graph at all.
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

# The other drivers' adapters live in nested modules (drivers/*): their
# client libraries never in core's graph.
if go list -m all | grep -E '^(github.com/redis/rueidis|github.com/valkey-io/|github.com/gomodule/redigo) '; then
	echo "FAIL: another driver's client library is in a consumer's module graph" >&2
	exit 1
fi

compiled=$(go list -deps -f '{{with .Module}}{{.Path}}{{end}}' . | grep -vx 'example.com/consumer' | sort -u)
echo "Modules a consumer's binary compiles:"
echo "$compiled" | sed 's/^/  /'
allowed='github.com/redlock-go/redlock
github.com/redis/go-redis/v9
github.com/cespare/xxhash/v2
go.uber.org/atomic
golang.org/x/sys
github.com/google/uuid
github.com/hashicorp/go-multierror
github.com/hashicorp/errwrap'
added=$(comm -23 <(echo "$compiled") <(echo "$allowed" | sort -u))
if [ -n "$added" ]; then
	echo "FAIL: redlock now compiles these into its importers:" >&2
	echo "$added" | sed 's/^/  /' >&2
	exit 1
fi
echo "OK: nothing beyond go-redis, uuid and go-multierror, and what they need"
