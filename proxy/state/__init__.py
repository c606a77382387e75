"""Virtual-cluster state in a compacted topic on the upstream cluster (see docs/state.md).

* ``store``: blocking confluent-kafka code: ensure the topic, replay, write durably, follow.
* ``service``: the Trio glue that owns a proxy's ``TenancyImage``.
* ``seed``: records that bring the state up to the config's ``tenancy.virtual_clusters``.
* ``backup``: backup/restore records and orphan detection (sans-I/O).
* ``cli``: ``vcproxy state dump|export|import|orphans``.

Import from the submodules: this package does not load confluent-kafka itself, since the CLI
imports ``cli`` for every command.
"""
