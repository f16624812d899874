#!/usr/bin/env bash
# Makes sure redis-server is on PATH for the integration tests: installs it
# from Debian's packages when it is missing and we can, fails loudly when not.
set -euo pipefail
if [ -n "${REDIS_SERVER:-}" ] || command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
if command -v apt-get >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  echo "redis-server is missing: installing it with apt-get" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
  exit 0
fi
echo "redis-server is missing: install it (brew install redis, or your distribution's redis package) or set REDIS_SERVER" >&2
exit 1
