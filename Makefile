# The two commands a new user needs: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test unit integration lint bench kafka-dist clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

# Resolve the Apache Kafka jars from Maven Central into the cache (~/.cache/vcproxy/kafka).
kafka-dist: $(VENV)/.installed
	$(PY) -c "from proxy.kafka.dist import ensure_dist, ensure_streams_libs; print(ensure_dist()); print(ensure_streams_libs())"

# A local 3-broker Kafka plus the proxy on 127.0.0.1:9192 with config/demo.yaml; Ctrl-C stops both.
run: kafka-dist
	$(PY) -m proxy demo --config config/demo.yaml

# Lint, unit tests, then integration tests against a real Kafka started from Maven artifacts.
test: kafka-dist
	$(VENV)/bin/ruff check proxy tests benchmarks
	$(VENV)/bin/ruff format --check proxy tests benchmarks
	$(VENV)/bin/pytest -q -ra

unit: $(VENV)/.installed
	$(VENV)/bin/pytest -q tests/unit

integration: kafka-dist
	$(VENV)/bin/pytest -q -ra tests/integration

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check proxy tests benchmarks
	$(VENV)/bin/ruff format --check proxy tests benchmarks

# Direct-to-Kafka vs through-the-proxy, alternating rounds; figures go to docs/performance.md.
bench: kafka-dist
	$(PY) -m proxy bench

clean:
	rm -rf .vcproxy .pytest_cache .ruff_cache
