"""Authentication at the proxy: SASL and TLS for client listeners, and the proxy's own upstream login.

* ``credentials``: salted credential entries (SCRAM keys; PLAIN is checked against the same entry).
* ``sasl``: the sans-I/O SASL server that plugs into ``ProxySession`` as its ``Authenticator``.
* ``tls``: SSL contexts and Kafka-style principal mapping rules for client certificates.
* ``upstream``: the proxy's SASL client (SaslHandshake + SaslAuthenticate) over a Trio stream.
* ``cli``: ``vcproxy credentials add``.
"""

ANONYMOUS = "User:ANONYMOUS"
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
