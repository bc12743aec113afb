#!/usr/bin/env bash
# Create/update a virtualenv: `scripts/venv.sh main` (.venv, Py3.12, Django 6: runtime + test + lint),
# `demo` (.venv with the demo's runtime only), `dj52` (.venv-dj52, Py3.11, Django 5.2), `pg2` (.venv-pg2: psycopg2)
# or `bench` (.venv-bench: the demo's runtime, the servers, FastMCP and the profilers of `make bench`).
# A .venv made by `demo` is completed by `main` later (`make test`); one made by `main` serves `demo` as is.
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

digest() {  # $1 = requirements file: one hash over it and every file it includes with -r
  local file="$1" dir included
  dir="$(dirname "$file")"
  {
    cat "$file"
    sed -n 's/^[[:space:]]*-r[[:space:]]*\([^[:space:]#]*\).*/\1/p' "$file" | while read -r included; do
      cat "$dir/$included"
    done
  } | sha256sum | cut -d' ' -f1
}

main_req="$root/requirements.txt"; main_marker="$root/.venv/.requirements.sha256"
case "${1:-}" in
  main) venv="$root/.venv";      req="$main_req";                   py=3.12; marker="$main_marker" ;;
  demo) venv="$root/.venv";      req="$root/requirements-demo.txt"; py=3.12; marker="$venv/.requirements-demo.sha256" ;;
  dj52) venv="$root/.venv-dj52"; req="$root/requirements-dj52.txt"; py=3.11; marker="$venv/.requirements.sha256" ;;
  pg2)  venv="$root/.venv-pg2";  req="$root/requirements-pg2.txt";  py=3.12; marker="$venv/.requirements.sha256" ;;  # the matrix's psycopg2 row
  bench) venv="$root/.venv-bench"; req="$root/requirements-bench.txt"; py=3.12; marker="$venv/.requirements.sha256" ;;
  *) echo "usage: $0 main|demo|dj52|pg2|bench" >&2; exit 2 ;;
esac

# (re)create when missing, broken, or built on the wrong Python minor version
have="$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)"
if [[ "$have" != "$py" ]]; then
  rm -rf "$venv"
  "$(find_python "$py")" -m venv "$venv"
fi

want="$(digest "$req")"
[[ "$(cat "$marker" 2>/dev/null)" == "$want" ]] && exit 0
# The main environment includes the demo's requirements: up to date for main is up to date for demo.
if [[ "$1" == demo && "$(cat "$main_marker" 2>/dev/null)" == "$(digest "$main_req")" ]]; then exit 0; fi

echo "venv.sh: installing $(basename "$req") into $(basename "$venv") ..." >&2
trap 'echo "venv.sh: interrupted; the next run installs again" >&2; exit 130' INT
# uv installs (the same resolution as pip's, from the same index; measured on a fresh venv of
# requirements.txt: 13 s of CPU against pip's 84 s, most of pip's in compiling every module ahead,
# which Python does here on first import instead); pip when uv cannot be had.
if "$venv/bin/python" -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1 \
   && "$venv/bin/uv" --version >/dev/null 2>&1; then
  installer=("$venv/bin/uv" pip install --python "$venv/bin/python")
else
  installer=("$venv/bin/python" -m pip install --disable-pip-version-check)
fi
# The installer's own progress on the terminal: a first install downloads for a while.
if ! "${installer[@]}" -r "$req"; then
  echo "venv.sh: installing -r $(basename "$req") failed (see the output above)" >&2
  exit 1
fi
echo "$want" >"$marker"
