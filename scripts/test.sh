#!/usr/bin/env bash
# The test command (`make test`): pytest on Django 6 and 5.2, each on SQLite and PostgreSQL; args go to every pytest run.
# Env: DATABASE_URL=... uses that PostgreSQL instead of a throwaway cluster; GT_TEST_QUICK=1 skips Django 5.2; CI=true makes PostgreSQL mandatory;
# GT_TEST_DB_CACHE=DIR keeps the migrated test databases there (default: a directory of this run's, removed at the end);
# GT_TEST_DATABASE_ONLY, GT_TEST_NO_DATABASE, GT_TEST_ONCE_DONE, GT_TEST_NO_BROWSER and GT_TEST_DJANGO6_DONE are set here per run (see below) and cleared from the caller's environment;
# GT_TEST_WORKERS=N runs each pytest run on N pytest-xdist workers (default `auto`: one per core; 0: in this process).
# PYTHONDONTWRITEBYTECODE is cleared for the runs: without __pycache__ every pytest process (each xdist worker, each
# child a test starts) compiles the project and rewrites every test module again (measured: 26 s of CPU to collect
# the suite, 8 s with the bytecode written; django.setup() in a child 3.0 s, 2.0 s).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1

results=(); failed=0
run() {  # run LABEL VENV ENV-ARGS... : one pytest run, result recorded (exit 5 "no tests" counts as failure)
  local label="$1" venv="$2" rc; shift 2
  printf '\n== pytest: %s ==\n' "$label"
  env -u GT_TEST_DATABASE_ONLY -u GT_TEST_NO_DATABASE -u GT_TEST_ONCE_DONE -u GT_TEST_NO_BROWSER -u GT_TEST_DJANGO6_DONE -u PYTHONDONTWRITEBYTECODE "$@" "$venv/bin/python" -m pytest "${xdist[@]}" "${pytest_args[@]}"; rc=$?
  if [[ $rc -eq 0 ]]; then results+=("ok      $label"); else results+=("FAILED  $label (exit $rc)"); failed=1; fi
}
pytest_args=("$@")

# Each worker has its own test database (SQLite: a file per process; PostgreSQL: pytest-django's
# suffix per worker). loadgroup keeps the tests marked xdist_group(NAME) on one worker, in order.
workers="${GT_TEST_WORKERS:-auto}"
[[ "$workers" == auto ]] && workers="$(nproc 2>/dev/null || echo 1)"
[[ "$workers" =~ ^[0-9]+$ ]] || { echo "test.sh: GT_TEST_WORKERS must be a number or auto" >&2; exit 2; }
xdist=(-n "$workers" --dist loadgroup)

scripts/venv.sh main || { echo "test.sh: could not set up .venv" >&2; exit 1; }
# The Node clients' packages, once, before the workers start (each would else run npm ci itself).
if command -v npm >/dev/null; then
  scripts/npm.sh tests/integration/js tests/integration/conformance || echo "test.sh: WARNING: npm ci failed; the Node tests say why" >&2
fi

