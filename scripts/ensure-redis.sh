#!/usr/bin/env bash
# Makes sure what the real-server tests need is installed: redis-server on
# PATH, the libraries of the fault suite's clock jump (libfaketime,
# libtcmalloc-minimal4), and a headless Chromium for the demo's timeline
# page test (Debian's chromium-headless-shell; a full chromium does too).
# Installs them from Debian's packages when they are missing and we can. A
# missing redis-server fails loudly; without the clock libraries the suite
# falls back to shaving TTLs, and without Chromium the page test is skipped
# (but fails under CI=true).
set -euo pipefail
need=()
if [ -z "${REDIS_SERVER:-}" ] && ! command -v redis-server >/dev/null 2>&1; then
  need+=(redis-server)
fi
if command -v dpkg >/dev/null 2>&1; then
  if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-headless-shell >/dev/null 2>&1; then
    need+=(chromium-headless-shell)
  fi
  for p in libfaketime libtcmalloc-minimal4; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
fi
[ ${#need[@]} -eq 0 ] && exit 0
if command -v apt-get >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  echo "installing with apt-get: ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
  exit 0
fi
if [[ " ${need[*]} " == *" redis-server "* ]]; then
  echo "redis-server is missing: install it (brew install redis, or your distribution's redis package) or set REDIS_SERVER" >&2
  exit 1
fi
