"""Session-wide fixtures: the real Kafka cluster that tests/integration runs against.

``VCPROXY_KAFKA_MODE`` picks where it comes from (see docs/kafka-launcher.md):

* ``auto`` (default): testcontainers' Kafka module if the package is importable and a Docker engine
  answers, else ``local``;
* ``local``: 3 brokers (racks r1, r2, r3, SASL listener) from vcproxy_tools.kafka's launcher;
* ``testcontainers``: one containerised broker (``VCPROXY_KAFKA_IMAGE``);
* ``external``: an existing cluster at ``VCPROXY_KAFKA_BOOTSTRAP``.

The cluster is never skipped: if it cannot be started the fixture raises, so every test using it fails.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import cpu_profile
from tests.integration import franz_go
from vcproxy_tools import process
from vcproxy_tools.kafka.cluster import BROKER_JVM_ENV, BrokerInfo, start_cluster, stop_cluster
from vcproxy_tools.kafka.dist import DEFAULT_KAFKA_VERSION
from vcproxy_tools.proxy_forks import ForkServer

MODES = ("auto", "local", "testcontainers", "external")

# Every broker the suite starts (the session's cluster, the launcher's and the demo's tests, in this process or a
# child) lives minutes, not months: C1 and the serial GC (vcproxy_tools/kafka/cluster.py, LEAN_BROKER_JVM_FLAGS) in
# place of C2 and G1, whose compiling and concurrent threads were a large share of the suite's CPU (docs/performance.md,
# "The test suite's CPU"). What the brokers do is the same; `VCPROXY_KAFKA_BROKER_JVM=service` runs the suite on the
# service flags.
os.environ.setdefault(BROKER_JVM_ENV, "lean")

# The suite's proxies (vcproxy_tools.process.ProxyProcess, some two hundred) are forked from one process per test
# process that has imported the proxy once: 0.8 of a proxy's 1.0 s of CPU to listen is that import
# (vcproxy_tools/proxy_forks.py). The same `main`, arguments, config, log, working directory and environment.
# test_image_install and test_observability still start `vcproxy serve` as a process of its own;
# `VCPROXY_TEST_PROXY_FORKS=0` starts every proxy so.
PROXY_FORKS = ForkServer()
if os.environ.get("VCPROXY_TEST_PROXY_FORKS", "1") != "0":
    process.launch_with(
        lambda args, log: PROXY_FORKS.spawn(args, Path.cwd(), {**os.environ, "PYTHONUNBUFFERED": "1"}, log)
    )
    cpu_profile.watch_forks(PROXY_FORKS)
INTEGRATION_DIR = Path(__file__).resolve().parent / "integration"


# Seconds the slowest modules took in a whole run on a 2-core machine (the list `make test` ends with; refresh
# it when it changes much). With pytest-xdist the suite runs them first (`make test TEST_WORKERS=N`: --dist loadfile
# --no-loadscope-reorder) a worker takes the next module in collection order when it is free, so a long module
# collected late would run alone at the end. Other integration modules follow, the unit tests last (short ones
# fill the workers' gaps).
SLOW_MODULES: dict[str, int] = {
    "test_franz_go_suite": 300,
    "test_demo": 185,
    "test_quotas": 190,
    "test_auth": 112,
    "test_acls": 93,
    "test_availability": 70,
    "test_decisions_race": 66,
    "test_tenancy_admin": 74,
    "test_kafka_launcher": 71,
    "test_management": 71,
    "test_tenancy_sasl": 65,
    "test_broker_fault": 60,
    "test_acl_admin": 58,
    "test_privilege_matrix": 58,
    "test_traces_e2e": 76,
    "test_streams_groups": 49,
    "test_workers": 45,
    "test_traces_aggregate": 85,
    "test_state_store": 46,
    "test_image_install": 44,
    "test_go_client": 41,
    "test_equivalence": 41,
    "test_relay": 41,
    "test_onboarding": 40,
    "test_users_runtime": 38,
    "test_state_guard": 33,
    "test_kip_semantics": 28,
    "test_create_race": 26,
    "test_tenant_hardening": 26,
    "test_observability": 26,
    "test_robustness": 25,
    "test_sni": 23,
}


def _weight(item: pytest.Item) -> int:
    path = Path(item.path)
    if INTEGRATION_DIR not in path.resolve().parents:
        return 0
    return SLOW_MODULES.get(path.stem, 1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Everything under tests/integration needs the real cluster: `-m "not integration"` leaves it out.
    for item in items:
        if INTEGRATION_DIR in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.integration)
    # With pytest-xdist (the workers collect; TEST_WORKERS in the Makefile): longest modules first, each module's
    # tests in their own order (a stable sort). One process keeps the collection's order.
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: -_weight(item))


# -- where the suite's time goes (issue 24): seconds per test module, printed at the end of the run --

_MODULE_SECONDS: defaultdict[str, float] = defaultdict(float)
_MODULE_CPU: defaultdict[str, float] = defaultdict(float)
_module_started: dict[str, float] = {}  # in the process running the tests: module -> CPU seconds at its start
_LAST_OF_MODULE = pytest.StashKey[bool]()
_SESSION_START = time.monotonic()
SLOWEST_MODULES = 25


# franz-go's table (tests/integration/test_franz_go_suite.py): rows sent as report properties, since with
# pytest-xdist the tests run in workers and this summary is printed by the process that started them.
_FRANZ_GO_ROWS: dict[str, dict[str, franz_go.Cell]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # setup + call + teardown: a module's fixtures are set up in its first test and torn down in its last.
    _MODULE_SECONDS[report.nodeid.split("::", 1)[0]] += report.duration
    for name, value in report.user_properties:
        if name == cpu_profile.REPORT_PROPERTY:
            _MODULE_CPU[report.nodeid.split("::", 1)[0]] += value
        if name == franz_go.REPORT_PROPERTY:
            test, cells = franz_go.row_of(value)
            _FRANZ_GO_ROWS[test] = cells


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    # A module's fixtures are set up with its first test and torn down with its last: its CPU is measured
    # from before the one to after the other, and sent with the last test's teardown report.
    module = str(item.path)
    _module_started.setdefault(module, cpu_profile.seconds())
    item.stash[_LAST_OF_MODULE] = nextitem is None or nextitem.path != item.path
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if call.when == "teardown" and item.stash.get(_LAST_OF_MODULE, False):
        started = _module_started.pop(str(item.path), None)
        if started is not None:
            report.user_properties.append((cpu_profile.REPORT_PROPERTY, cpu_profile.seconds() - started))
    return report


def _franz_go_table(terminalreporter: Any) -> None:
    if not _FRANZ_GO_ROWS:
        return
    rows = {test: _FRANZ_GO_ROWS[test] for test in franz_go.TESTS if test in _FRANZ_GO_ROWS}
    text = franz_go.table(rows, franz_go.WAYS)
    target = os.environ.get("VCPROXY_FRANZ_GO_REPORT")
    if target:
        Path(target).write_text(text + "\n")
    terminalreporter.section(f"franz-go pkg/kgo {franz_go.VERSION}: direct, proxy, virtual cluster")
    terminalreporter.write_line(text)


@pytest.hookimpl(trylast=True)  # after pytest's own --durations list
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    _franz_go_table(terminalreporter)
    if not _MODULE_SECONDS:
        return
    slowest = sorted(_MODULE_SECONDS.items(), key=lambda item: item[1], reverse=True)
    terminalreporter.section(f"slowest {min(SLOWEST_MODULES, len(slowest))} of {len(slowest)} test modules")
    for module, seconds in slowest[:SLOWEST_MODULES]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {_MODULE_CPU.get(module, 0.0):7.1f} s CPU  {module}")
    in_tests = sum(_MODULE_SECONDS.values())
    wall = time.monotonic() - _SESSION_START
    terminalreporter.write_line(
        f"total: {in_tests:.0f} s in {len(slowest)} modules (setup, call, teardown), {wall / 60:.1f} min of session; "
        f"{sum(_MODULE_CPU.values()) / 60:.1f} min of CPU (the tests' processes and their clusters)"
    )


@dataclass
class RemoteCluster:
    """A cluster this session did not start (external or container): same attributes as ClusterInfo."""

    bootstrap: str
    sasl_bootstrap: str | None
    brokers: list[BrokerInfo]
    cluster_id: str
    version: str | None
    dir: Path | None = None
    sasl_users: dict[str, str] = field(default_factory=dict)

    def stop_broker(self, node_id: int, hard: bool = False) -> None:
        raise NotImplementedError("stopping a broker needs the local launcher (VCPROXY_KAFKA_MODE=local)")

    def start_broker(self, node_id: int, timeout: float = 60) -> None:
        raise NotImplementedError("starting a broker needs the local launcher (VCPROXY_KAFKA_MODE=local)")


def _describe(bootstrap: str, **client_conf: Any) -> tuple[str, list[BrokerInfo]]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **client_conf})  # must outlive the future
    result = admin.describe_cluster(request_timeout=30).result(timeout=60)
    brokers = sorted(BrokerInfo(n.id, n.host, n.port, n.rack) for n in result.nodes)
    return result.cluster_id, brokers


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=5).ping()
    except Exception:
        return False
    return True


def kafka_mode() -> str:
    mode = os.environ.get("VCPROXY_KAFKA_MODE", "auto").strip().lower()
    if mode not in MODES:
        raise pytest.UsageError(f"VCPROXY_KAFKA_MODE={mode!r}; expected one of {', '.join(MODES)}")
    if mode == "auto":
        has_tc = importlib.util.find_spec("testcontainers") is not None
        mode = "testcontainers" if has_tc and _docker_answers() else "local"
    return mode


def kafka_base_port(brokers: int, sasl: bool) -> int:
    """``VCPROXY_KAFKA_BASE_PORT`` if set, else a base whose every port is free now (two suites can share a machine)."""
    from tests.integration.ports import free_kafka_base_port

    fixed = os.environ.get("VCPROXY_KAFKA_BASE_PORT")
    return int(fixed) if fixed else free_kafka_base_port(brokers, sasl)


# franz-go's TestShareGroupETL kills consumers and releases records on purpose, and counts on no record reaching the
# broker's delivery limit (default 5): on a loaded 2-core machine records reached 4 deliveries directly and 5 through
# the proxy (timing, not translation: the plain relay too), one was archived and the test waited for it for ever.
# The limit's maximum (10) leaves the chaos the test means room on a slow machine.
#
# Leaders stay where they are: Kafka's periodic preferred-leader election (every 300 s once a bounced broker has left
# its partitions' leadership to others) moved a group coordinator in the middle of a later test that counts every
# heartbeat answer (NOT_COORDINATOR, test_tenant_hardening's regex test). Tests that bounce a broker do not need the
# leaders back; the ones that follow find coordinators and leaders wherever they are.
#
# KIP-848 and streams group members are fenced after 30 s without a heartbeat, not the launcher's 6 s: while franz-go's
# three ways saturate both cores, a member of TestGroupETL through the VC went 6 s unheard and the broker fenced it
# ("member session expired"); its revoke-time commit then failed UNKNOWN_MEMBER_ID and another member read its records
# again (Kafka's default is 45 s). Members here leave by closing, so no test waits for an expiry; heartbeats stay 0.5 s.
TEST_BROKER_PROPERTIES = {
    "group.share.delivery.count.limit": "10",
    "auto.leader.rebalance.enable": "false",
    "group.consumer.session.timeout.ms": "30000",
    "group.streams.session.timeout.ms": "30000",
}


def _local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    env_dir = os.environ.get("VCPROXY_KAFKA_DIR")
    cluster_dir = Path(env_dir) if env_dir else tmp_path_factory.mktemp("kafka")
    cpu_profile.watch_cluster(cluster_dir)
    info = start_cluster(
        cluster_dir,
        brokers=3,
        racks=["r1", "r2", "r3"],
        version=os.environ.get("VCPROXY_KAFKA_VERSION", DEFAULT_KAFKA_VERSION),
        base_port=kafka_base_port(brokers=3, sasl=True),
        sasl=True,
        timeout=240,  # slow CI machines; a healthy start takes ~25 s on 2 cores
        extra_properties=TEST_BROKER_PROPERTIES,
    )
    try:
        yield info
    finally:
        stop_cluster(info.dir)


def _testcontainers() -> Iterator[Any]:
    from testcontainers.kafka import KafkaContainer  # lazy: only this mode needs the package

    container = KafkaContainer(os.environ.get("VCPROXY_KAFKA_IMAGE", "confluentinc/cp-kafka:7.9.0"))
    if hasattr(container, "with_kraft"):
        container = container.with_kraft()
    with container as kafka:
        bootstrap = kafka.get_bootstrap_server()
        cluster_id, brokers = _describe(bootstrap)
        yield RemoteCluster(bootstrap, None, brokers, cluster_id, version=None)


def _external() -> RemoteCluster:
    bootstrap = os.environ.get("VCPROXY_KAFKA_BOOTSTRAP")
    if not bootstrap:
        raise RuntimeError("VCPROXY_KAFKA_MODE=external needs VCPROXY_KAFKA_BOOTSTRAP=host:port[,host:port...]")
    cluster_id, brokers = _describe(bootstrap)
    return RemoteCluster(
        bootstrap,
        os.environ.get("VCPROXY_KAFKA_SASL_BOOTSTRAP") or None,
        brokers,
        cluster_id,
        version=os.environ.get("VCPROXY_KAFKA_VERSION"),
    )


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The session's Kafka cluster: ``.bootstrap``, ``.sasl_bootstrap``, ``.brokers`` (node_id, host, port,
    rack), ``.cluster_id``, ``.dir``, ``.version``; with the local launcher also ``.stop_broker(node_id)`` /
    ``.start_broker(node_id)``."""
    mode = kafka_mode()
    if mode == "external":
        yield _external()
    elif mode == "testcontainers":
        yield from _testcontainers()
    else:
        yield from _local(tmp_path_factory)


def pytest_unconfigure(config: pytest.Config) -> None:
    PROXY_FORKS.close()  # the fork server ends; a proxy a test left running gets SIGTERM from it
