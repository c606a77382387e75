# syntax=docker/dockerfile:1
# The vcproxy image: `vcproxy serve` on a slim Python, the runtime dependencies only, pinned with hashes
# (requirements/runtime.txt, made by pip-compile from pyproject.toml). Non-root, and it writes nothing
# outside /tmp, so it runs with a read-only root filesystem. docs/deploy.md#the-image says how to build it.
#
#   docker build -t vcproxy:0.1.0 .                       # the proxy
#   docker build -t vcproxy-analytics:0.1.0 --target analytics .   # plus PySpark and a JRE for `vcproxy traces aggregate`
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY requirements/runtime.txt requirements/runtime.txt
RUN python3 -m venv /opt/vcproxy \
 && /opt/vcproxy/bin/pip install --require-hashes --only-binary :all: -r requirements/runtime.txt
COPY pyproject.toml README.md ./
COPY proxy proxy
COPY vcproxy_tools vcproxy_tools
COPY rewrite_rules rewrite_rules
# The compiled walker's wheel, where `make image` built it into native/wheels (a Rust toolchain on the
# build host, none in the image); without one the proxy runs on the pure-Python path and says so at start.
COPY native/wheels native/wheels
# --no-deps: every dependency came pinned and hashed above; the wheels bring only vcproxy itself.
RUN /opt/vcproxy/bin/pip install --no-deps . \
 && if ls native/wheels/*.whl >/dev/null 2>&1; then /opt/vcproxy/bin/pip install --no-deps native/wheels/*.whl; fi \
 && /opt/vcproxy/bin/python -m compileall -q /opt/vcproxy/lib

# The proxy as it runs; the stages below add to it. The last stage is what a plain build gives.
FROM ${PYTHON_IMAGE} AS base
RUN groupadd --system --gid 10001 vcproxy \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin vcproxy
COPY --from=build /opt/vcproxy /opt/vcproxy
ENV PATH=/opt/vcproxy/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /tmp
# 9192: bootstrap (brokers from 9193 + node id, or all on 9192 with SNI); 9404: /metrics, /healthz, /readyz.
EXPOSE 9192 9404
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s CMD ["vcproxy", "probe", "http://127.0.0.1:9404/healthz"]
ENTRYPOINT ["vcproxy"]
CMD ["serve", "--config", "/etc/vcproxy/config/config.yaml"]

FROM base AS analytics
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
COPY requirements/analytics.txt /tmp/analytics.txt
RUN /opt/vcproxy/bin/pip install --no-cache-dir --require-hashes -r /tmp/analytics.txt && rm /tmp/analytics.txt
USER 10001:10001
ENTRYPOINT ["vcproxy", "traces", "aggregate"]
CMD ["--help"]

# Last, so that `docker build .` (and `buildah bud` without --target) gives the proxy, not analytics.
FROM base AS runtime
