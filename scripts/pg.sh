#!/usr/bin/env bash
# Throwaway PostgreSQL cluster: `pg.sh start DIR` prints its DATABASE_URL (last stdout line); `pg.sh stop DIR` stops it and removes DIR.
# Env: PG_PRELOAD=pg_stat_statements loads that library into a new cluster (`make profile`'s per-statement table).
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
cmd="$1"; mkdir -p "$2"; dir="$(cd "$2" && pwd)"
marker="$dir/.pg.sh"

bin="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n1)"
[[ -x "$bin/initdb" ]] || bin="$(dirname "$(command -v initdb || echo /nonexistent/initdb)")"
[[ -x "$bin/initdb" ]] || { echo "pg.sh: PostgreSQL server binaries not found (apt-get install postgresql)" >&2; exit 1; }

# initdb refuses to run as root: run the server as the postgres user then.
as_pg() { if [[ $EUID -eq 0 ]]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }
running() { [[ -f "$dir/data/PG_VERSION" ]] && as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; }

case "$cmd" in
start)
  if running && [[ -f "$dir/url" ]]; then cat "$dir/url"; exit 0; fi   # already up
  [[ -f "$marker" ]] || [[ -z "$(ls -A "$dir")" ]] || { echo "pg.sh: $dir is not empty and not ours" >&2; exit 1; }
  touch "$marker"
  if [[ $EUID -eq 0 ]]; then chown postgres: "$dir"; chmod 700 "$dir"; fi
  as_pg test -w "$dir" || { echo "pg.sh: $dir is not writable by user postgres (pick a dir under /tmp)" >&2; exit 1; }
  if [[ ! -f "$dir/data/PG_VERSION" ]]; then
    as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    as_pg tee -a "$dir/data/postgresql.conf" >/dev/null <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
    if [[ -n "${PG_PRELOAD:-}" ]]; then
      {
        printf "shared_preload_libraries = '%s'\n" "$PG_PRELOAD"
        [[ "$PG_PRELOAD" != *pg_stat_statements* ]] || echo "pg_stat_statements.track_planning = on"
      } | as_pg tee -a "$dir/data/postgresql.conf" >/dev/null
    fi
  fi
  for _ in 1 2 3; do   # a free port can be taken between picking and binding: retry
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    if as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -o "-p $port" -w -t 60 start >/dev/null; then break; fi
    port=""
  done
  [[ -n "$port" ]] || { tail -n 20 "$dir/server.log" >&2; echo "pg.sh: could not start PostgreSQL" >&2; exit 1; }
  psql=("$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres)
  as_pg "${psql[@]}" -c "CREATE ROLE guarded LOGIN SUPERUSER" 2>/dev/null || true
  as_pg "${psql[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = 'guarded'" | grep -q 1 \
    || as_pg "${psql[@]}" -c "CREATE DATABASE guarded OWNER guarded"
  echo "postgres://guarded@127.0.0.1:$port/guarded" | as_pg tee "$dir/url"
  ;;
stop)
  if running; then as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null; fi
  if [[ -f "$marker" ]] || [[ -z "$(ls -A "$dir")" ]]; then rm -rf "$dir"; else echo "pg.sh: not removing $dir (not ours)" >&2; exit 1; fi
  ;;
*) usage ;;
esac
