"""Bad input and pipelining at the wire level, against the real proxy and cluster."""

from __future__ import annotations

import signal
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.static.primitive import i16, i32, i64

from vcproxy_tools.process import ProxyProcess, proxy_config

from .ports import free_port_block
from .rawclient import RawClient

METADATA = MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def test_pipelined_requests_answered_in_order_with_their_correlation_ids(proxy_bootstrap):
    with RawClient(proxy_bootstrap) as raw:
        ids = list(range(1000, 1060))
        batch = b"".join(
            raw.encode(18, 3, cid, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
            if cid % 2
            else raw.encode(3, 12, cid, METADATA)
            for cid in ids
        )
        raw.send_raw(batch)  # all in flight at once
        got = []
        for cid in ids:
            frame = raw.read_frame()
            correlation_id, body = raw.decode(18 if cid % 2 else 3, 3 if cid % 2 else 12, frame)
            got.append(correlation_id)
            if cid % 2 == 0:
                assert all(b.host == "127.0.0.1" for b in body.brokers)
        assert got == ids


def test_api_versions_advertises_no_internal_apis(proxy_bootstrap):
    with RawClient(proxy_bootstrap) as raw:
        _, body = raw.request(18, 3, 1, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    keys = {int(k.api_key) for k in body.api_keys}
    assert {0, 1, 3, 18, 60}.issubset(keys)
    assert keys.isdisjoint({52, 53, 54, 56, 58, 62, 63, 67, 70, 73})
    assert 27 in keys  # WriteTxnMarkers: advertised as brokers do, refused per partition (next test)
    # The share-state APIs: a 4.2 broker lists them on its client listener, so does the proxy (issue 25:
    # franz-go's version probe read their absence as "at least v3.9"); refused per partition (below).
    assert {83, 84, 85, 86, 87} <= keys


def test_share_state_apis_are_refused_per_partition(proxy_bootstrap):
    import uuid

    from kio.schema.read_share_group_state.v0.request import PartitionData, ReadShareGroupStateRequest, ReadStateData

    topic_id = uuid.uuid4()
    request = ReadShareGroupStateRequest(
        group_id="any",
        topics=(
            ReadStateData(
                topic_id=topic_id,
                partitions=(PartitionData(partition=i32(0), leader_epoch=i32(0)),),
            ),
        ),
    )
    with RawClient(proxy_bootstrap) as raw:
        _, body = raw.request(84, 0, 6, request)
    [result] = body.results
    assert result.topic_id == topic_id
    assert [(int(p.partition), int(p.error_code)) for p in result.partitions] == [(0, 31)]


def test_write_txn_markers_is_refused_per_partition(proxy_bootstrap):
    from kio.schema.write_txn_markers.v1.request import (
        WritableTxnMarker,
        WritableTxnMarkerTopic,
        WriteTxnMarkersRequest,
    )

    marker = WritableTxnMarker(
        producer_id=i64(4242),
        producer_epoch=i16(0),
        transaction_result=False,
        topics=(WritableTxnMarkerTopic(name="anything", partition_indexes=(i32(0), i32(1))),),
        coordinator_epoch=i32(0),
    )
    with RawClient(proxy_bootstrap) as raw:
        _, body = raw.request(27, 1, 5, WriteTxnMarkersRequest(markers=(marker,)))
    partitions = body.markers[0].topics[0].partitions
    assert [(int(p.partition_index), int(p.error_code)) for p in partitions] == [(0, 31), (1, 31)]


def test_internal_api_is_refused_and_never_reaches_the_broker(proxy_bootstrap):
    with RawClient(proxy_bootstrap) as raw:
        # Vote (52) is controller-only; the proxy answers CLUSTER_AUTHORIZATION_FAILED itself.
        raw.send_raw(raw.encode(52, 0, 9, b"\x00\x00"))
        frame = raw.read_frame()
        assert int.from_bytes(frame[4:8], "big") == 9
        assert int.from_bytes(frame[9:11], "big") == 31


def test_malformed_and_oversized_frames_close_only_that_connection(proxy_bootstrap):
    admin = AdminClient({"bootstrap.servers": proxy_bootstrap})
    assert admin.list_topics(timeout=10).brokers
    with RawClient(proxy_bootstrap) as healthy:
        healthy.request(3, 12, 1, METADATA)
        for bad in (b"\xff\xff\xff\xf0garbage", b"\x7f\x00\x00\x00" + b"x" * 100, b"\x00\x00\x00\x02\x00\x03"):
            with RawClient(proxy_bootstrap) as raw:
                raw.send_raw(bad)
                if bad.startswith(b"\x00\x00\x00\x02"):
                    raw.sock.shutdown(1)  # a frame too short to hold a header, then EOF
                assert raw.is_closed()
        # The neighbour connection and new clients are unaffected.
        correlation_id, body = healthy.request(3, 12, 2, METADATA)
        assert correlation_id == 2 and body.brokers
    assert admin.list_topics(timeout=10).brokers


def test_sigterm_drains_and_exits_cleanly(kafka_cluster, tmp_path):
    # A drain timeout far above the bound below: idle connections must be closed at once, not waited for.
    config = proxy_config(kafka_cluster.bootstrap, free_port_block(), limits={"drain_timeout_seconds": 120})
    process = ProxyProcess(config, tmp_path, name="drain")
    process.start(timeout=90)
    try:
        acked = []
        producer = Producer(
            {"bootstrap.servers": process.bootstrap, "acks": "all", "linger.ms": 0, "reconnect.backoff.max.ms": 200}
        )
        for i in range(200):
            producer.produce("drain-test", str(i).encode(), on_delivery=lambda e, m: acked.append(e is None))
        assert producer.flush(30) == 0 and all(acked) and len(acked) == 200
        start = time.monotonic()
        process.proc.send_signal(signal.SIGTERM)
        assert process.proc.wait(180) == 0
        assert time.monotonic() - start < 60
        log = process.log_path.read_text()
        assert "received SIGTERM" in log and "draining" in log
    finally:
        process.stop()


def test_a_broker_that_appears_later_gets_its_port_without_config_change(kafka_cluster, tmp_path):
    node = max(b.node_id for b in kafka_cluster.brokers)
    kafka_cluster.stop_broker(node)
    restarted = False
    port = free_port_block()
    process = ProxyProcess(
        proxy_config(kafka_cluster.bootstrap, port, upstream={"metadata_refresh_seconds": 1}),
        tmp_path,
        name="discovery",
    )
    try:
        direct = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
        deadline = time.monotonic() + 120
        while node in direct.list_topics(timeout=10).brokers:  # until the controller has fenced the stopped broker
            assert time.monotonic() < deadline, f"broker {node} was never fenced"
            time.sleep(0.5)
        process.start(timeout=120)
        assert f"(broker {node})" not in process.log_path.read_text()
        kafka_cluster.start_broker(node)
        restarted = True
        deadline = time.monotonic() + 120
        while f"(broker {node})" not in process.log_path.read_text():
            assert time.monotonic() < deadline, f"broker {node} never got a listener:\n{process.log_tail()}"
            time.sleep(0.2)
        metadata = AdminClient({"bootstrap.servers": process.bootstrap}).list_topics(timeout=10)
        assert metadata.brokers[node].port == port + 1 + node
        with RawClient(f"127.0.0.1:{port + 1 + node}") as raw:  # the new listener really proxies to that broker
            _, body = raw.request(3, 12, 1, METADATA)
            assert node in {int(b.node_id) for b in body.brokers}
    finally:
        process.stop()
        if not restarted:
            kafka_cluster.start_broker(node)
