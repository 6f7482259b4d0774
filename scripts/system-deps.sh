#!/usr/bin/env bash
# Installs the system packages the build and the tests need, if missing: what mysqlclient needs to
# build (MariaDB client headers and pkg-config), and Debian's haproxy for the load-balancer test
# (tests/ops/test_web_failover.py runs deploy/haproxy/haproxy.cfg; no HAProxy is left running),
# and nftables for the cluster drill.
set -euo pipefail
missing=()
if ! pkg-config --exists mariadb 2>/dev/null && ! pkg-config --exists mysqlclient 2>/dev/null; then
  missing+=(libmariadb-dev pkg-config build-essential)
fi
if [ ! -x /usr/sbin/haproxy ] && ! command -v haproxy >/dev/null; then
  missing+=(haproxy)
fi
# nft freezes the paths between the cluster drill's hosts (chaos/cluster/, make cluster-drill).
if [ ! -x /usr/sbin/nft ] && ! command -v nft >/dev/null; then
  missing+=(nftables)
fi
# redis-sentinel for the failover test (tests/test_redis_failover.py: a primary, a replica and
# three sentinels of its own, on free ports; the package's own service is left stopped).
if ! command -v redis-sentinel >/dev/null; then
  missing+=(redis-sentinel)
fi
if [ ${#missing[@]} = 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "missing system packages: install ${missing[*]} (Debian names), or run $0 as root" >&2
  exit 1
fi
echo "installing ${missing[*]}" >&2

# haproxy's postinst starts the service (on :80): a policy-rc.d answering 101 ("action
# forbidden") stops that; ours exists only for this install, one already there is left as it is.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# scripts/system-deps.sh: no service starts during its install\nexit 101\n' \
    >"$policy"
  chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi

apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null

# Whatever the policy said, leave no load balancer or sentinel running and none starting at the
# next boot.
for service in haproxy redis-sentinel; do
  if [[ " ${missing[*]} " == *" $service "* ]]; then
    if [ -d /run/systemd/system ]; then
      systemctl disable --now "$service.service" >/dev/null 2>&1 || true
    else
      service "$service" stop >/dev/null 2>&1 || true
      update-rc.d "$service" disable >/dev/null 2>&1 || true
    fi
  fi
done
