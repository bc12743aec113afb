#!/usr/bin/env bash
# The package as a stranger installs it, proved in a new site (`make newsite`):
#   1. build the sdist and the wheel (from a copy of the checkout's files, so the build writes
#      nothing into the checkout);
#   2. make a fresh virtualenv and install the WHEEL with only its declared dependencies (and
#      the redis extra the quickstart's broker needs); the agent's MCP client gets a
#      virtualenv of its own;
#   3. `django-admin startproject mysite`, `startapp shop`, and apply exactly the files of
#      docs/quickstart/ (the ones the docs include): the settings lines appended to
#      settings.py, urls.py, celery.py, mysite/__init__.py, shop/tools.py;
#   4. migrate, `check --deploy` (none of the app's warnings may remain), assert that
#      guarded_tools is imported from the virtualenv's site-packages, not this checkout;
#   5. serve it (runserver; a throwaway Redis as the broker and the quickstart's Celery
#      worker when redis-server exists, which must run the approvers' notifications and,
#      at the end, settle an abandoned operation by its sweep) and
#      run scripts/newsite_prove.py: a read-only call, an invalid input, a call that waits
#      for approval, the admin's pages (200 as a signed-in staff member), the approval, the
#      agent's retry, its replay, and the same tools over MCP with the official client;
#      then, where Chromium and the repository's Playwright exist, every page the app's
#      admin index links to (200), and an approval by the request page's own button, with
#      screenshots at 1280 px (scripts/newsite_browser.py).
# Options: --django 6.0|5.2 (default 6.0; 5.2 runs on Python 3.11, as CI's Django 5.2 line),
#          --database-url postgres://USER@HOST:PORT/DB (a PostgreSQL cluster: the site gets a
#            database of its own there, created and dropped here, with psycopg installed;
#            the one line it adds to settings.py after the quickstart's is printed),
#          --keep (leave the work folder for a look).
# Prints the seconds from a fresh virtualenv to the first guarded call and to the first
# approved call, and the wheel's size.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
django=6.0 keep=0 database_url=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --django) django="$2"; shift 2 ;;
    --database-url) database_url="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "usage: $0 [--django 6.0|5.2] [--database-url postgres://…] [--keep]" >&2; exit 2 ;;
  esac
done
case "$django" in
  6.0) py=3.12 ;;
  5.2) py=3.11 ;;
  *) echo "newsite.sh: --django 6.0 or 5.2 (what CI tests)" >&2; exit 2 ;;
esac
uv="$root/.venv/bin/uv"; [[ -x "$uv" ]] || uv="$(command -v uv)" \
  || { echo "newsite.sh: uv not found (scripts/venv.sh main installs it into .venv)" >&2; exit 1; }
find_python() {  # $1 = minor version; a working interpreter (as scripts/venv.sh finds it)
  local v="$1" cand
  for cand in "python$v" "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/"$v"*/bin/"python$v"; do
    if "$cand" -c 'import sys, venv' >/dev/null 2>&1; then command -v "$cand"; return 0; fi
  done
  echo "newsite.sh: no working python$v found (PATH or pyenv)" >&2; return 1
}
python="$(find_python "$py")"

