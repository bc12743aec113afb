#!/usr/bin/env bash
# Create/update a virtualenv: `scripts/venv.sh main` (.venv, Py3.12, Django 6), `dj52` (.venv-dj52, Py3.11, Django 5.2) or `pg2` (.venv-pg2: psycopg2).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

find_python() {  # $1 = minor version, e.g. 3.12; prints a working interpreter path
  local v="$1" cand
  for cand in "python$v" "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/"$v"*/bin/"python$v"; do
    # pyenv shims exist on PATH even when the version isn't active: check it really runs
    if "$cand" -c 'import sys, venv' >/dev/null 2>&1; then command -v "$cand"; return 0; fi
  done
  echo "venv.sh: no working python$v found (PATH or pyenv)" >&2; return 1
}

case "${1:-}" in
  main) venv="$root/.venv";      req="$root/requirements.txt";      py=3.12 ;;
  dj52) venv="$root/.venv-dj52"; req="$root/requirements-dj52.txt"; py=3.11 ;;
  pg2)  venv="$root/.venv-pg2";  req="$root/requirements-pg2.txt";  py=3.12 ;;  # the matrix's psycopg2 row
  *) echo "usage: $0 main|dj52|pg2" >&2; exit 2 ;;
esac

# (re)create when missing, broken, or built on the wrong Python minor version
have="$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)"
if [[ "$have" != "$py" ]]; then
  rm -rf "$venv"
  "$(find_python "$py")" -m venv "$venv"
fi

marker="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [[ "$(cat "$marker" 2>/dev/null)" != "$want" ]]; then
  echo "venv.sh: installing $(basename "$req") into $(basename "$venv") ..." >&2
  log="$venv/pip-install.log"
  if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >"$log" 2>&1; then
    grep -v 'is ignored: it is neither a file nor a directory' "$log" >&2 || true
    echo "venv.sh: pip install failed (full log: $log)" >&2
    exit 1
  fi
  echo "$want" >"$marker"
fi
