# The two commands of the README: `make up` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
# The portal's defaults are production's; everything here runs on the local dev stack.
export PORTAL_ENV ?= dev

.PHONY: up down status test lint format stack messages compilemessages load

# makemessages reads the apps and templates (not the venv or test code); file-only
# locations keep the catalogue's diff to the strings that changed.
MAKEMESSAGES := manage.py makemessages -l ja --ignore=.venv --ignore=bench --ignore=tests \
	--ignore=var --no-obsolete --add-location=file

# Bring up everything: database, broker, Slurm, migrations, demo data, web, worker, beat.
up: $(INSTALLED) stack
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput --verbosity 0
	$(PY) manage.py compilemessages --ignore=.venv --verbosity 0
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

# Run lint, type checks and the whole test suite against the real local stack, started here:
# on TEST_PROCESSES processes (pytest-xdist; a module's tests stay on one process, as they
# share its fixtures and the Slurm accounts it names; the longest modules first,
# tests/conftest.py's LONGEST_FILES), then the tests that stop shared
# daemons alone. mypy runs beside the first part (the suite mostly waits on Slurm); its
# report comes after, and any failure of the three fails the target.
TEST_PROCESSES ?= 5
test: $(INSTALLED) stack
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) manage.py compilemessages --ignore=.venv --verbosity 0
	mkdir -p var; $(VENV)/bin/mypy > var/mypy.log 2>&1 & mypy=$$!; \
	$(VENV)/bin/pytest -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder -m "not exclusive"; parallel=$$?; \
	wait $$mypy; typed=$$?; cat var/mypy.log; \
	$(VENV)/bin/pytest -m exclusive; alone=$$?; \
	exit $$(( parallel || typed || alone ))

# The load test (bench/load.py): 50 simulated researchers for 3 minutes against the real
# web tier, worker and beat in a database of their own; fails on a 5xx or a broken invariant.
load: $(INSTALLED) stack
	$(PY) bench/load.py

lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: $(INSTALLED)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# After changing user-visible text: refresh locale/ja/LC_MESSAGES/django.po, translate
# the new entries (tests/portal/test_i18n.py fails while one is missing), then compile.
messages: $(INSTALLED)
	$(PY) $(MAKEMESSAGES)
	$(PY) manage.py compilemessages --ignore=.venv

# The .mo files are built, not kept in git; `up` and `test` compile them too.
compilemessages: $(INSTALLED)
	$(PY) manage.py compilemessages --ignore=.venv

stack:
	dev/stack install
	dev/stack start

# The Debian packages come first: python-ldap builds against libldap's and libsasl2's headers.
$(INSTALLED): pyproject.toml
	dev/stack packages
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@
