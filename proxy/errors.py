"""The proxy's exception root: every error the runtime raises is one of three kinds.

* `MalformedInput`: bytes or values from outside (a client, a broker, a file) that Kafka would not read
  either; the connection is closed or the request refused, as a broker does.
* `Refusal`: a well-formed request the proxy will not carry out; it is answered with the API's Kafka error
  code (`code`, where the raiser knows it).
* `InternalFault`: the proxy's own failure (a state store it cannot reach, an upstream that fails it, a
  schema it cannot build an answer from): logged and the connection closed, never blamed on the client.

Each class keeps the built-in base it had (ValueError, OSError, ...), so existing `except` clauses catch
what they caught before.
"""

from __future__ import annotations


class ProxyError(Exception):
    """The root: `except ProxyError` catches every error the proxy raises on purpose."""


class MalformedInput(ProxyError):
    """Input Kafka would not read: closed or refused, as a broker does."""


class Refusal(ProxyError):
    """A request the proxy refuses, with the API's Kafka error code."""


class InternalFault(ProxyError):
    """The proxy's own failure, not the client's."""


class CodecError(MalformedInput):
    """A body the proxy must rewrite could not be decoded or encoded (proxy/protocol/codec.py), or an entity
    could not be built (proxy/protocol/entities.py)."""


class ProtocolViolation(MalformedInput):
    """The client or the broker broke the protocol: close this one connection."""