work="$(mktemp -d /tmp/gt-newsite.XXXXXX)"
pids=()
cleanup() {
  local rc=$? pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  [[ -z "${db_name:-}" ]] || drop_database
  if [[ $rc -ne 0 ]]; then
    echo "newsite.sh: FAILED (exit $rc); the logs:" >&2
    tail -n 40 "$work"/*.log 2>/dev/null >&2 || true
  fi
  if [[ $keep -eq 1 ]]; then echo "newsite.sh: kept $work"; else rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT
now() { date +%s.%N; }
lap() { [[ -n "${t_venv:-}" ]] && printf 'newsite: %6.1f s  %s\n' "$(echo "$(now) - $t_venv" | bc)" "$1"; true; }
free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() {  # wait_port PORT WHAT: up to 60 s for a listener
  local i
  for ((i = 0; i < 600; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "newsite.sh: $2 never listened on port $1" >&2; return 1
}

echo "== newsite: build (Django $django, Python $py) =="
mkdir "$work/src"
( cd "$root" && git ls-files -z -co --exclude-standard ) \
  | ( cd "$root" && tar --null --ignore-failed-read -T - -cf - 2>/dev/null ) | tar -xf - -C "$work/src"
"$uv" build --quiet --out-dir "$work/dist" "$work/src"
wheel="$(ls "$work"/dist/*.whl)"
wheel_kb=$(( $(stat -c %s "$wheel") / 1024 ))
echo "newsite: $(basename "$wheel") ($wheel_kb KiB), $(basename "$(ls "$work"/dist/*.tar.gz)")"

echo "== newsite: a fresh virtualenv with the wheel =="
t_venv="$(now)"
"$uv" venv --quiet --python "$python" "$work/venv"
"$uv" pip install --quiet --python "$work/venv/bin/python" "guarded-tools[redis] @ file://$wheel" "django==$django.*"
[[ -z "$database_url" ]] || "$uv" pip install --quiet --python "$work/venv/bin/python" "psycopg[binary]>=3.1"
"$uv" venv --quiet --python "$python" "$work/agent"
"$uv" pip install --quiet --python "$work/agent/bin/python" "mcp>=2,<3"
"$uv" pip list --python "$work/venv/bin/python" 2>/dev/null | grep -iE '^(django|guarded-tools|celery|djangorestframework|redis) ' || true
t_installed="$(now)"
lap "the wheel and its dependencies installed"

echo "== newsite: startproject and the quickstart's files =="
export PATH="$work/venv/bin:$PATH"
quick="$root/docs/quickstart"
cd "$work"
django-admin startproject mysite
cd mysite
python manage.py startapp shop
cat "$quick/settings_snippet.py" >>mysite/settings.py
cp "$quick/urls.py" mysite/urls.py
cp "$quick/tools.py" shop/tools.py
# Before the Celery files: the deploy check says no Celery app is wired.
python manage.py check --deploy >"$work/check-no-celery.log" 2>&1 || true
grep -q 'guarded_tools\.W016' "$work/check-no-celery.log" \
  || { cat "$work/check-no-celery.log" >&2; echo "newsite.sh: no W016 without celery.py" >&2; exit 1; }
echo "newsite: without celery.py, check --deploy says: $(grep -o '(guarded_tools\.W016)[^:]*: *[^.]*' "$work/check-no-celery.log")"
cp "$quick/celery.py" mysite/celery.py
cp "$quick/project_init.py" mysite/__init__.py
lap "startproject, startapp, the quickstart applied"

if [[ -n "$database_url" ]]; then  # the same site on PostgreSQL, in a database of its own
  db_name="newsite_$RANDOM$RANDOM"
  db_admin() { python - "$database_url" "$1" <<'PY'
import sys, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as connection:
    connection.execute(sys.argv[2])
PY
  }
  db_admin "CREATE DATABASE $db_name"
  drop_database() { db_admin "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" || true; }
  site_url="${database_url%/*}/$db_name"
  line="DATABASES = {\"default\": {\"ENGINE\": \"django.db.backends.postgresql\", **_newsite_pg(\"$site_url\")}}"
  cat >>mysite/settings.py <<PY

# newsite.sh --database-url: PostgreSQL instead of startproject's SQLite (not the quickstart's).
def _newsite_pg(url):
    from urllib.parse import urlsplit
    u = urlsplit(url)
    return {"NAME": u.path[1:], "USER": u.username, "PASSWORD": u.password or "",
            "HOST": u.hostname, "PORT": str(u.port or 5432)}
$line
PY
  echo "newsite: on PostgreSQL, database $db_name"
fi

# A throwaway Redis, the broker the quickstart names; without redis-server the site still
# answers (tasks it cannot send are logged, and the agent's retry runs approved calls).
if command -v redis-server >/dev/null; then
  redis_port="$(free_port)"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
  pids+=("$!")
  wait_port "$redis_port" redis-server
  export CELERY_BROKER_URL="redis://127.0.0.1:$redis_port/0"
else
  echo "newsite: no redis-server here: the site runs without a reachable broker"
fi

python manage.py migrate --verbosity 0
lap "migrated"
installed="$(python -c 'import guarded_tools; print(guarded_tools.__file__)')"
site_packages="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
[[ "$installed" == "$site_packages"/* ]] \
  || { echo "newsite.sh: guarded_tools came from $installed, not $site_packages" >&2; exit 1; }
echo "newsite: guarded_tools imported from $installed"

echo "== newsite: check --deploy =="
python manage.py check --deploy >"$work/check.log" 2>&1 || true
cat "$work/check.log"
if grep -q 'guarded_tools\.[EW][0-9]' "$work/check.log"; then
  echo "newsite.sh: the quickstart's site has guarded_tools check messages (above)" >&2; exit 1
fi
python manage.py check --fail-level WARNING >/dev/null  # no warning at all without --deploy
lap "checked"

staff_password="newsite-$RANDOM$RANDOM"
DJANGO_SUPERUSER_PASSWORD="$staff_password" python manage.py createsuperuser --noinput \
  --username boss --email "" >/dev/null
python manage.py shell -c "
from django.contrib.auth import get_user_model
User = get_user_model()
User.objects.create_user('agent')
User.objects.create_user('olduser')" >/dev/null
token="$(python manage.py drf_create_token agent | awk '{print $3}')"
lap "the staff member, the agent and its token"

if [[ -n "${CELERY_BROKER_URL:-}" ]]; then  # the quickstart's worker, as its celery.py says to run it
  celery -A mysite worker --pool=solo --loglevel=INFO >"$work/worker.log" 2>&1 &
  pids+=("$!")
fi
port="$(free_port)"
python manage.py runserver "127.0.0.1:$port" --noreload >"$work/runserver.log" 2>&1 &
pids+=("$!")
wait_port "$port" runserver
lap "the site serves"
# The approval in Chromium too, where this machine has it and the repository's environment
# has Playwright (screenshots at 1280 px in $work/shots: --keep keeps them).
if [[ -x /usr/bin/chromium ]] && "$root/.venv/bin/python" -c 'import playwright' 2>/dev/null; then
  export GT_NEWSITE_BROWSER_PYTHON="$root/.venv/bin/python" GT_NEWSITE_SHOTS="$work/shots"
else
  echo "newsite: no Chromium or Playwright here: the admin is proved over HTTP only"
fi
marks="$("$work/agent/bin/python" "$root/scripts/newsite_prove.py" "http://127.0.0.1:$port" \
  "$token" boss "$staff_password" "$quick" | tee /dev/stderr | tail -n1)"

if [[ -n "${CELERY_BROKER_URL:-}" ]]; then
  # The worker found guarded_tools' tasks through the quickstart's celery.py (autodiscovery,
  # the CELERY_* settings) and ran the approvers' notification each request sent.
  for ((i = 0; i < 600; i++)); do
    [[ "$(grep -c 'guarded_tools.tasks.notify_approvers\[.*\] succeeded' "$work/worker.log")" -ge 2 ]] && break
    sleep 0.1
  done
  grep -q 'guarded_tools.tasks.notify_approvers\[.*\] succeeded' "$work/worker.log" \
    || { echo "newsite.sh: the Celery worker ran no notify_approvers task" >&2; exit 1; }
  echo "newsite: the Celery worker ran $(grep -c 'notify_approvers\[.*\] succeeded' "$work/worker.log") approvers' notifications"
  # An operation whose process died (in flight, its lease run out): the worker's sweep,
  # sent as beat would send it, takes it over and settles it.
  python manage.py shell -c '
import time
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.utils import timezone
from guarded_tools.models import Operation, OperationState
from guarded_tools.store import fingerprint
from guarded_tools.tasks import sweep
agent = get_user_model().objects.get(username="agent")
body = {"operationId": "abandoned-1", "username": "olduser"}
row = Operation.objects.create(
    tool="deactivate_user", scope=f"user:{agent.pk}", key=body["operationId"],
    fingerprint=fingerprint(body), input=body, owner="a-process-that-died",
    state=OperationState.IN_FLIGHT)
Operation.objects.filter(pk=row.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=5))
sweep.delay()
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    row.refresh_from_db()
    if row.state != OperationState.IN_FLIGHT:
        break
    time.sleep(0.2)
print(f"newsite: the worker'"'"'s sweep settled the abandoned operation: {row.state}")
assert row.state != OperationState.IN_FLIGHT, "the sweep never took the abandoned operation over"
'
fi
lap "done"
"$python" - "$t_venv" "$t_installed" "$marks" "$wheel_kb" "$django" <<'PY'
import json, sys
venv, installed, marks, wheel_kb, django = sys.argv[1:6]
marks = json.loads(marks)
print(f"newsite: Django {django}: wheel {wheel_kb} KiB; from a fresh virtualenv:"
      f" installed in {float(installed) - float(venv):.1f} s, first guarded call at"
      f" {marks['first_guarded_call'] - float(venv):.1f} s, first approved call at"
      f" {marks['first_approved_call'] - float(venv):.1f} s")
PY
echo "newsite: OK"
