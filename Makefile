# cellar: see README.md.  `make run` and `make test` install what is missing.

CC      ?= cc
VERSION := 0.1.0
PKGS    := libmicrohttpd gnutls hdf5 jansson libuv yajl libzstd liblz4 blosc zlib libcurl
DEB_PKGS := build-essential pkg-config libmicrohttpd-dev libgnutls28-dev libhdf5-dev hdf5-plugin-lzf liblzf-dev \
            libjansson-dev libuv1-dev libyajl-dev zlib1g-dev libzstd-dev liblz4-dev \
            libblosc-dev libcurl4-openssl-dev curl ca-certificates openssl python3 python3-venv zstd haproxy chromium \
            nginx
# node and npm (tests/http/zarr_clients: zarrita.js, npm ci from its lock
# file) come from Debian's nodejs and npm unless a node and an npm are on
# PATH already (NodeSource's nodejs has its own npm, which Debian's npm
# package would conflict with).
DEB_CMDS := node:nodejs npm:npm

# Tools the tests fetch once and keep between runs (npm 10, SeaweedFS).
CELLAR_TEST_CACHE ?= $(HOME)/.cache/cellar-test

# npm ci of the test pages' lock files runs npm 10.9.2 from the npm registry,
# installed once into CELLAR_TEST_CACHE: Debian 12's npm 9.2 refuses a lock
# file whose package.json has "overrides" (EUSAGE, "can only install with
# an existing package-lock.json"), which the Vitessce and Taxonium pages
# need.  Not through `npm exec --package=npm@...`: two of those at once
# (make runs the npm ci rules in parallel) unpack into the same npx cache
# folder and break each other on a first run (ENOTEMPTY; make fresh-check).
NPM_VERSION := 10.9.2
NPM_HOME := $(CELLAR_TEST_CACHE)/npm-$(NPM_VERSION)
NPM_CLI  := $(NPM_HOME)/node_modules/npm/bin/npm-cli.js
NPM_CI   := node $(NPM_CLI) ci --no-audit --no-fund

# Compile on every core (CI has two).
MAKEFLAGS += --jobs=$(shell nproc 2>/dev/null || echo 2)

SANITIZE ?=
ifeq ($(SANITIZE),)
BUILD   ?= build
SANFLAGS :=
else
BUILD   ?= build-san
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif

WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2 -Wvla -Werror
CFLAGS  ?= -O2 -g
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -DCELLAR_VERSION=\"$(VERSION)\" $(WARN) $(CFLAGS) $(SANFLAGS) -I. \
             $(shell pkg-config --cflags $(PKGS) 2>/dev/null) -MMD -MP
# Debian's hdf5-plugin-lzf leaves lzf_decompress undefined; linking liblzf
# into the binary (kept even though nothing in cellar calls it) lets
# libhdf5's dlopen of the plugin resolve it, so LZF datasets (h5py's
# compression="lzf") read.
LDLIBS  = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -Wl,--no-as-needed -llzf -Wl,--as-needed \
          -lpthread -lm
ALL_LDFLAGS = $(LDFLAGS) $(SANFLAGS)

