# The two commands a new user needs: `make run` and `make test`.
# The virtualenv's interpreter: the distribution's CPython (/usr/bin/python3) when it is 3.11 or newer and can
# make a virtualenv, else python3 from PATH; PYTHON=... chooses another. Debian, Ubuntu and Fedora build theirs
# with profile-guided optimisation, as the image's base is: on this project's machines the proxy spends 0.86-0.9x
# the CPU per request on it that it spends on pyenv's plain build (docs/performance.md, "A lone request beside
# Kroxylicious, and the interpreter").
PYTHON ?= $(shell /usr/bin/python3 -c 'import ensurepip, sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	&& echo /usr/bin/python3 || echo python3)
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_ARGS ?=

# pip shows what it downloads and how far on a terminal, and stays quiet elsewhere (CI logs). $(shell)
# captures stdout, so the test looks at stderr, which make shares with the terminal.
PIP := $(VENV)/bin/pip install --disable-pip-version-check $(shell [ -t 2 ] || echo -q)

.PHONY: run test unit integration compat librdkafka-deps lint bench kafka-dist helm franz-go image clean messages

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip

# One marker per kind of install: the runtime (what `make run` needs: no PySpark, pyarrow or test
# tools), and the runtime plus the test extra (pytest, ruff, PySpark and pyarrow for the analytics tests).
$(VENV)/.installed-run: pyproject.toml $(VENV)/.installed-native | $(PY)
	@echo "== installing vcproxy (runtime) into $(VENV)"
	$(PIP) -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed-native | $(PY)
	@echo "== installing vcproxy with its test extra into $(VENV)"
	$(PIP) -e '.[test]'
	touch $@

# The compiled walker (native/: Rust with PyO3, built by maturin from PyPI, crates from crates.io). Without
# cargo the proxy runs on the pure-Python path and says so at start; under CI=true that is a failure.
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock native/pyproject.toml $(wildcard native/src/*.rs)
$(VENV)/.installed-native: $(NATIVE_SOURCES) | $(PY)
	@if command -v cargo >/dev/null; then \
		echo "== building the compiled walker (native/) into $(VENV)"; $(PIP) ./native; \
	elif [ "$$CI" = true ]; then echo "cargo not found: CI builds the compiled walker (native/)" >&2; exit 1; \
	else echo "== cargo not found: the proxy will run on the pure-Python path (it says so at start)"; fi
	touch $@

# Any install has the launcher; without one, the runtime is enough.
$(VENV)/bin/vcproxy:
	$(MAKE) $(VENV)/.installed-run

# helm, for the chart's tests (tests/chart), built from the Go module proxy into the virtualenv.
HELM_VERSION ?= v3.16.4
$(VENV)/bin/helm: | $(PY)
	@echo "== installing helm $(HELM_VERSION) from the Go module proxy into $(VENV)/bin"
	GOBIN=$(abspath $(VENV)/bin) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

helm: $(VENV)/bin/helm

# franz-go's tests (tests/integration/franz_go.py) at their pinned release, compiled into the cache
# (~/.cache/vcproxy/franz-go) once; only the standard library is needed, so it can run while pip installs.
franz-go: | $(PY)
	$(PY) -m tests.integration.franz_go

# The container image with buildah where no Docker engine runs (docs/deploy.md#the-image): a Debian
# bookworm base made by mmdebstrap (Python 3.11), imported, then the Dockerfile. IMAGE names the result.
# BUILD_VOLUMES: e.g. a CA bundle and pip.conf for pip behind a TLS-intercepting proxy (build time only).
IMAGE ?= localhost/vcproxy:0.1.0
BUILD_VOLUMES ?=
image: | $(PY)
	mkdir -p .vcproxy
	rm -f native/wheels/*.whl
	$(PY) -m pip wheel --disable-pip-version-check -q --no-deps -w native/wheels ./native
	mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm .vcproxy/base.tar
	podman import .vcproxy/base.tar localhost/vcproxy-base:bookworm
	buildah bud --isolation chroot $(BUILD_VOLUMES) --build-arg PYTHON_IMAGE=localhost/vcproxy-base:bookworm --target runtime -t $(IMAGE) .

# Resolve the Apache Kafka jars from Maven Central into the cache (~/.cache/vcproxy/kafka), Kafka
# Streams included (the tests' Streams application); `make run` resolves what it needs by itself.
kafka-dist: | $(VENV)/bin/vcproxy
	$(VENV)/bin/vcproxy kafka dist --streams

# A local 3-broker Kafka plus the proxy on 127.0.0.1:9192 with config/demo.yaml; Ctrl-C stops both.
# The Kafka cluster (and so the virtual clusters' topics) is kept in .vcproxy/demo for the next run:
# `make clean` or `make run DEMO_ARGS=--fresh` starts over.
run: $(VENV)/.installed-run
	$(PY) -m vcproxy_tools demo --config config/demo.yaml $(DEMO_ARGS)

# Lint, unit tests, then integration tests against a real Kafka started from Maven artifacts. TEST_WORKERS=N runs
# modules side by side in N processes, each with its own Kafka cluster (pytest-xdist; 0: one process). Two on a 2-core
# machine: the suite's brokers run lean and its admin tools in one warm JVM per process, so two workers keep both
# cores busy without starving franz-go's heavy tests (docs/performance.md, "The test suite's CPU").
TEST_WORKERS ?= 2
# librdkafka's suite is `make compat`'s only, for now: the suite is over its 20-minute budget without it (issue 24);
# its CI subset alone took 3 to 9 minutes on a loaded machine, its first build 4 more (docs/compatibility.md).
COMPAT_ONLY = --ignore=tests/integration/test_librdkafka_suite.py
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
test: $(VENV)/.installed-test $(VENV)/bin/helm franz-go
	$(VENV)/bin/vcproxy kafka dist --streams
	$(VENV)/bin/ruff check proxy vcproxy_tools tests benchmarks
	$(VENV)/bin/ruff format --check proxy vcproxy_tools tests benchmarks
	@# The suite starts some 200 proxy and tool processes: each would compile the project's modules from source
	@# again where PYTHONDONTWRITEBYTECODE is set (as on our CI machines): 0.4-0.5 s of CPU a start. Compiled once here.
	$(PY) -m compileall -q proxy vcproxy_tools tests > /dev/null
	$(VENV)/bin/pytest -q -ra --durations=25 $(XDIST) $(COMPAT_ONLY)

unit: $(VENV)/.installed-test
	$(VENV)/bin/pytest -q tests/unit

integration: $(VENV)/.installed-test $(VENV)/bin/helm franz-go
	$(VENV)/bin/vcproxy kafka dist --streams
	$(VENV)/bin/pytest -q -ra --durations=25 $(XDIST) $(COMPAT_ONLY) tests/integration

# What librdkafka's build needs (test_librdkafka_suite.py builds its pinned release from source; npm fetches it):
# a C/C++ toolchain and the libraries its features use. Installs only what is missing (root, apt-get); npm is
# the machine's (Node.js's own, not Debian's).
LIBRDKAFKA_DEPS = build-essential pkg-config libssl-dev zlib1g-dev libzstd-dev liblz4-dev libsasl2-dev
librdkafka-deps:
	@command -v npm >/dev/null || { echo "librdkafka's source comes from the npm registry: no npm on PATH"; exit 1; }
	@missing=$$(for p in $(LIBRDKAFKA_DEPS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing; fi

# Client libraries' own suites and our equivalence scenarios, directly and through the proxy (also part of
# `make test`, librdkafka's only in part): franz-go's pkg/kgo tests and librdkafka's broker tests (all of them
# here, both group protocols: a few hours on 2 cores) three ways, the tables in docs/compatibility.md.
COMPAT_REPORT ?= .vcproxy/compat/franz-go.md
LIBRDKAFKA_REPORT ?= .vcproxy/compat/librdkafka.md
compat: $(VENV)/.installed-test librdkafka-deps
	$(VENV)/bin/vcproxy kafka dist
	mkdir -p $(dir $(COMPAT_REPORT)) $(dir $(LIBRDKAFKA_REPORT))
	VCPROXY_FRANZ_GO_REPORT=$(COMPAT_REPORT) VCPROXY_LIBRDKAFKA_REPORT=$(LIBRDKAFKA_REPORT) \
		VCPROXY_LIBRDKAFKA_ALL=1 $(VENV)/bin/pytest -q -ra \
		tests/integration/test_franz_go_suite.py tests/integration/test_librdkafka_suite.py \
		tests/integration/test_equivalence.py
	@echo "== franz-go's table: $(COMPAT_REPORT)"
	@echo "== librdkafka's table: $(LIBRDKAFKA_REPORT)"

# The management RPCs' classes, generated from their Kafka-style JSON definitions (proxy/protocol/messages/),
# and Kafka's API versions as kio knows them: run after editing a definition or upgrading kio, and check in
# proxy/protocol/management_messages.py and kafka_versions.py (unit tests compare each with its source).
messages: $(VENV)/.installed-run
	$(PY) -m proxy.protocol.message_gen
	$(PY) -m proxy.core.forward_plans_gen

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check proxy vcproxy_tools tests benchmarks
	$(VENV)/bin/ruff format --check proxy vcproxy_tools tests benchmarks

# Direct-to-Kafka vs through-the-proxy, alternating rounds; figures go to docs/performance.md.
bench: $(VENV)/.installed-run
	$(PY) -m vcproxy_tools bench

# Stops the demo's brokers if a killed demo left them running, then removes the demo's cluster and state.
clean:
	@if [ -x $(VENV)/bin/vcproxy ] && [ -f .vcproxy/demo/kafka/cluster.json ]; then \
		$(VENV)/bin/vcproxy kafka stop --dir .vcproxy/demo/kafka; fi
	rm -rf .vcproxy .pytest_cache .ruff_cache
