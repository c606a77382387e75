"""A topic the VC no longer has, still in a fetch session: answered as a broker answers a deleted topic, sans-I/O.

An incremental fetch session (KIP-227) keeps the partitions its client added, and the client does not name
them again. When a VC deletes a topic its link and id go at once, while the broker keeps serving the session's
partitions: the physical topic stays when the delete only unlinks it (KIP-1134, the default), and even once
deleted its partitions stay in the session until the client forgets them. Kafka answers such a partition
UNKNOWN_TOPIC_OR_PARTITION under the id the session holds, without records (KafkaApis.handleFetchRequest: the
session still knows the topic's name, the metadata cache no longer does). Translated as any id the VC does not
own, the entry reached the client under the zero id and with the topic's records: franz-go dropped it as an
answer it never asked for, and so lost a deleted topic from its fetches at once, where against a broker it keeps
seeing the error until its metadata shows the topic gone (issue 25: its TestIssue434 took 1-5 s through a VC,
15 s directly). Such entries are re-encoded here: the client's own id (it is in its session), each partition
with that error and no records.

Only responses that carry such an entry are decoded (the entry alone), so the usual Fetch stays spliced.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol import codec, entities, walker
from ..protocol.primitives import INT32, encode_uvarint, read_int32, read_uvarint
from ..protocol.splice import read_string
from .translate import Translation


def answer_deleted(cls: type, frame: memoryview | bytes, body_offset: int, tx: Translation) -> bytes | None:
    """`frame` (a Fetch response, size prefix included) with each topic entry `tx` may not show replaced by
    a deleted topic's answer; None when there is none. Ids so answered are shown to the client as they are.

    A client that names such a topic again in its session sent it as a placeholder (proxy/tenancy/placeholders.py)
    that the broker's session then holds beside the id: a broker has the one entry the client added, so the
    placeholder's entry goes."""
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    topic_cls = entities.item_type(cls, "responses")
    by_id = "topic_id" in entities.field_names(topic_cls)
    skip = walker.entity_skipper(topic_cls)
    array, _ = walker.layout(cls, frame, body_offset).fields["responses"]
    if flexible:
        count, offset = read_uvarint(frame, array)
        count -= 1
    else:
        count, offset = read_int32(frame, array)
    entries: list[tuple[int, int, Any]] = []  # (start, end, topic id or name)
    for _ in range(max(count, 0)):
        start, offset = offset, skip(frame, offset)
        if by_id:
            entries.append((start, offset, uuid.UUID(bytes=bytes(frame[start : start + 16]))))
        else:
            entries.append((start, offset, read_string(frame, start, flexible)[0]))
    kind = "topic_id" if by_id else "topic"
    deleted = {value for _, _, value in entries if not tx.visible(kind, value)}
    if not deleted:
        return None
    edits: list[tuple[int, int, bytes]] = []
    for start, end, value in entries:
        if value in deleted:
            if by_id:
                tx.deleted_ids.add(value)
            entry, _ = codec.decode(topic_cls, frame, start)
            edits.append((start, end, codec.encode(_deleted(entry))))
        elif by_id and tx.sent_for(value) in deleted:
            edits.append((start, end, b""))
    kept = len(entries) - sum(1 for _, _, new in edits if not new)
    counted = encode_uvarint(kept + 1) if flexible else INT32.pack(kept)
    pieces: list[bytes] = [bytes(frame[4:array]), counted]
    position = entries[0][0]
    for start, end, replacement in edits:
        pieces += [bytes(frame[position:start]), replacement]
        position = end
    pieces.append(bytes(frame[position:]))
    body = b"".join(pieces)
    return len(body).to_bytes(4, "big") + body


def _deleted(entry: Any) -> Any:
    """Kafka's FetchResponse.partitionResponse for each partition: the error, an invalid high watermark, the
    other fields at their defaults, no records. UNKNOWN_TOPIC_ID stays: the broker did not know the id either."""
    partitions = []
    for p in entry.partitions:
        error = p.error_code if p.error_code == ErrorCode.unknown_topic_id else ErrorCode.unknown_topic_or_partition
        partitions.append(
            entities.build(type(p), partition_index=p.partition_index, error_code=error, high_watermark=-1)
        )
    return dataclasses.replace(entry, partitions=tuple(partitions))
