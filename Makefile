# Developer entry points; see README.md. `make test PYTEST_ARGS="-k foo -x"` passes args to every pytest run.
PYTEST_ARGS ?=

.PHONY: demo test matrix lint docs bench profile newsite messages clean distclean

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh $(PYTEST_ARGS)

matrix:
	bash scripts/matrix.sh $(PYTEST_ARGS)

lint:
	bash scripts/venv.sh main
	.venv/bin/ruff check .
	.venv/bin/lint-imports
	.venv/bin/mypy

# The built wheel installed into a fresh virtualenv and proved in a new django-admin
# startproject site with docs/quickstart's files (scripts/newsite.sh; NEWSITE_ARGS="--django 5.2").
newsite:
	bash scripts/newsite.sh $(NEWSITE_ARGS)

# guarded_tools/locale/django.pot, the message catalog template sites translate.
messages:
	bash scripts/messages.sh

# The docs site into docs/_build/html: every warning an error, every internal link and anchor checked, offline.
docs:
	bash scripts/venv.sh main
	.venv/bin/python -m sphinx -b html -W --keep-going -n -E -q -d docs/_build/doctrees docs docs/_build/html

bench:
	bash scripts/bench.sh

profile:
	bash scripts/bench.sh profile

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist bench-results *.egg-info docs/_build
	find . -path ./.venv -prune -o -path ./.venv-dj52 -prune -o -path ./.venv-pg2 -prune -o -path ./.venv-bench -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean
	rm -rf .venv .venv-dj52 .venv-pg2 .venv-bench
