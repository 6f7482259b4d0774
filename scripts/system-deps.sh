#!/usr/bin/env bash
# Installs what mysqlclient needs to build (MariaDB client headers and pkg-config), if missing.
set -euo pipefail
if pkg-config --exists mariadb 2>/dev/null || pkg-config --exists mysqlclient 2>/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "mysqlclient needs the MariaDB/MySQL client headers: install libmariadb-dev and pkg-config" >&2
  exit 1
fi
echo "installing libmariadb-dev and pkg-config for mysqlclient" >&2
apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q libmariadb-dev pkg-config build-essential >/dev/null
