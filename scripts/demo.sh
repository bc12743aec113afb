#!/usr/bin/env bash
# The demo (`make demo`): set up .venv, migrate and seed the database, then run the site and a Celery worker (beat embedded) under honcho.
# Env: PORT (default 8000; binds 127.0.0.1 only), DATABASE_URL (default: SQLite in var/), GT_SWEEP_EVERY (sweep interval in s, default 30), GT_OAUTH (0: static tokens only).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

port="${PORT:-8000}"
if ! [[ "$port" =~ ^[0-9]+$ ]] || (( port < 1 || port > 65535 )); then
  echo "demo.sh: PORT must be a port number (got '$port')" >&2; exit 2
fi
# honcho hands each process PORT (from -p); unbuffered so log lines reach honcho as they happen.
export PORT="$port" PYTHONUNBUFFERED=1
# The agent endpoints take OAuth bearer tokens from the demo's authorization server too.
export GT_OAUTH="${GT_OAUTH:-1}"
# Every call to OpenTelemetry, metrics for Prometheus at /metrics (GT_TELEMETRY=0: off).
export GT_TELEMETRY="${GT_TELEMETRY:-1}"
# Absolute links (approvers' emails, demo_incident's output) name the port the site is on.
export GT_CONSOLE_BASE_URL="${GT_CONSOLE_BASE_URL:-http://127.0.0.1:$port}"

# Ctrl-C while setting up: stop, and die of SIGINT as the convention is (make says "Interrupt").
trap 'echo "demo.sh: interrupted" >&2; trap - INT; kill -INT $$' INT
scripts/venv.sh demo   # the runtime only: no test or lint tools
py=.venv/bin/python
# Django's commands; Ctrl-C ends them with status 130 instead of a KeyboardInterrupt traceback.
manage() {
  "$py" -c 'import runpy, signal, sys
signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
sys.argv[0] = "manage.py"
runpy.run_path("manage.py", run_name="__main__")' "$@"
}

if ! "$py" -c 'import socket, sys; s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.close()' "$port" 2>/dev/null; then
  echo "demo.sh: 127.0.0.1:$port is in use (another demo running?); stop it or set PORT=..." >&2; exit 1
fi

manage migrate --noinput
manage demo_seed

# The token, database and broker as the site sees them (env may change the settings).
info="$(manage shell -v 0 -c '
from django.conf import settings
from django.db import connection
from project.demo.management.commands.demo_seed import AGENT_TOKEN
print(AGENT_TOKEN)
print(connection.vendor, connection.settings_dict["NAME"])
url = settings.CELERY_BROKER_URL
print("embedded, " + settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]
      if url.startswith("filesystem:") else "CELERY_BROKER_URL")
print(settings.METRICS_TOKEN)')"
{ read -r token; read -r database; read -r broker; read -r metrics_token; } <<<"$info"
url="http://127.0.0.1:$port"

cat <<BANNER

== guarded_tools demo (loopback only; Ctrl-C stops everything) ==
  Site:         $url/
  Agent tools:  $url/agent/tools/   (send: Authorization: Token $token)
  Errors:       $url/agent/errors.json  and  $url/agent/llms.txt
  Metrics:      $url/metrics   (Prometheus: log in as staff, or send: Authorization: Bearer $metrics_token)
  Admin:        $url/admin/   log in as staff/staff (the operator), or approver/approver
                and approver2/approver2 (approvers: a payment above 1,000.00 needs both)
  Agent user:   agent/agent   token $token
  Database:     $database
  Worker:       Celery (broker: $broker); beat runs guarded_tools.tasks.sweep every ${GT_SWEEP_EVERY:-30} s

  Try:  curl -s $url/agent/tools/ -H 'Authorization: Token $token'

  MCP hosts with OAuth (Claude, ChatGPT, Cursor, VS Code, MCP Inspector): add the server
  URL $url/agent/mcp and nothing else; the host finds the authorization server
  ($url/.well-known/oauth-protected-resource/agent/mcp), registers itself,
  and sends you to log in (agent/agent) and consent. Connections: $url/o/authorized_tokens/

BANNER

# -e /dev/null: no .env file, so the processes see the same environment as migrate/seed above.
# honcho runs in the background and this script waits for it, so that a signal reaches it
# however the demo is stopped: Ctrl-C (the terminal signals honcho too), or SIGTERM to this
# script or to make (a process manager, an IDE's stop button: make passes SIGTERM on to
# its child, this script). honcho then stops both processes (they run in sessions of their
# own) and exits 130 or 143; nothing is left running and the port is free again. Either is
# the way to stop the demo, not a failure, so the script then ends quietly, with status 0
# (make, which got the signal too, then ends by it without an "Error" message).
# The handlers pass the signal to $! (honcho, the only background job), set as soon as it
# is started; before that there is nothing to stop and the script exits.
forward() { if [[ -n "${!:-}" ]]; then kill -"$1" "$!" 2>/dev/null || :; else exit "$2"; fi; }
trap 'forward INT 130' INT
trap 'forward TERM 143' TERM HUP
.venv/bin/honcho start -f Procfile -e /dev/null -p "$port" &
honcho=$!
rc=0
# `wait` returns early when a trapped signal arrives: wait again until honcho has exited.
while kill -0 "$honcho" 2>/dev/null; do
  rc=0; wait "$honcho" || rc=$?
done
case "$rc" in
  130) echo "demo.sh: stopped (Ctrl-C)" >&2; exit 0 ;;
  143) echo "demo.sh: stopped (SIGTERM)" >&2; exit 0 ;;
esac
exit "$rc"
