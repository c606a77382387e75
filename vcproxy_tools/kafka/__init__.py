"""Launcher for a real Apache Kafka (KRaft) cluster built from Maven Central artifacts (tests, demos)."""

from vcproxy_tools.kafka.cluster import (
    BrokerInfo,
    ClusterInfo,
    has_cluster,
    load_cluster,
    restart_cluster,
    running_pids,
    start_broker,
    start_cluster,
    stop_broker,
    stop_cluster,
)
from vcproxy_tools.kafka.dist import DEFAULT_KAFKA_VERSION, ensure_dist, ensure_extra_libs, ensure_streams_libs
from vcproxy_tools.kafka.errors import KafkaLauncherError
from vcproxy_tools.kafka.tools import TOOLS, run_tool, tool_argv, tool_command

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "TOOLS",
    "BrokerInfo",
    "ClusterInfo",
    "KafkaLauncherError",
    "ensure_dist",
    "ensure_extra_libs",
    "ensure_streams_libs",
    "has_cluster",
    "load_cluster",
    "restart_cluster",
    "run_tool",
    "running_pids",
    "start_broker",
    "start_cluster",
    "stop_broker",
    "stop_cluster",
    "tool_argv",
    "tool_command",
]
