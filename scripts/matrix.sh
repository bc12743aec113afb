#!/usr/bin/env bash
# The deployment matrix (`make matrix`, run by CI after `make test`): tests/matrix/ once per row, each a settings module
# (tests/matrix/settings_*.py) on the services this script starts on loopback: a throwaway PostgreSQL and PgBouncer.
# Args go to every pytest run. Env: GT_MATRIX_ROWS="label ..." runs only those rows; GT_MATRIX_VENV, GT_MATRIX_VENV_DJ52
# and GT_MATRIX_VENV_PG2 use those virtualenvs as they are (default: .venv, .venv-dj52, .venv-pg2, set up here);
# GT_MATRIX_PG_DIR=DIR uses the cluster `scripts/pg.sh start DIR` runs (its url, its server.log) instead of a new one.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
pytest_args=("$@")

# label | virtualenv (main, dj52, pg2) | settings module tests.matrix.settings_<name> | database (sqlite, pg, pgbouncer)
rows=(
  "django6-sqlite              main default         sqlite"
  "django6-pg                  main default         pg"
  "django6-pool                main pool            pg"
  "django6-pool-discard-all    main pool_discard    pg"
  "django6-server-side-binding main server_binding  pg"
  "django6-pgbouncer           main pgbouncer       pgbouncer"
  "django6-pgbouncer-plain     main pgbouncer_plain pgbouncer"
  "django6-uuid-users-sqlite   main uuid_users      sqlite"
  "django6-uuid-users-pg       main uuid_users      pg"
  "django6-two-backends-pg     main two_backends    pg"
  "django6-atomic-requests-pg  main atomic_requests pg"
  "django6-repeatable-read     main repeatable_read pg"
  "django6-serializable        main serializable    pg"
  "django6-psycopg2            pg2  default         pg"
  "django52-sqlite             dj52 default         sqlite"
  "django52-pg                 dj52 default         pg"
  "django52-pool               dj52 pool            pg"
)

wanted=" ${GT_MATRIX_ROWS:-} "
selected() { [[ -z "${GT_MATRIX_ROWS:-}" || "$wanted" == *" $1 "* ]]; }
needs() {  # needs WORD: whether a selected row uses that virtualenv or database
  local row label venv module db
  for row in "${rows[@]}"; do
    read -r label venv module db <<<"$row"
    if selected "$label" && [[ " $venv $db " == *" $1 "* ]]; then return 0; fi
  done
  return 1
}

declare -A venvs=([main]="${GT_MATRIX_VENV:-}" [dj52]="${GT_MATRIX_VENV_DJ52:-}" [pg2]="${GT_MATRIX_VENV_PG2:-}")
declare -A dirs=([main]=.venv [dj52]=.venv-dj52 [pg2]=.venv-pg2)
for name in main dj52 pg2; do
  needs "$name" || continue
  [[ -n "${venvs[$name]}" ]] && continue
  scripts/venv.sh "$name" || { echo "matrix.sh: could not set up ${dirs[$name]}" >&2; exit 1; }
  venvs[$name]="${dirs[$name]}"
  if [[ "$name" != pg2 ]]; then  # Django's psycopg pool rows: psycopg-pool on top, as bench.sh adds its own
    marker="${dirs[$name]}/.requirements-matrix.sha256"
    want="$(sha256sum requirements-matrix.txt | cut -d' ' -f1)"
    if [[ "$(cat "$marker" 2>/dev/null)" != "$want" ]]; then
      installer=("${dirs[$name]}/bin/python" -m pip install --disable-pip-version-check)  # uv where venv.sh put it
      [[ -x "${dirs[$name]}/bin/uv" ]] && installer=("${dirs[$name]}/bin/uv" pip install --python "${dirs[$name]}/bin/python")
      "${installer[@]}" -q -r requirements-matrix.txt \
        || { echo "matrix.sh: could not install requirements-matrix.txt" >&2; exit 1; }
      echo "$want" >"$marker"
    fi
  fi
done

