#!/usr/bin/env bash
# Starts MariaDB, PostgreSQL and Redis on this machine if they are not answering (commands from the
# env notes; PostgreSQL for make test-postgres, Debian's cluster 15 main).
set -uo pipefail
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "starting redis" >&2
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi
if ! mysqladmin -h 127.0.0.1 -u root ping >/dev/null 2>&1; then
  echo "starting mariadb" >&2
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
fi
if command -v pg_isready >/dev/null && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "starting postgresql" >&2
  pg_ctlcluster 15 main start
fi
for _ in $(seq 1 60); do
  if redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && mysqladmin -h 127.0.0.1 -u root ping >/dev/null 2>&1 \
    && { ! command -v pg_isready >/dev/null || pg_isready -q -h 127.0.0.1 -p 5432; }; then
    exit 0
  fi
  sleep 1
done
echo "redis, mariadb or postgresql did not come up" >&2
exit 1
