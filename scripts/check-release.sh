#!/usr/bin/env bash
# check-release: the modules as a user fetches them at the release being
# prepared (docs/release.md). Two fresh consumer modules, outside the
# repository, each require one module at $version, as go get would (core:
# github.com/redlock-go/redlock; otel: github.com/redlock-go/redlock/otel),
# let go mod tidy add the rest, and build, vet and run a small program.
# Their go.mod replaces this repository's modules at $version, and only at
# that version, by this checkout's directories, as a user would replace the
# tags; nothing in the repository changes. So this fails when a nested module
# requires the core at another version than the release (the zero
# pseudo-version of a module that relied on its own replace): go then asks
# the module proxy for that version, which it does not serve.
#
# No checksum trick is needed: a module replaced by a directory has no
# checksum, and go never asks the proxy or the checksum database about it,
# so GONOSUMDB, GOPRIVATE or GOFLAGS=-mod=mod would change nothing. go mod
# tidy writes the consumer's go.sum for the other modules, from the proxy or
# the module cache. GOWORK=off keeps a developer's workspace out of it.
#
# Given the nested modules' directories, it also checks that their go.mod
# files have no replace and require this repository's modules at $version.
#
# Prints each consumer's go list -m all, what a go get of that module brings
# into a user's module graph, and the modules its binary compiles (quoted in
# docs/release.md).
set -euo pipefail
version=v0.1.0 # the release being prepared: bump it with the nested modules' requires
root=$(cd "$(dirname "$0")/.." && pwd)
core=github.com/redlock-go/redlock
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GOWORK=off
modules="$core $core/otel" # the published ones: the release's tags

# The nested modules named as arguments (the Makefile's NESTED): no replace
# (a user's go command ignores it, and go run <package>@<version> refuses a
# module with one), and this repository's modules required at $version.
for d in "$@"; do
	bad=$(awk -v core="$core" -v version="$version" '
		$1 == "replace" { print "  a replace directive"; next }
		$1 == "require" && $2 == "(" { block = 1; next }
		block && $1 == ")" { block = 0; next }
		$1 == "require" { p = $2; v = $3 } block { p = $1; v = $2 }
		($1 == "require" || block) && (p == core || index(p, core "/") == 1) && v != version { print "  " p " " v }
	' "$root/$d/go.mod")
	if [ -n "$bad" ]; then
		printf 'FAIL: %s/go.mod has, where a user needs %s and no replace:\n%s\n' "$d" "$version" "$bad" >&2
		exit 1
	fi
done

# consumer <name> <module> <program>: a module in $tmp/<name> that requires
# <module> at $version, as go get would, and lets go mod tidy add what the
# program imports beside it at the versions <module> requires.
consumer() {
	local dir=$tmp/$1 m
	mkdir "$dir"
	printf 'module example.com/consumer\n\ngo 1.24\n' >"$dir/go.mod"
	printf '%s' "$3" >"$dir/main.go"
	cd "$dir"
	go mod edit -require="$2@$version"
	for m in $modules; do
		go mod edit -replace="$m@$version=$root${m#"$core"}"
	done
	go mod tidy
	echo "A consumer of $2 $version, its go list -m all:"
	go list -m all | sed 's/^/  /'
	# The release's versions, and only those, replaced by this checkout.
	if go list -m all | grep -E "^$core(/| |\$)" | grep -v " $version => $root"; then
		echo "FAIL: a module of this repository at another version than $version" >&2
		exit 1
	fi
	echo "Modules its binary compiles:"
	go list -deps -f '{{with .Module}}{{.Path}}{{end}}' . | grep -vx example.com/consumer | sort -u | sed 's/^/  /'
	go vet .
	go build -o consumer .
	./consumer
	cd "$root"
}

consumer core "$core" 'package main

import (
	"fmt"
	"time"

	"github.com/redlock-go/redlock"
)

func main() {
	_ = redlock.WithNodeTimeout(time.Second)
	fmt.Println("  the core builds and runs:", redlock.ErrNotObtained)
}
'

consumer otel "$core/otel" 'package main

import (
	"fmt"

	"github.com/redlock-go/redlock"
	redlockotel "github.com/redlock-go/redlock/otel"
)

func main() {
	obs, err := redlockotel.NewObserver()
	if err != nil {
		panic(err)
	}
	_ = redlock.WithObserver(obs)
	fmt.Println("  the core and otel build and run: an observer made")
}
'
echo "OK: the core and otel at $version build for a consumer, with replaces in its go.mod alone${*:+; $* require $version, no replace}"
