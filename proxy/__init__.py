"""vcproxy: a virtual-cluster proxy for Apache Kafka."""

__version__ = "0.1.0"
