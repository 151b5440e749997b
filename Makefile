PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
TORCH_VERSION ?= 2.13.0

.PHONY: install test test-slow style quality repo-consistency bench docs-check clean

install:
	# The CPU build of torch lies on this machine's disk; installing it first keeps pip from pulling a CUDA build.
	$(PIP) install "torch==$(TORCH_VERSION)"
	$(PIP) install -e ".[dev]"

# pytest's own exit status: an empty suite (exit 5, nothing collected) fails like a failing test.
test:
	$(PYTHON) -m pytest -q -p no:cacheprovider tests

test-slow:
	$(PYTHON) -m pytest -q -p no:cacheprovider -m slow tests

style:
	ruff format src tests utils
	ruff check --fix src tests utils

quality:
	ruff format --check src tests utils
	ruff check src tests utils

repo-consistency:
	$(PYTHON) utils/check_exports.py
	$(PYTHON) utils/check_layout.py
	$(PYTHON) utils/check_upstream_hooks.py
	$(PYTHON) utils/families_table.py --check

bench:
	$(PYTHON) -m vlmprep.cli bench

docs-check:
	$(PYTHON) utils/check_docs.py

clean:
	rm -rf build dist .pytest_cache .ruff_cache src/*.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
