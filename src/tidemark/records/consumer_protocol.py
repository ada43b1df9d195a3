"""The consumer protocol's member metadata as a classic group stores it: the subscription each
member sent in JoinGroup (ConsumerProtocolSubscription). Read by the coordinator (which topics
a group consumes) and by readers of the offsets log (spark/), which must decode it the same way.
"""

from __future__ import annotations

import struct

from tidemark.records.offsets_schema import GroupMetadataValue

CONSUMER_PROTOCOL_TYPE = "consumer"


def decode_subscription_topics(data: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version: its v0 prefix), None if invalid.

    Layout: int16 version, int32 topic count, then per topic an int16 length and UTF-8 bytes
    (user data and, from v1, owned partitions follow; they are not needed here).
    """
    try:
        version, count = struct.unpack_from(">hi", data, 0)
        offset = 6
        if version < 0 or count < 0:
            return None
        topics = set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", data, offset)
            offset += 2
            if length < 0 or offset + length > len(data):
                return None
            topics.add(data[offset:offset + length].decode("utf-8"))
            offset += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


def subscribed_topics(value: GroupMetadataValue) -> set[str] | None:
    """Topics the members of a stored classic group subscribe to, for a "consumer" group; None
    when not known (another protocol type, no protocol chosen, a subscription not decodable)."""
    if (value.protocol_type or None) != CONSUMER_PROTOCOL_TYPE:
        return None
    if not value.members:
        return set()
    if value.protocol is None:
        return None
    topics: set[str] = set()
    for member in value.members:
        decoded = decode_subscription_topics(bytes(member.subscription))
        if decoded is None:
            return None
        topics |= decoded
    return topics


def decode_assignment(data: bytes) -> list[tuple[str, int]] | None:
    """(topic, partition) of a ConsumerProtocolAssignment (any version: its v0 prefix), None if
    invalid. Layout: int16 version, int32 topic count, per topic an int16-length name and an
    int32 count of int32 partitions (user data follows)."""
    if not data:
        return []
    try:
        version, count = struct.unpack_from(">hi", data, 0)
        offset = 6
        if version < 0 or count < 0:
            return None
        partitions: list[tuple[str, int]] = []
        for _ in range(count):
            (length,) = struct.unpack_from(">h", data, offset)
            offset += 2
            if length < 0 or offset + length > len(data):
                return None
            topic = data[offset:offset + length].decode("utf-8")
            offset += length
            (n,) = struct.unpack_from(">i", data, offset)
            offset += 4
            if n < 0:
                return None
            partitions += [(topic, p) for p in struct.unpack_from(f">{n}i", data, offset)]
            offset += 4 * n
        return partitions
    except (struct.error, UnicodeDecodeError):
        return None
