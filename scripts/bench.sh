#!/usr/bin/env bash
# The benchmarks (`make bench`): wrk from Debian if missing, .venv-bench (scripts/venv.sh bench: requirements-bench.txt,
# FastMCP 4 and django-mcpz for the peer table among them; never the tests' .venv), a throwaway PostgreSQL,
# then bench/run.py.
# `scripts/bench.sh profile [ARGS]` runs bench/profile.py's stage table instead (`make profile`).
# Args go to bench/run.py (`make bench` passes none; `scripts/bench.sh --quick` is a one-round smoke run).
# `scripts/bench.sh --against REF` measures this checkout and REF's (a temporary git worktree) side by side
# in the same rounds (bench/sidebyside.py; issue 26).
# Env: DATABASE_URL=... benchmarks that PostgreSQL instead of a throwaway cluster (its database is written to).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if ! command -v wrk >/dev/null; then
  echo "bench.sh: installing wrk (Debian package)" >&2
  if [[ $EUID -eq 0 ]]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq wrk >/dev/null
  else
    echo "bench.sh: wrk is missing and this is not root: sudo apt-get install wrk" >&2; exit 1
  fi
fi

scripts/venv.sh bench

if [[ -z "${DATABASE_URL:-}" ]]; then
  pgdir="$(mktemp -d /tmp/guarded-bench-pg.XXXXXX)"  # under /tmp: user postgres must reach it
  trap 'scripts/pg.sh stop "$pgdir" >/dev/null 2>&1 || true' EXIT
  trap 'exit 130' INT TERM
  # make profile's cluster loads pg_stat_statements: its table of each statement's execution and planning
  preload=""; [[ "${1:-}" == profile ]] && preload=pg_stat_statements
  DATABASE_URL="$(PG_PRELOAD="$preload" scripts/pg.sh start "$pgdir" | tail -n1)"
  export DATABASE_URL
fi

if [[ "${1:-}" == profile ]]; then
  shift
  DJANGO_SETTINGS_MODULE=bench.settings CONN_MAX_AGE=600 DJANGO_DEBUG=0 \
    .venv-bench/bin/python -m bench.prepare >/dev/null
  env DJANGO_SETTINGS_MODULE=bench.settings CONN_MAX_AGE=600 DJANGO_DEBUG=0 \
    .venv-bench/bin/python -m bench.profile stages "$@"
  exit
fi
.venv-bench/bin/python bench/run.py "$@"
