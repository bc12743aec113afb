#!/usr/bin/env bash
# The benchmarks (`make bench`): wrk from Debian if missing, requirements-bench.txt into .venv, a throwaway PostgreSQL, then bench/run.py.
# Args go to bench/run.py (`make bench` passes none; `scripts/bench.sh --quick` is a one-round smoke run).
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

scripts/venv.sh main
marker=.venv/.requirements-bench.sha256
want="$(sha256sum requirements-bench.txt | cut -d' ' -f1)"
if [[ "$(cat "$marker" 2>/dev/null)" != "$want" ]]; then
  echo "bench.sh: installing requirements-bench.txt into .venv" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-bench.txt
  echo "$want" >"$marker"
fi

if [[ -z "${DATABASE_URL:-}" ]]; then
  pgdir="$(mktemp -d /tmp/guarded-bench-pg.XXXXXX)"  # under /tmp: user postgres must reach it
  trap 'scripts/pg.sh stop "$pgdir" >/dev/null 2>&1 || true' EXIT
  trap 'exit 130' INT TERM
  DATABASE_URL="$(scripts/pg.sh start "$pgdir" | tail -n1)"
  export DATABASE_URL
fi

.venv/bin/python bench/run.py "$@"
