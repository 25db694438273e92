"""Clients of the shared configuration (`laminar_kafka.kafka_source.clients`) against a real secured broker.

SASL_SSL with SCRAM-SHA-512 and mTLS produce and read; a wrong password, an untrusted CA, a client
certificate of an untrusted CA, no client certificate and a missing key file each fail with the
cause named (the inputs `laminar-kafka` reports in one line).
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from laminar_kafka.devstack.producers import partition_count, produce
from laminar_kafka.devstack.stack import DevStack
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.kafka_source.clients import KafkaClientConfig, make_consumer, make_producer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def read_values(client: KafkaClientConfig, topic: str, expected: int, timeout: float = 60.0) -> list[bytes]:
    """Read `expected` records of `topic` from the beginning with a consumer of `client`."""
    consumer = make_consumer(client, f"read-{topic}", {"auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partition_count("", topic, client=client))])
        values: list[bytes] = []
        deadline = threading.Event()
        timer = threading.Timer(timeout, deadline.set)
        timer.start()
        try:
            while len(values) < expected and not deadline.is_set():
                message = consumer.poll(0.5)
                if message is None:
                    continue
                if message.error():
                    raise KafkaException(message.error())
                values.append(bytes(message.value() or b""))
        finally:
            timer.cancel()
        return values
    finally:
        consumer.close()


@pytest.mark.parametrize("listener", ["sasl_ssl", "mtls"])
def test_secured_client_produces_and_reads(listener: str, secure_kafka: DevStack,
                                           unique: Callable[[str], str]) -> None:
    client = secure_kafka.sasl_ssl_client() if listener == "sasl_ssl" else secure_kafka.mtls_client()
    assert client.bootstrap != secure_kafka.bootstrap  # not the PLAINTEXT listener
    topic = unique(f"secure-{listener}")
    create_topic("", topic, 3, client=client)
    values = [b"v-%d" % i for i in range(300)]
    assert produce("", topic, values, client=client) == 300
    assert sorted(read_values(client, topic, 300)) == sorted(values)


def first_error(client: KafkaClientConfig, timeout: float = 30.0) -> KafkaError:
    """The first error a producer of `client` reports while trying to deliver one record."""
    errors: list[KafkaError] = []
    reported = threading.Event()

    def on_error(error: KafkaError) -> None:
        errors.append(error)
        reported.set()

    producer = make_producer(client, {"error_cb": on_error, "message.timeout.ms": int(timeout * 1000)})
    producer.produce("never-created", b"x")
    deadline = threading.Event()
    timer = threading.Timer(timeout, deadline.set)
    timer.start()
    try:
        while not reported.is_set() and not deadline.is_set():
            producer.poll(0.2)
    finally:
        timer.cancel()
    producer.purge()
    assert errors, f"no error within {timeout:.0f}s"
    return errors[0]


def test_wrong_password_is_an_authentication_error(secure_kafka: DevStack) -> None:
    error = first_error(secure_kafka.sasl_ssl_client(password="not-the-password"))
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert "SASL authentication" in error.str() and "SCRAM-SHA-512" in error.str()
    assert "not-the-password" not in error.str()


@pytest.mark.parametrize("listener", ["sasl_ssl", "mtls"])
def test_broker_certificate_from_an_untrusted_ca_is_refused(listener: str, secure_kafka: DevStack) -> None:
    material = secure_kafka.security
    assert material is not None
    client = (secure_kafka.sasl_ssl_client(ca_cert=material.untrusted_ca_cert) if listener == "sasl_ssl"
              else secure_kafka.mtls_client(ca_cert=material.untrusted_ca_cert))
    error = first_error(client)
    assert error.code() == KafkaError._SSL, error
    assert "certificate verify failed" in error.str()


@pytest.mark.parametrize("case", ["untrusted-client-certificate", "no-client-certificate"])
def test_mtls_listener_requires_a_client_certificate_of_its_ca(case: str, secure_kafka: DevStack) -> None:
    material = secure_kafka.security
    assert material is not None and secure_kafka.kafka is not None
    if case == "untrusted-client-certificate":
        client = secure_kafka.mtls_client(certificate=material.untrusted_client_cert, key=material.untrusted_client_key)
    else:
        client = KafkaClientConfig(secure_kafka.kafka.ssl_bootstrap,
                                   {"security.protocol": "SSL", "ssl.ca.location": str(material.ca_cert)})
    error = first_error(client)
    assert error.code() in (KafkaError._SSL, KafkaError._TRANSPORT), error
    assert "bad certificate" in error.str()


def test_missing_key_file_fails_when_the_client_is_created(secure_kafka: DevStack, tmp_path: Path) -> None:
    missing = tmp_path / "absent.key"
    with pytest.raises(KafkaException) as raised:
        make_producer(secure_kafka.mtls_client(key=missing))
    assert "ssl.key.location" in str(raised.value)
