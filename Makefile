# From a fresh clone, each target does its own set-up:
#   make quickstart   .venv (created if missing) + requirements.txt, then the README's quickstart run
#   make test         the same .venv + requirements-test.txt and requirements-test-nodeps.txt (installed with
#                     --no-deps), then the README's test command
# An install runs again only when its requirements file (or pyproject.toml) changed since the last one.
# GPUs: make quickstart REQUIREMENTS=requirements-cuda12.txt

PYTHON ?= python3
REQUIREMENTS ?= requirements.txt
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed-$(basename $(notdir $(REQUIREMENTS)))
TEST_INSTALLED := $(VENV)/.installed-test

.PHONY: quickstart test install install-test

quickstart: $(INSTALLED)
	$(PY) run.py --config configs/sokoban.py:tiny --workdir runs/quickstart

# pytest's exit code 5 (no tests collected) is a failure too.
test: $(TEST_INSTALLED)
	@rc=0; $(PY) -m pytest -q -n 2 --dist worksteal -m "not slow" tests || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

install: $(INSTALLED)

install-test: $(TEST_INSTALLED)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(INSTALLED): $(REQUIREMENTS) requirements.txt requirements-openenv.txt pyproject.toml | $(PY)
	$(PY) -m pip install -q -r $(REQUIREMENTS)
	$(PY) -m pip install -q --no-deps -r requirements-openenv.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

# requirements-test-nodeps.txt: test-only packages whose own dependencies must not come along (veRL's would bring
# a CUDA torch, vLLM and Ray); the tests read their source, they never import them whole.
$(TEST_INSTALLED): requirements-test.txt requirements-test-nodeps.txt $(INSTALLED)
	$(PY) -m pip install -q -r requirements-test.txt
	$(PY) -m pip install -q --no-deps -r requirements-test-nodeps.txt
	touch $@
