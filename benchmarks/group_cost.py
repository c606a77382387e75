"""What a virtual cluster's consumer group member costs the proxy: its Heartbeats and OffsetCommits, one at a time.

A raw client in `shell_cost.py`'s `tenant` mode (a VC of client id `vcbench`) joins a group as its only member
(JoinGroup twice: the member id, then the join; SyncGroup), then asks `--requests` Heartbeats (v3) and as many
OffsetCommits (v8, by name, of partition 0 of the bench topic), one at a time, for each checkout, in rounds; the
proxy's CPU per request of each. The first of each kind is the session's (it grants the group): not measured.

    PYTHONPATH=. .venv/bin/python benchmarks/group_cost.py --bootstrap 127.0.0.1:26092 \\
        --checkout before=/tmp/base,PYTHONPATH=/tmp/base:/tmp/base-native --checkout after=. --rounds 5
"""

from __future__ import annotations

import datetime
import functools
import tempfile
import uuid
from pathlib import Path
from typing import Any

from fetch_cost import Raw, nested, request_bytes  # this directory is on sys.path
from shell_cost import TOPIC, Proxy, checkout_args, rounds_of, spread, start_checkouts, stop_proxies

from proxy.protocol.apis import request_type
from proxy.protocol.entities import empty

MEMBER_ID_REQUIRED = 79


class Member(Raw):
    """A raw connection that joins a group of its own as its only member."""

    def __init__(self, proxy: Proxy) -> None:
        super().__init__(proxy)
        self.group = f"g-{uuid.uuid4().hex[:8]}"
        member, generation = self._join("")
        assignment = empty(nested("sync_group", 3, "SyncGroupRequestAssignment"), member_id=member, assignment=b"")
        sync = empty(
            request_type(14, 3),
            group_id=self.group,
            generation_id=generation,
            member_id=member,
            assignments=(assignment,),
        )
        answer = self.ask(14, 3, sync)
        assert int(answer.error_code) == 0, answer
        self.frames = {
            "Heartbeat": request_bytes(
                12, 3, 0, empty(request_type(12, 3), group_id=self.group, generation_id=generation, member_id=member)
            ),
            "OffsetCommit": request_bytes(8, 8, 0, self._commit(member, generation)),
        }

    def _join(self, member: str) -> tuple[str, int]:
        join = request_type(11, 5)
        protocol = empty(nested("join_group", 5, "JoinGroupRequestProtocol"), name="range", metadata=b"")
        body = empty(
            join,
            group_id=self.group,
            session_timeout=datetime.timedelta(seconds=30),
            rebalance_timeout=datetime.timedelta(seconds=30),
            member_id=member,
            protocol_type="consumer",
            protocols=(protocol,),
        )
        answer = self.ask(11, 5, body)
        if int(answer.error_code) == MEMBER_ID_REQUIRED and not member:
            return self._join(answer.member_id)
        assert int(answer.error_code) == 0, answer
        return answer.member_id, int(answer.generation_id)

    def _commit(self, member: str, generation: int) -> Any:
        partition = empty(
            nested("offset_commit", 8, "OffsetCommitRequestPartition"), partition_index=0, committed_offset=1
        )
        topic = empty(nested("offset_commit", 8, "OffsetCommitRequestTopic"), name=TOPIC, partitions=(partition,))
        return empty(
            request_type(8, 8),
            group_id=self.group,
            generation_id_or_member_epoch=generation,
            member_id=member,
            topics=(topic,),
        )

    def run(self, kind: str, n: int) -> None:
        frame = self.frames[kind]
        for _ in range(n):
            self.sock.sendall(frame)
            self.read()


def main() -> None:
    ap = checkout_args(__doc__, 29950)
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="group-cost-"))
    proxies: list[Proxy] = []
    try:
        proxies += start_checkouts(work, args, ["tenant"])
        members = {x.name: Member(x) for x in proxies}
        for member in members.values():
            for kind in member.frames:
                member.run(kind, 50)  # the first is the session's; the rest warm up
        runs = rounds_of(
            proxies,
            args.rounds,
            args.requests,
            lambda x: {k: functools.partial(members[x.name].run, k, args.requests) for k in members[x.name].frames},
        )
        print(f"{args.requests} requests one at a time a run, {args.rounds} rounds, µs CPU a request: median (range)")
        print(f"{'proxy':20} {'Heartbeat v3':>16} {'OffsetCommit v8':>16}")
        for x in proxies:
            print(f"{x.name:20} {spread(runs[x.name, 'Heartbeat']):>16} {spread(runs[x.name, 'OffsetCommit']):>16}")
    finally:
        stop_proxies(proxies, work)


if __name__ == "__main__":
    main()
