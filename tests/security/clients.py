"""One produce / consume-in-a-group / commit round trip per real client, over a secured listener.

`security` is neutral: protocol, and as needed mechanism, username, password (SASL), ca (the
CA to trust the broker by), cert and key (the client's certificate)."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

TIMEOUT_S = 60.0  # hang guards only


def confluent_conf(bootstrap: str, security: dict[str, Any]) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "security.protocol": security["protocol"], "log_level": 0}
    if "mechanism" in security:
        conf.update({"sasl.mechanism": security["mechanism"], "sasl.username": security["username"],
                     "sasl.password": security["password"]})
    if "ca" in security:
        conf["ssl.ca.location"] = str(security["ca"])
    if "cert" in security:
        conf.update({"ssl.certificate.location": str(security["cert"]), "ssl.key.location": str(security["key"])})
    return conf


def confluent(bootstrap: str, security: dict[str, Any], topic: str, group: str) -> tuple[list[bytes], int]:
    conf = confluent_conf(bootstrap, security)
    producer = Producer(conf)
    for i in range(3):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        while len(values) < 3:
            message = consumer.poll(TIMEOUT_S)
            assert message is not None and message.error() is None, message and message.error()
            values.append(message.value())
        consumer.commit(asynchronous=False)
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT_S)
    finally:
        consumer.close()
    return values, committed.offset


def _ssl_context(security: dict[str, Any]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(security["ca"]))
    if "cert" in security:
        context.load_cert_chain(str(security["cert"]), str(security["key"]))
    return context


def kafka_python(bootstrap: str, security: dict[str, Any], topic: str, group: str) -> tuple[list[bytes], int]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    options: dict[str, Any] = {"bootstrap_servers": bootstrap, "security_protocol": security["protocol"]}
    if "mechanism" in security:
        options.update({"sasl_mechanism": security["mechanism"], "sasl_plain_username": security["username"],
                        "sasl_plain_password": security["password"]})
    if "ca" in security:
        options["ssl_context"] = _ssl_context(security)
    producer = KafkaProducer(**options)
    for i in range(3):
        producer.send(topic, f"m{i}".encode()).get(timeout=TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=int(TIMEOUT_S * 1000), **options)
    values = []
    try:
        for message in consumer:
            values.append(message.value)
            if len(values) == 3:
                break
        consumer.commit()
        committed = consumer.committed(KTopicPartition(topic, 0))
    finally:
        consumer.close()
    return values, committed


def aiokafka(bootstrap: str, security: dict[str, Any], topic: str, group: str) -> tuple[list[bytes], int]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATopicPartition

    options: dict[str, Any] = {"bootstrap_servers": bootstrap, "security_protocol": security["protocol"]}
    if "mechanism" in security:
        options.update({"sasl_mechanism": security["mechanism"], "sasl_plain_username": security["username"],
                        "sasl_plain_password": security["password"]})
    if "ca" in security:
        options["ssl_context"] = _ssl_context(security)

    async def run() -> tuple[list[bytes], int]:
        producer = AIOKafkaProducer(**options)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, f"m{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                                    **options)
        await consumer.start()
        try:
            values = []
            while len(values) < 3:
                message = await asyncio.wait_for(consumer.getone(), TIMEOUT_S)
                values.append(message.value)
            await consumer.commit()
            committed = await consumer.committed(ATopicPartition(topic, 0))
        finally:
            await consumer.stop()
        return values, committed

    return asyncio.run(run())


def kcat(bootstrap: str, security: dict[str, Any], topic: str, group: str) -> tuple[list[bytes], int]:
    conf = confluent_conf(bootstrap, security)
    del conf["bootstrap.servers"], conf["log_level"]
    if "sasl.mechanism" in conf:
        conf["sasl.mechanisms"] = conf.pop("sasl.mechanism")
    base = ["kcat", "-b", bootstrap, *[arg for k, v in conf.items() for arg in ("-X", f"{k}={v}")]]
    produced = subprocess.run([*base, "-P", "-t", topic], input=b"m0\nm1\nm2\n", timeout=TIMEOUT_S,
                              capture_output=True)
    assert produced.returncode == 0, produced.stderr.decode()
    # A balanced consumer in the group: three messages, then its offsets are committed as it leaves.
    out = subprocess.run([*base, "-X", "auto.offset.reset=earliest", "-G", group, "-c", "3", "-f", "%s\n", topic],
                         timeout=TIMEOUT_S * 2, capture_output=True)
    assert out.returncode == 0, out.stderr.decode()
    values = out.stdout.split()
    consumer = Consumer({**confluent_conf(bootstrap, security), "group.id": group})
    try:
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT_S)
    finally:
        consumer.close()
    return values, committed.offset


CLIENTS = {"confluent-kafka": confluent, "kafka-python": kafka_python, "aiokafka": aiokafka, "kcat": kcat}
