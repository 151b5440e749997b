PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
TORCH_VERSION ?= 2.13.0
# A transformers release to install or test with, e.g. `make test TRANSFORMERS=5.24.0`; empty: the newest one
# pyproject.toml allows (what `pip install vlmprep` resolves).
TRANSFORMERS ?=
VERSION_VENV = .venvs/transformers-$(TRANSFORMERS)
# Test workers (pytest-xdist): every test runs on one thread, so two workers use both cores of a 2-core machine.
# The server tests share one worker (tests/conftest.py), so two servers never compete for the cores.
PYTEST_WORKERS ?= 2
PYTEST_WORKERS_ARGS = $(if $(filter-out 0 1,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadgroup)

.PHONY: install test test-range test-slow style quality repo-consistency bench docs-check clean

install:
	# The CPU build of torch lies on this machine's disk; installing it first keeps pip from pulling a CUDA build.
	$(PIP) install "torch==$(TORCH_VERSION)"
	$(PIP) install -e ".[dev]" $(if $(TRANSFORMERS),"transformers[serving]==$(TRANSFORMERS)")

# pytest's own exit status: an empty suite (exit 5, nothing collected) fails like a failing test.
# With TRANSFORMERS set, the suite runs in a venv of its own (.venvs/transformers-VERSION) holding that release.
test:
ifeq ($(TRANSFORMERS),)
	$(PYTHON) -m pytest -q -p no:cacheprovider $(PYTEST_WORKERS_ARGS) tests
else
	test -x $(VERSION_VENV)/bin/python || python3 -m venv $(VERSION_VENV)
	$(MAKE) install PYTHON=$(VERSION_VENV)/bin/python TRANSFORMERS=$(TRANSFORMERS)
	$(VERSION_VENV)/bin/python -c "import sys, transformers; v = transformers.__version__; \
		print('transformers', v); sys.exit(v != '$(TRANSFORMERS)')"
	$(VERSION_VENV)/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_WORKERS_ARGS) tests
endif

# The whole suite on the first and the last tested transformers release (the ends of the declared range), each in
# its own venv: what .ci/run runs.
test-range:
	for release in $$($(PYTHON) utils/check_transformers_range.py --ends); do \
		$(MAKE) test TRANSFORMERS=$$release || exit 1; \
	done

test-slow:
	$(PYTHON) -m pytest -q -p no:cacheprovider -m slow tests

style:
	ruff format src tests utils
	ruff check --fix src tests utils

quality:
	ruff format --check src tests utils
	ruff check src tests utils

repo-consistency:
	$(PYTHON) utils/check_transformers_range.py
	$(PYTHON) utils/check_exports.py
	$(PYTHON) utils/check_layout.py
	$(PYTHON) utils/check_upstream_hooks.py
	$(PYTHON) utils/families_table.py --check

bench:
	$(PYTHON) -m vlmprep.cli bench

docs-check:
	$(PYTHON) utils/check_docs.py

clean:
	rm -rf build dist .pytest_cache .ruff_cache src/*.egg-info .venvs
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
