#!/usr/bin/env bash
# What the tests need from the system, beyond Python: Debian's Chromium (the browser tests
# drive it with Playwright; no browser is ever downloaded) and promtool (from the prometheus
# package; the metrics tests check the exposition with it). Installed with apt when missing,
# as root or through sudo.
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v promtool >/dev/null || missing+=(prometheus)
[ ${#missing[@]} -eq 0 ] && exit 0
as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
