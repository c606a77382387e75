"""The launcher's single error type."""


class KafkaLauncherError(Exception):
    """Something stops the local Kafka launcher; the message says what is wrong and what to do."""
