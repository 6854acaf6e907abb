# Trawl — `make demo` and `make test` are all a newcomer needs (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: help setup system-deps demo test test-ray test-stress test-all bench relevance lint fmt check clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of torch first, so nothing below pulls a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,ray]'
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(STAMP) ## Create .venv and install Trawl with its dependencies

BOOK_PACKAGES := debian-reference-en debian-reference-de debian-reference-es debian-reference-fr debian-reference-ja debian-reference-zh-cn

system-deps: ## Debian packages: python3.11-doc (the demo site), chromium (browser tests), the Debian Reference in six languages (language tests)
	@if [ ! -d /usr/share/doc/python3.11/html ] || [ ! -x /usr/bin/chromium ] || ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || [ ! -f /usr/share/debian-reference/ch02.zh-cn.html ] || [ ! -f /usr/share/debian-reference/ch02.es.html ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11-doc chromium postgresql $(BOOK_PACKAGES) >/dev/null; \
	  else echo "install them: sudo apt-get install python3.11-doc chromium postgresql $(BOOK_PACKAGES)"; fi; \
	fi

demo: setup system-deps ## Crawl the Python docs on loopback, index, serve BM25 then hybrid (ARGS="--no-embed --port 8001")
	$(BIN)/trawl demo $(ARGS)

# One pytest worker per core (at most 4; each starts its own PostgreSQL cluster and Ray when a
# test asks), each test file on one worker so its module fixtures (a built index) are made once.
# TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 )))
PYTEST := $(BIN)/pytest -q --durations=15 -n $(TEST_WORKERS) --dist loadfile

test: setup system-deps ## Run the test suite (without benchmarks and the Ray tests), one worker per core
	$(PYTEST) -m "not ray"

test-ray: setup system-deps ## The tests that start Ray: batch jobs, a two-node cluster, Ray Serve (CI runs them)
	$(PYTEST) -m ray

test-all: test test-ray ## Both

test-stress: setup system-deps ## The test suite while every core is kept busy by a background load
	@set -e; load=""; \
	for _ in $$(seq $$(nproc)); do ( while :; do :; done ) & load="$$load $$!"; done; \
	trap 'kill $$load 2>/dev/null' EXIT; \
	echo "background load on $$(nproc) cores (pids$$load)"; \
	$(PYTEST)

bench: setup ## Run the benchmarks in bench/ (not part of the tests)
	$(BIN)/python bench/bench_search.py

EVAL_DIR ?= ../shared/data/eval

relevance: setup ## Reproduce every reported relevance figure and rewrite docs/relevance.md's table
	$(BIN)/python -m bench.relevance.reproduce --eval-dir $(EVAL_DIR) --write docs/relevance.md

lint: setup ## ruff check + format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: setup ## Format and autofix
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

PACKAGES := core crawl retrieval rerank online training api cli

check: lint ## Lint and type-check every package
	$(BIN)/mypy $(PACKAGES)

clean: ## Remove caches and built indexes (keeps .venv)
	rm -rf data/cache .pytest_cache .ruff_cache .mypy_cache