# Everything below lives in one temp dir (under /tmp: user postgres must reach it), removed on exit.
work="$(mktemp -d /tmp/guarded-matrix.XXXXXX)"
bouncer_pid=""
own_cache=""
cleanup() {
  [[ -n "$own_cache" ]] && DATABASE_URL="$pg_url" "${venvs[main]:-.venv}/bin/python" -m tests.dbcache clean "$own_cache"
  [[ -n "$bouncer_pid" ]] && kill "$bouncer_pid" 2>/dev/null
  [[ -d "$work/pg" ]] && scripts/pg.sh stop "$work/pg" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# The migrated test databases (tests/dbcache.py): the caller's GT_TEST_DB_CACHE (.ci/run's, which
# make test filled), else one of our own; a row copies its kind's, but for the rows whose settings
# say GT_TEST_FRESH_MIGRATIONS (PgBouncer, server-side binding: they could change what a migration
# does), each migrating on its own as before.
if [[ -z "${GT_TEST_DB_CACHE:-}" ]]; then own_cache="$work/dbcache"; export GT_TEST_DB_CACHE="$own_cache"; fi
pg_url=""
as_pg() { if [[ $EUID -eq 0 ]]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }
[[ $EUID -eq 0 ]] && chmod 755 "$work"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

pg_url="" bouncer_url="" pg_log=""
if needs pg || needs pgbouncer; then
  if [[ -n "${GT_MATRIX_PG_DIR:-}" ]]; then  # the caller's cluster (.ci/run's, shared with make test)
    pg_url="$(cat "$GT_MATRIX_PG_DIR/url")" || { echo "matrix.sh: no cluster in $GT_MATRIX_PG_DIR" >&2; exit 1; }
    pg_log="$GT_MATRIX_PG_DIR/server.log"
  else
    pg_url="$(scripts/pg.sh start "$work/pg" | tail -n1)" || { echo "matrix.sh: PostgreSQL did not start" >&2; exit 1; }
    pg_log="$work/pg/server.log"
  fi
fi
if needs pgbouncer; then
  bin="$(command -v pgbouncer || echo /usr/sbin/pgbouncer)"
  [[ -x "$bin" ]] || { echo "matrix.sh: pgbouncer not found (apt-get install pgbouncer)" >&2; exit 1; }
  mkdir -p "$work/bouncer"; [[ $EUID -eq 0 ]] && chown postgres: "$work/bouncer"
  pg_port="${pg_url##*:}"; pg_port="${pg_port%%/*}"
  port="$(free_port)"
  as_pg tee "$work/bouncer/pgbouncer.ini" >/dev/null <<INI
[databases]
* = host=127.0.0.1 port=$pg_port
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $work/bouncer/userlist.txt
pool_mode = transaction
max_client_conn = 200
default_pool_size = 40
ignore_startup_parameters = extra_float_digits,options
logfile = $work/bouncer/pgbouncer.log
pidfile = $work/bouncer/pgbouncer.pid
INI
  echo '"guarded" ""' | as_pg tee "$work/bouncer/userlist.txt" >/dev/null
  as_pg "$bin" -d "$work/bouncer/pgbouncer.ini" || { echo "matrix.sh: pgbouncer did not start" >&2; exit 1; }
  for _ in $(seq 100); do  # bounded: up to 10 s for it to listen
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  bouncer_pid="$(cat "$work/bouncer/pgbouncer.pid")"
  bouncer_url="postgres://guarded@127.0.0.1:$port/guarded"
fi

results=(); failed=0; start=$SECONDS
for row in "${rows[@]}"; do
  read -r label venv module db <<<"$row"
  selected "$label" || continue
  env=(-u DATABASE_URL -u GT_MATRIX_PG_LOG -u GT_MATRIX_DRIVER -u PYTHONDONTWRITEBYTECODE  # as test.sh says
       GT_VAR_DIR="$work/var-$label" DJANGO_SETTINGS_MODULE="tests.matrix.settings_$module")
  extra=()
  case "$db" in
    sqlite) ;;
    pg) env+=(DATABASE_URL="$pg_url" GT_MATRIX_PG_LOG="$pg_log") ;;
    # Through the pooler the test database is kept (--reuse-db): DROP DATABASE would find
    # the pooler's idle server connections to it. The cluster goes at the end anyway.
    pgbouncer) env+=(DATABASE_URL="$bouncer_url" GT_MATRIX_PG_LOG="$pg_log"); extra=(--reuse-db) ;;
  esac
  [[ "$venv" == pg2 ]] && env+=(GT_MATRIX_DRIVER=psycopg2)
  printf '\n== matrix: %s ==\n' "$label"
  began=$SECONDS
  # (hypothesis's plugin left out too: no guarantee uses it, and it costs each row seconds to load)
  env "${env[@]}" "${venvs[$venv]}/bin/python" -m pytest tests/matrix -q -p no:cacheprovider -p no:hypothesispytest \
    "${extra[@]}" "${pytest_args[@]}"
  rc=$?
  took="$((SECONDS - began)) s"
  if [[ $rc -eq 0 ]]; then results+=("ok      $label ($took)"); else results+=("FAILED  $label (exit $rc, $took)"); failed=1; fi
done

printf '\n== matrix.sh summary (%d s) ==\n' "$((SECONDS - start))"; printf '  %s\n' "${results[@]}"
exit "$failed"
