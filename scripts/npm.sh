#!/usr/bin/env bash
# `scripts/npm.sh DIR...`: `npm ci` in each DIR (tests/integration/js, tests/integration/conformance) unless its node_modules was installed from
# the package-lock.json it has now (a marker holds the lock's hash). One install at a time per DIR (flock): pytest-xdist's
# workers and a second run beside this one find it done instead of racing `npm ci`, which empties node_modules first.
set -euo pipefail
command -v npm >/dev/null || { echo "npm.sh: npm not found (apt-get install npm)" >&2; exit 1; }
for dir in "$@"; do
  lock="$dir/package-lock.json" marker="$dir/node_modules/.package-lock.sha256"
  want="$(sha256sum "$lock" | cut -d' ' -f1)"
  (
    flock 9
    [[ "$(cat "$marker" 2>/dev/null)" == "$want" ]] && exit 0
    echo "npm.sh: npm ci in $dir" >&2
    (cd "$dir" && npm ci --no-audit --no-fund) && echo "$want" >"$marker"
  ) 9>"$dir/.npm.lock"
done
