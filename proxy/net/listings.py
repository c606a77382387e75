"""The broker's groups and transactional ids, for the management plane (Trio I/O).

Each broker coordinates some groups and transactions and lists only its own, so ListGroups and
ListTransactions go to every broker, concurrently, on connections of their own opened with the proxy's
upstream login (never a client's): what a broker with ACLs lets the proxy see is what the plane sees.
DeleteGroups goes to each group's coordinator (FindCoordinator, batched). proxy/management/inventory.py
turns the listing into each VC's names.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import trio
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_groups.v2.response import DeleteGroupsResponse
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.list_groups.v4.response import ListGroupsResponse
from kio.schema.list_transactions.v0.request import ListTransactionsRequest
from kio.schema.list_transactions.v0.response import ListTransactionsResponse

from ..core.endpoints import BrokerEndpoint
from ..identity import CLIENT_ID
from ..management.inventory import Listing
from ..protocol import codec
from ..protocol.framing import frame
from ..protocol.headers import encode_request_header, response_body_offset
from . import upstream as up
from .frames import FrameReader

_correlation = itertools.count(1)
ERRORS = (OSError, trio.TooSlowError, trio.BrokenResourceError, codec.CodecError, ValueError)
GONE = (ErrorCode.none, ErrorCode.group_id_not_found)  # DeleteGroups: deleted, or nothing left to delete


class UpstreamListings:
    """Asks the brokers `brokers()` returns (the server's discovered cluster) within `timeout` seconds."""

    def __init__(
        self, brokers: Callable[[], Sequence[BrokerEndpoint]], security: up.UpstreamSecurity, timeout: float = 10.0
    ):
        self.brokers = brokers
        self.security = security
        self.timeout = timeout

    async def listing(self) -> Listing:
        brokers = list(self.brokers())
        if not brokers:
            return Listing(error="no upstream broker known yet")
        groups: dict[str, str] = {}
        txns: dict[str, str] = {}
        errors: list[str] = []

        async def one(broker: BrokerEndpoint) -> None:
            try:
                with trio.fail_after(self.timeout):
                    listed = await _ask(broker, self.security, self.timeout, ListGroupsRequest(), ListGroupsResponse)
                    if listed.error_code != ErrorCode.none:
                        raise ValueError(f"ListGroups: {listed.error_code.name}")
                    groups.update((g.group_id, g.group_state) for g in listed.groups)
                    txn = await _ask(
                        broker, self.security, self.timeout, ListTransactionsRequest(), ListTransactionsResponse
                    )
                    if txn.error_code != ErrorCode.none:
                        raise ValueError(f"ListTransactions: {txn.error_code.name}")
                    txns.update((t.transactional_id, t.transaction_state) for t in txn.transaction_states)
            except ERRORS as exc:
                errors.append(f"broker {broker.node_id}: {exc or type(exc).__name__}")

        async with trio.open_nursery() as nursery:
            for broker in brokers:
                nursery.start_soon(one, broker)
        return Listing(groups, txns, "; ".join(sorted(errors)) or None)

    async def delete_groups(self, groups: list[str]) -> dict[str, str | None]:
        """group -> why it was not deleted (the error's name), None when deleted or already gone."""
        out: dict[str, str | None] = dict.fromkeys(groups, "not asked")
        brokers = {b.node_id: b for b in self.brokers()}
        try:
            with trio.fail_after(self.timeout * 2):
                found = await _ask(
                    next(iter(brokers.values())),
                    self.security,
                    self.timeout,
                    FindCoordinatorRequest(coordinator_keys=tuple(groups)),
                    FindCoordinatorResponse,
                )
                by_node: dict[int, list[str]] = {}
                for c in found.coordinators:
                    if c.error_code != ErrorCode.none:
                        out[c.key] = c.error_code.name
                    else:
                        by_node.setdefault(int(c.node_id), []).append(c.key)
                for node, names in by_node.items():
                    broker = brokers.get(node)
                    if broker is None:
                        continue  # a coordinator the proxy has not discovered yet: "not asked"
                    deleted = await _ask(
                        broker,
                        self.security,
                        self.timeout,
                        DeleteGroupsRequest(groups_names=tuple(names)),
                        DeleteGroupsResponse,
                    )
                    for r in deleted.results:
                        out[r.group_id] = None if r.error_code in GONE else r.error_code.name
        except (*ERRORS, StopIteration) as exc:
            for group, why in out.items():
                if why == "not asked":
                    out[group] = f"the brokers could not be asked: {exc or type(exc).__name__}"
        return out


async def _ask(broker: BrokerEndpoint, security: up.UpstreamSecurity, timeout: float, request: Any, cls: type) -> Any:
    """One request on a connection of its own (these are rare: a management RPC's, not a client's)."""
    stream = await up.connect((broker.host, broker.port), timeout, security)
    async with stream:
        header = encode_request_header(
            int(request.__api_key__), int(request.__version__), next(_correlation), CLIENT_ID, 2
        )
        await stream.send_all(frame(header + codec.encode(request)))
        response = await FrameReader(stream, 64 * 1024 * 1024, 64 * 1024).next_frame()
        if response is None:
            raise OSError(f"broker {broker.node_id} closed the connection")
        body, _ = codec.decode(cls, response, response_body_offset(response, 1))
        return body
