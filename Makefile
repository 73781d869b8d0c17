# SITP: set-up and checks. A contributor needs two targets:
#   make serve   set up what building the book needs, serve it on http://127.0.0.1:8000
#                (another address: make serve HOST=127.0.0.1:8001; stop it with Ctrl-C)
#   make test    set up, then run every check (what CI runs)
# Set-up is idempotent: it reruns only when pyproject.toml, the pinned constraints or
# package-lock.json change (stamps in .venv/ and node_modules/). `make serve` installs
# the package with the docs extra only (no torch, no browser); `make test` adds the
# test extra, each with its own stamp.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

PYTHON ?= python3
VENV ?= .venv
EXTRAS ?= test,docs
CONSTRAINTS := requirements/constraints.txt
BIN := $(VENV)/bin
comma := ,
STAMP := $(VENV)/.sitp-setup-$(subst $(comma),-,$(EXTRAS))
# What `make serve` needs: the package and the tools that build the book.
SERVE_EXTRAS := docs
SERVE_STAMP := $(VENV)/.sitp-setup-$(SERVE_EXTRAS)
NPM_STAMP := node_modules/.sitp-setup
HOST ?= 127.0.0.1:8000
# pytest workers. The suite is sized for 2 cores, and runs 3 workers on them: many tests
# wait on subprocesses (the pages' copy-runs, ranks, scripts) and on the browser, and a
# third worker fills those waits (a fresh clone on a 2-vCPU Xeon with a warm numba
# cache: pytest 5:46 with 3 workers, 6:16 with 2). Each worker runs numba on one thread.
JOBS ?= 3

