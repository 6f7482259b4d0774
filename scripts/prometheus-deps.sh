#!/usr/bin/env bash
# Installs Debian's prometheus package for its promtool (the tests check the metrics, the alert
# rules and the example config with it), if missing. Only promtool is wanted: no Prometheus
# server is left running.
set -euo pipefail
if [ -x /usr/bin/promtool ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "the monitoring tests need promtool: install Debian's prometheus package" \
    "(apt-get install --no-install-recommends prometheus) or run scripts/prometheus-deps.sh as root" >&2
  exit 1
fi
echo "installing prometheus (for promtool) for the monitoring tests" >&2

# The package's postinst starts the server (invoke-rc.d without systemd, deb-systemd-invoke with
# it) and fails the whole install when that start fails. A policy-rc.d answering 101 ("action
# forbidden") makes both skip the start; ours exists only for this install. Docker images often
# ship one already: that one is left as it is.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# scripts/prometheus-deps.sh: no service starts during its install\nexit 101\n' \
    >"$policy"
  chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi

apt-get update -q >/dev/null
# Without recommends: prometheus-node-exporter would be one more server.
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null

# Whatever the policy said, leave no server behind and none starting at the next boot.
if [ -d /run/systemd/system ]; then
  systemctl disable --now prometheus.service >/dev/null 2>&1 || true
else
  service prometheus stop >/dev/null 2>&1 || true
  update-rc.d prometheus disable >/dev/null 2>&1 || true
fi

if [ ! -x /usr/bin/promtool ]; then
  echo "the prometheus package did not install /usr/bin/promtool" >&2
  exit 1
fi
if command -v ss >/dev/null && ss -ltnpH 'sport = :9090' | grep -q '"prometheus"'; then
  echo "a Prometheus server still listens on :9090: stop it (service prometheus stop)" >&2
  exit 1
fi