LIB_SRC  := $(wildcard common/*.c storage/*.c storage/*/*.c api/*.c api/*/*.c) $(filter-out server/main.c server/probe_heap.c,$(wildcard server/*.c))
# The viewer's files (api/ui/ but its C sources and README), linked in like
# the OpenAPI document; api/ui/ui_files.h lists them.
UI_ASSETS := $(filter-out %.c %.h %.md,$(wildcard api/ui/*))
UI_OBJ   := $(UI_ASSETS:api/ui/%=$(BUILD)/ui/%.o)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/openapi.o $(UI_OBJ)
UNIT_SRC := $(wildcard tests/unit/*.c)
UNIT_OBJ := $(UNIT_SRC:%.c=$(BUILD)/%.o)

# The test venv: Python 3.12+ with tests/requirements.txt (anndata 0.13,
# mudata 0.4, treedata 0.4), else Python 3.11 (Debian 12's python3) with
# tests/requirements-py311.txt (anndata 0.12, mudata 0.3, treedata 0.3), in
# .venv311.  PYTHON_FOR_VENV=/usr/bin/python3 picks a Python by hand.  Looked
# for only by the goals that use the venv (after make deps has installed one).
ifneq ($(filter venv unit pytest check test-corpus conformance,$(MAKECMDGOALS)),)
ifeq ($(PYTHON_FOR_VENV),)
PYTHON_FOR_VENV := $(shell sh tests/find_python.sh)
endif
endif
PY_SET  := $(if $(PYTHON_FOR_VENV),$(shell $(PYTHON_FOR_VENV) -c 'import sys; print("py311" if sys.version_info < (3, 12) else "py312")'))
ifeq ($(PY_SET),py311)
REQUIREMENTS := tests/requirements-py311.txt
VENV    := .venv311
else
REQUIREMENTS := tests/requirements.txt
VENV    := .venv
endif
PORT    ?= 8080

.PHONY: all deps run test check unit pytest venv clean fuzz-replay fuzz bench bench-zip layout-check test-corpus fresh-check image-check conformance
all: $(BUILD)/cellar

# Installs the Debian packages that are missing (needs root, as on CI).
deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	for c in $(DEB_CMDS); do command -v $${c%%:*} >/dev/null 2>&1 || missing="$$missing $${c#*:}"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# The OpenAPI document is linked into the binary as _binary_api_openapi_json_*.
$(BUILD)/openapi.o: api/openapi.json
	@mkdir -p $(dir $@)
	ld -r -b binary -z noexecstack -o $@ api/openapi.json

# Each viewer file as _binary_api_ui_<name with . as _>_start/_end.
$(BUILD)/ui/%.o: api/ui/%
	@mkdir -p $(dir $@)
	ld -r -b binary -z noexecstack -o $@ $<

$(BUILD)/libcellar.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

# server/probe_heap.o replaces malloc and free (for the probe process): in the
# binary (and the unit tests, which turn it on in children), never in libcellar.a.
$(BUILD)/cellar: $(BUILD)/server/main.o $(BUILD)/server/probe_heap.o $(BUILD)/libcellar.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/unit_tests: $(UNIT_OBJ) $(BUILD)/server/probe_heap.o $(BUILD)/libcellar.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

# Fuzz targets: each tests/fuzz/*_fuzz.c also builds with a plain main that
# replays its saved corpus (tests/fuzz/corpus/<name>/), so every past crash
# is replayed by gcc in make test.  For libFuzzer: clang -DCELLAR_LIBFUZZER
# -fsanitize=fuzzer,address,undefined.
FUZZ_SRC := $(wildcard tests/fuzz/*_fuzz.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
.SECONDARY: $(FUZZ_SRC:%.c=$(BUILD)/%.o)

$(BUILD)/fuzz/%: $(BUILD)/tests/fuzz/%.o $(BUILD)/libcellar.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

fuzz-replay: $(FUZZ_BIN)
	@set -e; for b in $(FUZZ_BIN); do n=$${b##*/}; $(SAN_ENV) ./$$b tests/fuzz/corpus/$${n%_fuzz}; done

# Every fuzz target under libFuzzer for FUZZ_SECONDS each (not part of make
# test; needs clang, which make fuzz installs).  New inputs go to
# $(FUZZ_BUILD)/corpus/<name> (seeded from tests/fuzz/corpus/<name>); a crash
# leaves its input in $(FUZZ_BUILD)/ and fails the run: fix it, then add the
# input to tests/fuzz/corpus/<name> so make test replays it.  FUZZ_TARGETS
# picks some (e.g. FUZZ_TARGETS="selection tree_json").  FUZZ_RUNS=N runs
# each target for N inputs instead of a time (issue 19 asks 10M runs clean:
# make fuzz FUZZ_RUNS=10000000).
FUZZ_SECONDS ?= 180
FUZZ_RUNS ?=
FUZZ_LENGTH = $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS),-max_total_time=$(FUZZ_SECONDS))
FUZZ_BUILD ?= build-fuzz
FUZZ_TARGETS ?= $(FUZZ_SRC:tests/fuzz/%_fuzz.c=%)
# h5_probe walks files with libhdf5, which crashes and hangs on damaged
# files (the probe process contains that): libFuzzer's fork mode goes on
# past them, and tests/fuzz/judge_h5_crashes.sh fails the run only on a
# crash of ours.
FUZZ_H5_PROBE_MODE := -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix=h5_probe-crashes/
fuzz:
	@command -v clang >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang; }
	$(MAKE) CC=clang SANITIZE=address,undefined BUILD=$(FUZZ_BUILD) WARN="-Wall -Wextra -Wno-format-nonliteral" \
	  CFLAGS="-O1 -g -fsanitize=fuzzer-no-link" $(FUZZ_BUILD)/libcellar.a
	@set -e; mkdir -p $(FUZZ_BUILD)/bin; for c in $(FUZZ_TARGETS); do n=$${c}_fuzz; \
	  clang -std=c11 -D_GNU_SOURCE -DCELLAR_LIBFUZZER -O1 -g -I. \
	    $$(pkg-config --cflags $(PKGS)) -fsanitize=fuzzer,address,undefined \
	    tests/fuzz/$$n.c $(FUZZ_BUILD)/libcellar.a -o $(FUZZ_BUILD)/bin/$$n $(LDLIBS); \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$c; cp -n tests/fuzz/corpus/$$c/* $(FUZZ_BUILD)/corpus/$$c/ 2>/dev/null || true; \
	  echo "== $$n: $(if $(FUZZ_RUNS),$(FUZZ_RUNS) runs,$(FUZZ_SECONDS) s)"; \
	  case $$c in h5_probe) mode="$(FUZZ_H5_PROBE_MODE)"; rm -rf $(FUZZ_BUILD)/h5_probe-crashes; \
	    mkdir -p $(FUZZ_BUILD)/h5_probe-crashes;; *) mode="";; esac; \
	  (cd $(FUZZ_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	    ./bin/$$n $$mode $(FUZZ_LENGTH) -print_final_stats=1 corpus/$$c > $$n.log 2>&1) || \
	    [ -n "$$mode" ] || \
	    { tail -60 $(FUZZ_BUILD)/$$n.log; echo "$$n: crashed (input in $(FUZZ_BUILD)/)"; exit 1; }; \
	  grep -E 'stat::number_of_executed_units|Done [0-9]+ runs|^#[0-9]+: cov' $(FUZZ_BUILD)/$$n.log | tail -1; \
	  if [ -n "$$mode" ]; then sh tests/fuzz/judge_h5_crashes.sh $(FUZZ_BUILD)/bin/$$n \
	    $(FUZZ_BUILD)/h5_probe-crashes || exit 1; fi; \
	done

run: deps
	$(MAKE) $(BUILD)/cellar
	./$(BUILD)/cellar --root examples --bind 127.0.0.1 --port $(PORT)

$(VENV)/.done: $(REQUIREMENTS)
	@test -n "$(PYTHON_FOR_VENV)" || { echo "no Python >= 3.11 found (make deps installs Debian's python3)"; exit 1; }
	rm -rf $(VENV)
	$(PYTHON_FOR_VENV) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r $(REQUIREMENTS)
	touch $@

venv: $(VENV)/.done

# Some unit tests write their HDF5 fixtures with the test venv's h5py.
unit: $(BUILD)/unit_tests venv
	CELLAR_TEST_PYTHON=$(abspath $(VENV))/bin/python ./$(BUILD)/unit_tests

# Sanitizer reports must fail the run.
SAN_ENV := ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 \
           UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# npm itself, once (written to a new folder, then moved in place).
$(NPM_CLI):
	rm -rf $(NPM_HOME) $(NPM_HOME).new
	npm install --prefix $(NPM_HOME).new --no-audit --no-fund --no-save npm@$(NPM_VERSION)
	mv $(NPM_HOME).new $(NPM_HOME)

# zarrita.js for the zarr client tests, from the committed lock file.
ZARR_CLIENTS := tests/http/zarr_clients
$(ZARR_CLIENTS)/node_modules/.package-lock.json: $(ZARR_CLIENTS)/package.json $(ZARR_CLIENTS)/package-lock.json | $(NPM_CLI)
	$(NPM_CI) --prefix $(ZARR_CLIENTS)

# playwright-core for the built-in viewer's browser tests (Debian's
# chromium drives the page), from its committed lock file.
VIEWER_TESTS := tests/browser/viewer
$(VIEWER_TESTS)/node_modules/.package-lock.json: $(VIEWER_TESTS)/package.json $(VIEWER_TESTS)/package-lock.json | $(NPM_CLI)
	$(NPM_CI) --prefix $(VIEWER_TESTS)

# The vitessce npm package and esbuild for tests/http/test_vitessce.py
# (the page is bundled from them in the test), from the committed lock file.
VITESSCE_TESTS := tests/browser/vitessce
$(VITESSCE_TESTS)/node_modules/.package-lock.json: $(VITESSCE_TESTS)/package.json $(VITESSCE_TESTS)/package-lock.json | $(NPM_CLI)
	$(NPM_CI) --prefix $(VITESSCE_TESTS)

# @h5web/app and esbuild for tests/http/test_h5web.py (the page is
# bundled from them in the test), from the committed lock file.
H5WEB_TESTS := tests/browser/h5web
$(H5WEB_TESTS)/node_modules/.package-lock.json: $(H5WEB_TESTS)/package.json $(H5WEB_TESTS)/package-lock.json | $(NPM_CLI)
	$(NPM_CI) --prefix $(H5WEB_TESTS)

# SeaweedFS's weed, the S3 server of tests/http/test_remote.py, built from
# the Go module proxy at this pinned version (the only one it serves) the
# first time and kept in CELLAR_TEST_CACHE (tests/build_weed.sh).
WEED_VERSION := v0.0.0-20261109003541-7506e5f91cd6
WEED_BIN := $(CELLAR_TEST_CACHE)/seaweedfs-$(WEED_VERSION)/weed
$(WEED_BIN):
	sh tests/build_weed.sh $(WEED_VERSION) $@

# taxonium-component and esbuild for the Taxonium browser test
# (tests/http/test_taxonium_browser.py), from its committed lock file.
TAXONIUM_TESTS := tests/browser/taxonium
$(TAXONIUM_TESTS)/node_modules/.package-lock.json: $(TAXONIUM_TESTS)/package.json $(TAXONIUM_TESTS)/package-lock.json | $(NPM_CLI)
	$(NPM_CI) --prefix $(TAXONIUM_TESTS)

pytest: $(BUILD)/cellar venv $(ZARR_CLIENTS)/node_modules/.package-lock.json $(VIEWER_TESTS)/node_modules/.package-lock.json \
        $(VITESSCE_TESTS)/node_modules/.package-lock.json $(TAXONIUM_TESTS)/node_modules/.package-lock.json \
        $(H5WEB_TESTS)/node_modules/.package-lock.json $(WEED_BIN)
	$(SAN_ENV) CELLAR_BIN=$(abspath $(BUILD)/cellar) CELLAR_WEED=$(WEED_BIN) $(VENV)/bin/python -m pytest -q tests/http

# The layering rules of the README's "Layout", on what the preprocessor includes.
layout-check:
	@CC="$(CC)" CPPFLAGS="$(shell pkg-config --cflags $(PKGS) 2>/dev/null)" sh tests/layout_check.sh

# The whole malformed-store corpus (tests/http/test_malformed.py; make test
# runs a seeded subset of it) against the sanitizer build.  Not part of
# make test: it takes a while.
test-corpus: deps
	$(MAKE) SANITIZE=address,undefined build-san/cellar venv
	$(SAN_ENV) CELLAR_CORPUS=full CELLAR_BIN=$(abspath build-san/cellar) \
	  $(VENV)/bin/python -m pytest -q tests/http/test_malformed.py

# schemathesis against the OpenAPI description with a few hundred examples
# per operation (make test runs 60 per operation, which fits its time);
# not part of make test: about half an hour on 2 cores.
conformance: $(BUILD)/cellar venv
	CELLAR_ST_EXAMPLES=300 CELLAR_ST_TIMEOUT=5400 CELLAR_BIN=$(abspath $(BUILD)/cellar) \
	  $(VENV)/bin/python -m pytest -q tests/http/test_openapi_conformance.py

# One build: unit tests, then the HTTP suite against the real binary.
check: $(BUILD)/unit_tests $(BUILD)/cellar venv
	$(MAKE) layout-check
	$(SAN_ENV) CELLAR_TEST_PYTHON=$(abspath $(VENV))/bin/python ./$(BUILD)/unit_tests
	$(MAKE) fuzz-replay
	$(MAKE) pytest

# Everything, twice: a plain build, and one under AddressSanitizer and
# UndefinedBehaviorSanitizer (make SANITIZE=address,undefined test runs only that one).
ifeq ($(SANITIZE),)
test: deps
	$(MAKE) check
	$(MAKE) SANITIZE=address,undefined check
else
test: deps
	$(MAKE) check
endif

# Benchmarks against the references (bench/, BENCHMARKS.md); never part of
# `make test`.  A quick run by default (about 9 minutes with the tree and
# matrix sections; BENCH_ONLY=... runs some sections); the full one is
#   make bench BENCH_SCALE=1 BENCH_DURATION=15
BENCH_SCALE    ?= 0.1
BENCH_DURATION ?= 4
BENCH_REPEAT   ?= 1
bench: deps $(BUILD)/cellar $(WEED_BIN)
	BENCH_SCALE=$(BENCH_SCALE) BENCH_DURATION=$(BENCH_DURATION) BENCH_REPEAT=$(BENCH_REPEAT) \
	  CELLAR_BIN=$(abspath $(BUILD)/cellar) CELLAR_WEED=$(WEED_BIN) sh bench/run.sh

# The zip section of BENCHMARKS.md: cellar's storage/zip against libzip and
# minizip (bench/zip_libs.c) on zarr zips of 1,000 and 100,000 entries; about
# two minutes (the zips written once into bench/data/zip/).  Never part of
# make test: its packages, libzip-dev and libminizip-dev, are installed by
# bench/zip_libs.sh when missing, not listed in DEB_PKGS.
bench-zip: $(BUILD)/libcellar.a
	sh bench/zip_libs.sh $(BUILD)

# The README's two commands on a fresh Debian 12 (tests/fresh_check.sh): a
# minimal bookworm made by mmdebstrap, this repository's HEAD cloned into it,
# make run (served, then stopped) and make test in a chroot there.  Needs
# root; about 15 minutes; never part of make test.
fresh-check:
	sh tests/fresh_check.sh

# docker/Dockerfile built with podman (vfs storage, chroot isolation) on a
# debian:bookworm-slim made by mmdebstrap, checked under 100 MB, and run
# from its exported filesystem in a chroot as the image's user, read-only,
# on examples/ (docker/image_check.sh).  Needs root; about 8 minutes;
# never part of make test.
image-check:
	bash docker/image_check.sh

clean:
	rm -rf build build-san build-fuzz

-include $(LIB_OBJ:.o=.d) $(UNIT_OBJ:.o=.d) $(FUZZ_SRC:%.c=$(BUILD)/%.d) $(BUILD)/server/main.d $(BUILD)/server/probe_heap.d