# numba reads NUMBA_ENABLE_CUDASIM when it is first imported: where no GPU answers,
# CUDA kernels run in numba's simulator. An explicit setting wins.
ifeq ($(origin NUMBA_ENABLE_CUDASIM),undefined)
NUMBA_ENABLE_CUDASIM := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 0 || echo 1)
endif
export NUMBA_ENABLE_CUDASIM
export NO_MKDOCS_2_WARNING ?= 1
# Tests never download: makemore's names.txt and tinyshakespeare are read from
# ../shared/data when that folder exists, or from $SITP_DATA_DIR (GitHub's CI downloads
# them there first: ci.yml); sitp.data looks in $SITP_DATA_DIR first.
ifeq ($(origin SITP_DATA_DIR),undefined)
ifneq ($(wildcard ../shared/data/names.txt),)
export SITP_DATA_DIR := $(abspath ../shared/data)
endif
endif
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Python keeps the bytecode of what it imports (pytest's rewritten test modules too) in
# __pycache__ folders, which git ignores. Where PYTHONDONTWRITEBYTECODE is set, as in
# many containers, every test process would compile every module again: about 5 s a
# process for the suite's 250 test modules and the package.
unexport PYTHONDONTWRITEBYTECODE

# Everything pytest checks: unit tests (tests/), every Python fence and every `>>>`
# example of the book (docs/), the package's docstring examples (src/sitp/). Figure
# scripts under docs/ are not imported as test modules (pages run them where they say).
PYTEST_CHECKS := tests docs src/sitp \
	--markdown-docs --doctest-modules --durations=10 \
	--ignore-glob='*/__main__.py' --ignore-glob='*/docs/*.py'

.PHONY: help setup venv node serve build build-zensical lint test test-site test-book test-other-isa outputs lock clean

help:
	@echo "make serve   set up the docs tools, build the book, serve it on http://$(HOST)"
	@echo "             (make serve HOST=127.0.0.1:8001 for another port; Ctrl-C stops it)"
	@echo "make test    set up, run every check (lint, unit tests, fences, doctests, strict build)"
	@echo "make lint    ruff (lint, format check) and the layers' import contracts"
	@echo "make build   set up, build the site into site/ (strict)"
	@echo "make build-zensical  the same book built by Zensical, into build/zensical/site"
	@echo "make test-site  build, then check links and every page in headless Chromium"
	@echo "make test-other-isa  the pages' outputs with kernels for another vector width"
	@echo "make outputs record what every block of the book prints (docs/_outputs/);"
	@echo "             one page: make outputs PAGE=ch02/strides.md"
	@echo "make lock    re-pin requirements/constraints.txt from .venv"
	@echo "make clean   remove built files (site/, caches)"

setup: venv node

venv: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e ".[$(EXTRAS)]"
	@touch $@

# The stamp of a fuller set-up (test,docs) also stands for the docs-only one.
$(SERVE_STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ] && [ $(STAMP) -nt $(CONSTRAINTS) ]; \
	then echo "set-up: $(STAMP) is current, it includes the docs extra"; \
	else $(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e ".[$(SERVE_EXTRAS)]"; fi
	@touch $@

node: $(NPM_STAMP)

$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# Watches docs/, mkdocs.yml and what its `watch:` lists (src/, hooks/); generated files
# (__pycache__, numba caches, notebook checkpoints) never trigger a rebuild (hooks/book.py).
# The builders run as `python -m` from the root, which puts the root on sys.path: mkdocs.yml
# lists the book's Markdown extension as `hooks.book_markdown`.
serve: $(SERVE_STAMP) node
	$(BIN)/python -m mkdocs serve --no-strict -a $(HOST)

build: setup
	$(BIN)/python -m mkdocs build --strict

# The second builder: Zensical (Material's successor) builds the same mkdocs.yml from a
# staged copy of docs/ (scripts/zensical_build.py says what it adds around the build).
# `make test` builds both and compares them (tests/test_zensical.py).
build-zensical: setup
	$(BIN)/python scripts/zensical_build.py

# The code's shape: ruff's rules and its formatting, then the import contracts of
# pyproject.toml ([tool.importlinter]: the layers import one way, the two backends not
# each other). All three always run; `ruff format src tests hooks` applies the format.
LINT_PATHS := src tests hooks
lint: venv
	@status=0; \
	echo "+ ruff check $(LINT_PATHS)"; $(BIN)/ruff check $(LINT_PATHS) || status=$$?; \
	echo "+ ruff format --check $(LINT_PATHS)"; $(BIN)/ruff format --check $(LINT_PATHS) || status=$$?; \
	echo "+ lint-imports"; $(BIN)/lint-imports --no-cache || status=$$?; \
	exit $$status

# The lint first, then the strict build and the Zensical build, then pytest, whose summary
# closes the output; all always run, so one push reports every broken page and every
# failing test. pytest checks the sites just built (SITP_SITE_DIR=site,
# SITP_ZENSICAL_SITE_DIR=build/zensical/site): their links and anchors
# (tests/test_site_links.py), every page of both in headless Chromium
# (tests/test_site_browser.py, screenshots and the list of external links in
# build/site-check/), and what a reader gets from each, compared page by page
# (tests/test_zensical.py). If the MkDocs build failed, the site checks are left out.
test: setup
	@status=0; site_tests=(); \
	$(MAKE) --no-print-directory lint || status=$$?; \
	echo "+ mkdocs build --strict"; \
	if SITP_NOTEBOOK_CACHE=false $(BIN)/python -m mkdocs build --strict; then \
	  export SITP_SITE_DIR=site; \
	else status=$$?; site_tests=(-m "not site and not browser"); \
	  echo "make test: mkdocs build --strict FAILED (above); running pytest without the site checks"; fi; \
	echo "+ python scripts/zensical_build.py"; \
	$(BIN)/python scripts/zensical_build.py || { status=$$?; \
	  echo "make test: the Zensical build FAILED (above); its checks will fail"; }; \
	export SITP_ZENSICAL_SITE_DIR=build/zensical/site; \
	echo "+ pytest -n $(JOBS) --dist worksteal $${site_tests[*]} $(PYTEST_CHECKS)"; \
	$(BIN)/python -m pytest -n $(JOBS) --dist worksteal -p no:cacheprovider "$${site_tests[@]}" $(PYTEST_CHECKS) || status=$$?; \
	exit $$status

# The built site alone: strict build, then the link check and the browser checks.
test-site: setup
	$(BIN)/python -m mkdocs build --strict
	$(BIN)/python scripts/zensical_build.py
	SITP_SITE_DIR=site SITP_ZENSICAL_SITE_DIR=build/zensical/site $(BIN)/python -m pytest -n $(JOBS) -p no:cacheprovider -m "site or browser" tests

# The book alone: fences and doctests of docs/ and the machinery's tests.
test-book: setup
	$(BIN)/python -m pytest -p no:cacheprovider --markdown-docs docs tests/test_book.py

# What the book's Python blocks print, for the pages to show beneath them: the copy-run
# test (tests/test_copy_run.py) in recording mode writes docs/_outputs/<page>.json.
# After editing a block: make outputs PAGE=ch02/strides.md, check the diff, commit it.
COPY_RUN := tests/test_copy_run.py
outputs: venv
	SITP_RECORD_OUTPUTS=1 $(BIN)/python -m pytest -n $(JOBS) -p no:cacheprovider \
	  $(if $(PAGE),"$(COPY_RUN)::test_page_runs_as_a_reader_pastes_it[$(PAGE)]",$(COPY_RUN))

# The same comparison of every page's output, with sitp's kernels compiled for another
# vector width than this machine's (AVX2 on an AVX-512 host, x86-64's baseline on an
# AVX2 one; torch's and numpy's kernels follow): a recorded output must not hold only on
# the CPU that recorded it. scripts/other_isa.py says what it sets; GitHub CI runs it.
# OTHER_CPU=skylake-avx512 (an LLVM CPU name this host can run) compiles for that CPU.
OTHER_CPU ?=
test-other-isa: setup
	@target="$$($(BIN)/python scripts/other_isa.py $(OTHER_CPU))"; \
	echo "+ $$(echo "$$target" | cut -c1-100 | tr '\n' ' ')"; \
	env $$target $(BIN)/python -m pytest -n $(JOBS) -p no:cacheprovider $(COPY_RUN)

lock: venv
	{ sed -n '/^#/p' $(CONSTRAINTS); $(BIN)/python -m pip freeze --exclude-editable \
	  | grep -iv '^sitp\b' | sed 's/+cpu$$//'; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)

clean:
	rm -rf site .cache .pytest_cache build/site-check build/zensical
