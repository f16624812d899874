#!/usr/bin/env bash
# Smoke test of docker-compose.yml: start the five masters, run the demo
# against them, stop one and run it again, check both summaries, tear down.
#
# No container registry is needed: the image is built FROM scratch out of the
# machine's own redis-server and redis-cli binaries (scripts/ensure-redis.sh
# installs them) and selected with REDIS_IMAGE. Without a Docker engine the
# test says so and passes.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
  echo "compose smoke test: no Docker engine here, skipped"
  exit 0
fi
if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose)
else
  echo "compose smoke test: Docker engine but no compose tool, skipped"
  exit 0
fi
scripts/ensure-redis.sh

image=redlock-redis:local
ctx=$(mktemp -d)
project=redlocksmoke
cleanup() {
  "${compose[@]}" -p "$project" down -v >/dev/null 2>&1 || true
  rm -rf "$ctx"
}
trap cleanup EXIT

# A minimal root file system: the two binaries and the libraries they load.
mkdir -p "$ctx/rootfs/data" "$ctx/rootfs/tmp" "$ctx/rootfs/usr/bin"
for bin in redis-server redis-cli; do
  path=$(command -v "$bin")
  cp -L "$path" "$ctx/rootfs/usr/bin/$bin"
  for lib in $(ldd "$path" | grep -o '/[^ ]*'); do
    mkdir -p "$ctx/rootfs$(dirname "$lib")"
    cp -L "$lib" "$ctx/rootfs$lib"
  done
done
cat > "$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/bin
WORKDIR /data
DOCKERFILE
docker build -q -t "$image" "$ctx" >/dev/null
echo "compose smoke test: built $image from $(redis-server --version | cut -d' ' -f3)"

export REDIS_IMAGE=$image
"${compose[@]}" -p "$project" up -d
for port in 7001 7002 7003 7004 7005; do
  for _ in $(seq 100); do
    [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
    sleep 0.1 # polling containers we do not control; no signal exists
  done
  [ "$(redis-cli -p "$port" ping)" = PONG ] || { echo "FAIL: master on $port does not answer PONG"; exit 1; }
done

nodes=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005
check() { # summary-file phase
  grep -q "max concurrent holders:   1$" "$1" || { cat "$1"; echo "FAIL ($2): max concurrent holders is not 1"; exit 1; }
  acquired=$(sed -n 's/^  acquisitions: *\([0-9]*\)$/\1/p' "$1")
  [ "${acquired:-0}" -gt 0 ] || { cat "$1"; echo "FAIL ($2): no acquisitions"; exit 1; }
  grep -q "lost updates: 0)" "$1" || { cat "$1"; echo "FAIL ($2): lost updates"; exit 1; }
  echo "compose smoke test: $2: $acquired acquisitions, max concurrent holders 1"
}
out=$(mktemp)
go run ./cmd/redlock-demo -nodes "$nodes" -duration 3s -quiet >"$out"
check "$out" "five masters up"

# The restart guard keeps a fresh deployment with a master down from taking
# locks until its memory markers are older than the guard (a minute by
# default: the missing master could be the one that remembers). This phase
# is about an established deployment, so the markers are aged by an hour
# first, as the test suite does (ageMemory in helpers_test.go).
for port in 7001 7002 7003 7004 7005; do
  now_ms=$(redis-cli -p "$port" TIME | head -1)000
  redis-cli -p "$port" SET redlock:memory "$((now_ms - 3600000)) 0" >/dev/null
done
"${compose[@]}" -p "$project" stop redis3 >/dev/null 2>&1
go run ./cmd/redlock-demo -nodes "$nodes" -duration 3s -quiet >"$out"
check "$out" "redis3 stopped"
rm -f "$out"
echo "compose smoke test: passed"
