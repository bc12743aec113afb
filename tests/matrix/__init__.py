"""The deployment matrix: the guarantees, run once per settings module (scripts/matrix.sh)."""
