"""`vcproxy demo`: a local 3-broker Kafka plus the proxy, in the foreground, until Ctrl-C."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path

DEMO_KAFKA_BASE_PORT = 39092


def _instructions(bootstrap: str) -> str:
    return f"""
vcproxy is running. Bootstrap servers: {bootstrap}

  kcat:            kcat -b {bootstrap} -L
  confluent-kafka: python -c "from confluent_kafka.admin import AdminClient; \\
                   print(AdminClient({{'bootstrap.servers': '{bootstrap}'}}).list_topics(timeout=10).brokers)"
  Kafka's tools:   .venv/bin/vcproxy kafka tool kafka-topics --bootstrap-server {bootstrap} --list
                   .venv/bin/vcproxy kafka tool kafka-console-producer --bootstrap-server {bootstrap} --topic demo
                   .venv/bin/vcproxy kafka tool kafka-console-consumer --bootstrap-server {bootstrap} \\
                       --topic demo --from-beginning

Ctrl-C stops the proxy and the Kafka brokers.
"""


def run_demo(args: argparse.Namespace) -> int:
    import trio

    from .config import ConfigError, load_config
    from .kafka.cluster import start_cluster, stop_cluster
    from .kafka.errors import KafkaLauncherError
    from .net.server import serve

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"vcproxy: invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, config.logging.level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    kafka_dir = Path(args.dir).resolve() / "kafka"
    if (kafka_dir / "cluster.json").exists():  # a previous demo killed without cleanup
        stop_cluster(kafka_dir)
    shutil.rmtree(kafka_dir, ignore_errors=True)
    try:
        print("starting a local 3-broker Kafka (racks r1, r2, r3)...", file=sys.stderr)
        cluster = start_cluster(kafka_dir, brokers=3, racks=["r1", "r2", "r3"], base_port=args.kafka_base_port)
        upstream = config.upstream.model_copy(update={"bootstrap_servers": cluster.bootstrap.split(",")})
        config = config.model_copy(update={"upstream": upstream})
        lc = config.listeners
        print(_instructions(f"{lc.effective_advertised_host}:{lc.bootstrap_port}"), flush=True)
        trio.run(serve, config)
    except KafkaLauncherError as exc:
        print(f"vcproxy demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    finally:
        print("stopping Kafka...", file=sys.stderr)
        stop_cluster(kafka_dir)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="run a local Kafka and the proxy with the demo config (Ctrl-C stops both)")
    demo.add_argument("--config", default="config/demo.yaml")
    demo.add_argument("--dir", default=".vcproxy/demo", help="working directory for the Kafka brokers")
    demo.add_argument("--kafka-base-port", type=int, default=DEMO_KAFKA_BASE_PORT)
    demo.set_defaults(func=run_demo)
