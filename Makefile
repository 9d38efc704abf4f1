# apcir: `make setup` builds .venv; `make test` and `make demo` call it when needed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.apcir-installed
# A CPU build of PyTorch. Override for a GPU machine, e.g.
#   make setup TORCH='torch --index-url https://download.pytorch.org/whl/cu124'
TORCH  ?= torch==2.13.0

.PHONY: setup test test-fast demo bench lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(TORCH)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[full,dev]"
	touch $(STAMP)

test: setup
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

# The main job on the embedded default, offline: the `heuristic` reformulator and the extractive
# responder, or GPT-4o for both when OPENAI_API_KEY is set (then the LLM cache makes re-runs free).
demo: setup
	@if [ -n "$$OPENAI_API_KEY" ]; then \
		$(VENV)/bin/apcir run demo --llm gpt-4o --responder gpt-4o --output-dir runs/demo-gpt-4o; \
	else \
		$(VENV)/bin/apcir run demo; \
	fi

bench: setup
	@for script in benchmarks/*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

lint: setup
	$(VENV)/bin/ruff check apcir tests benchmarks
	$(VENV)/bin/mypy apcir

clean:
	rm -rf $(VENV) .pytest_cache
