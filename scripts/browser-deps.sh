#!/usr/bin/env bash
# Installs Debian's Chromium for the admin browser tests (Playwright drives it), if missing.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "the browser tests need Debian's chromium package (/usr/bin/chromium)" >&2
  exit 1
fi
echo "installing chromium for the browser tests" >&2
apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
