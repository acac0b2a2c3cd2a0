# The two commands of the README: `make up` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: up down status test lint format stack

# Bring up everything: database, broker, Slurm, migrations, demo data, web, worker, beat.
up: $(INSTALLED) stack
	$(PY) dev/create_database.py
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput --verbosity 0
	$(PY) manage.py seed_demo
	dev/portal start
	@echo
	@echo "Slurm GPU Portal is up at $$(dev/portal url)   (admin console: $$(dev/portal url)admin/)"
	@echo "Log in with a demo login printed above; 'make down' stops it."

down:
	-dev/portal stop
	dev/stack stop

status:
	-dev/portal status
	dev/stack status

# Run lint, type checks and the whole test suite against the real local stack, started here.
test: $(INSTALLED) stack
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest

lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: $(INSTALLED)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

stack:
	dev/stack install
	dev/stack start

$(INSTALLED): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@
