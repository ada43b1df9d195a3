"""The znodes of Kafka's ZooKeeper consumers (the layout of Kafka's ZooKeeper-era docs)."""

from __future__ import annotations

CONSUMERS = "/consumers"


def group_path(group_id: str) -> str:
    return f"{CONSUMERS}/{group_id}"


def offsets_path(group_id: str, topic: str | None = None, partition: int | None = None) -> str:
    """/consumers/[group]/offsets[/topic[/partition]]: persistent, the offset as a decimal string."""
    path = f"{CONSUMERS}/{group_id}/offsets"
    if topic is not None:
        path += f"/{topic}"
        if partition is not None:
            path += f"/{partition}"
    return path


def ids_path(group_id: str, consumer_id: str | None = None) -> str:
    """/consumers/[group]/ids[/consumer_id]: ephemeral, one per live consumer."""
    path = f"{CONSUMERS}/{group_id}/ids"
    return path if consumer_id is None else f"{path}/{consumer_id}"


def encode_offset(offset: int) -> bytes:
    return str(offset).encode("ascii")


def decode_offset(data: bytes) -> int:
    """A znode's offset; ValueError when it is not a decimal integer."""
    return int(data.decode("ascii").strip())


def owners_path(group_id: str, topic: str | None = None, partition: int | None = None) -> str:
    """/consumers/[group]/owners[/topic[/partition]]: ephemeral, the owning consumer thread id."""
    path = f"{CONSUMERS}/{group_id}/owners"
    if topic is not None:
        path += f"/{topic}"
        if partition is not None:
            path += f"/{partition}"
    return path


BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
