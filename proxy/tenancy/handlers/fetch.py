"""Fetch, ListOffsets and OffsetForLeaderEpoch: consumers only, with Fetch sessions and deleted topics."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from ..engine import TenantCall, TenantEngine
from ..fetch_deleted import answer_deleted
from ..fetch_sessions import FETCH_SESSIONS, FIRST_SESSION_VERSION
from ..model import (
    TenancyError,
)
from ..settings import MAX_FETCH_SESSIONS
from .calls import error_answer, response_cls

log = logging.getLogger(__name__)


# -- Fetch, ListOffsets, OffsetForLeaderEpoch: consumers only -------------------------------------------


def fetch_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    replica = body.replica_state.replica_id if hasattr(body, "replica_state") else getattr(body, "replica_id", -1)
    if int(replica) >= 0:
        raise error_answer(ex, int(ErrorCode.cluster_authorization_failed))  # follower fetch: brokers only
    if getattr(body, "cluster_id", None) is not None:
        body = dataclasses.replace(body, cluster_id=None)  # a KRaft replica field; never the client's
    session_id = int(getattr(body, "session_id", 0))
    if session_id != 0:
        epoch = int(body.session_epoch)
        # Owned per (broker, id): ids are unique per broker only. A connection whose broker is not known
        # yet (a bootstrap connection before its upstream) owns none.
        if FETCH_SESSIONS.owns(engine.vc.id, engine.broker(), session_id):
            ex.state["fetch_session"] = (session_id, epoch)
        elif epoch <= 0:
            # A full fetch (epoch 0: new session, -1: none) that also closes `session_id`. A broker
            # never refuses one for an unknown id: it closes the id if it has it and serves the fetch.
            # Answering FETCH_SESSION_ID_NOT_FOUND here made clients loop forever (franz-go keeps the
            # id after giving up on sessions and fetches with epoch -1: issue 18). Forward it without
            # the id: the fetch is served and nobody else's session is closed.
            body = dataclasses.replace(body, session_id=0)
        else:
            # An incremental fetch in a session this VC does not own (another tenant's, one the broker
            # evicted, or none at all): the broker's answer for an unknown id.
            log.info("virtual cluster %s: Fetch with fetch session %d it does not own", engine.vc.name, session_id)
            raise error_answer(ex, ErrorCode.fetch_session_id_not_found)
    return body


def fetch_spliced(engine: TenantEngine, ex: TenantCall, frame: memoryview, body_offset: int) -> None:
    """Fetch responses are spliced, never decoded: the session id sits at the head of the body."""
    if ex.version >= FIRST_SESSION_VERSION:
        # The broker now: the one the answer came from (a bootstrap connection knows it once connected).
        bound = engine.vc.settings.get(MAX_FETCH_SESSIONS)  # the VC's own, set by an operator (else the config's)
        own = bound if type(bound) is int and bound > 0 else None
        FETCH_SESSIONS.on_response(
            engine.vc.id, engine.broker(), ex.state.get("fetch_session"), frame[body_offset:], own
        )


def fetch_unseen(engine: TenantEngine, ex: TenantCall, frame: memoryview, body_offset: int) -> bytes | None:
    """A session's topic the VC has deleted: answered as a broker answers a deleted topic (fetch_deleted.py)."""
    return answer_deleted(response_cls(ex), frame, body_offset, ex.tx)


def replica_id_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if int(getattr(body, "replica_id", -1)) >= 0:
        raise TenancyError("replica requests are for brokers only")
    return body