# PostgreSQL: the given DATABASE_URL, else a throwaway cluster removed on exit.
# GT_TEST_DB_CACHE: the migrated test databases every later process of the same kind copies
# (tests/dbcache.py); the caller's (.ci/run shares one with make matrix), else one of our own.
pg_url="${DATABASE_URL:-}" pgdir="" own_cache=""
cleanup() {
  [[ -n "$own_cache" ]] && DATABASE_URL="$pg_url" .venv/bin/python -m tests.dbcache clean "$own_cache"
  [[ -n "$pgdir" ]] && { scripts/pg.sh stop "$pgdir" >/dev/null 2>&1 || true; }
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [[ -z "${GT_TEST_DB_CACHE:-}" ]]; then
  own_cache="$(mktemp -d /tmp/guarded-dbcache.XXXXXX)"; export GT_TEST_DB_CACHE="$own_cache"
fi
if [[ -z "$pg_url" ]]; then
  pgdir="$(mktemp -d /tmp/guarded-pg.XXXXXX)"  # under /tmp: user postgres must reach it
  pg_url="$(scripts/pg.sh start "$pgdir" | tail -n1)" || pg_url=""
fi
if [[ -z "$pg_url" ]]; then
  if [[ "${CI:-}" == true ]]; then
    echo "test.sh: ERROR: PostgreSQL could not be started, and CI requires the PostgreSQL runs" >&2
    results+=("FAILED  PostgreSQL could not be started"); failed=1
  else
    echo "test.sh: WARNING: PostgreSQL could not be started; skipping PostgreSQL runs" >&2
    results+=("SKIPPED PostgreSQL runs (no server)")
  fi
fi

# Each test runs on every database it reaches under Django 6, and at least once under Django 5.2:
# a PostgreSQL run leaves out the tests that reach no database (the same Django's SQLite run
# runs them: GT_TEST_DATABASE_ONLY); Django 5.2's SQLite run leaves out those that reach one,
# but for the ones about SQLite itself (marked `sqlite`), when its PostgreSQL run runs them
# (GT_TEST_NO_DATABASE: the full suite on both databases twice cost a CI run about 300 s of
# CPU for one combination Django 6 and the deployment matrix's django52-sqlite row cover);
# the runs after the first leave out the tests marked `once` (GT_TEST_ONCE_DONE): see tests/conftest.py.
# The browser tests (Chromium and a live server per test: about a tenth of a run's CPU) run once
# per Django version and once per database when all four runs happen: Django 6 on SQLite,
# Django 5.2 on PostgreSQL (GT_TEST_NO_BROWSER in Django 6's PostgreSQL run; it keeps those marked
# django6_only, which Django 5.2's environment cannot run). The server side of
# each page also runs on both databases under Django 6 through the admin's and the HTTP tests.
# Django 5.2's runs leave out the tests marked one_django (GT_TEST_DJANGO6_DONE), whose result
# does not depend on Django's version: the browser tests of pages that are not Django's admin
# (the admin's CSS and scripts differ between 5.2 and 6; its browser tests keep both) and the
# multi-node run (about 64 s and 28 s of CPU of Django 5.2's PostgreSQL run).
on_pg=(DATABASE_URL="$pg_url" GT_TEST_DATABASE_ONLY=1)
browser_elsewhere=()
[[ "${GT_TEST_QUICK:-}" == 1 ]] || browser_elsewhere=(GT_TEST_NO_BROWSER=1)
run "Django 6 / SQLite" .venv -u DATABASE_URL
[[ -n "$pg_url" ]] && run "Django 6 / PostgreSQL" .venv "${on_pg[@]}" GT_TEST_ONCE_DONE=1 "${browser_elsewhere[@]}"

if [[ "${GT_TEST_QUICK:-}" == 1 ]]; then
  results+=("SKIPPED Django 5.2 runs (GT_TEST_QUICK=1)")
elif scripts/venv.sh dj52; then
  if [[ -n "$pg_url" ]]; then
    run "Django 5.2 / SQLite (no database, or SQLite's own)" .venv-dj52 -u DATABASE_URL GT_TEST_NO_DATABASE=1 GT_TEST_ONCE_DONE=1 GT_TEST_DJANGO6_DONE=1
    run "Django 5.2 / PostgreSQL" .venv-dj52 "${on_pg[@]}" GT_TEST_ONCE_DONE=1 GT_TEST_DJANGO6_DONE=1
  else
    run "Django 5.2 / SQLite" .venv-dj52 -u DATABASE_URL GT_TEST_ONCE_DONE=1 GT_TEST_DJANGO6_DONE=1
  fi
else
  results+=("FAILED  could not set up .venv-dj52"); failed=1
fi

printf '\n== test.sh summary ==\n'; printf '  %s\n' "${results[@]}"
exit "$failed"
