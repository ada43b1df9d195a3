"""Which partition of `__consumer_offsets` owns a group, computed exactly as Kafka does.

partition = abs(String.hashCode(group_id)) % offsets.topic.num.partitions, where Java's
hashCode runs over UTF-16 code units with int32 wrap-around and Kafka's abs maps
Integer.MIN_VALUE to 0 (where Math.abs would leave it negative).
"""

from __future__ import annotations

__all__ = ["java_string_hash", "partition_for"]

_INT32_MIN = -(1 << 31)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as an int32.

    A character outside the Basic Multilingual Plane is two code units (a surrogate pair).
    """
    h = 0
    for ch in s:
        cp = ord(ch)
        if cp < 0x10000:
            h = (31 * h + cp) & 0xFFFFFFFF
        else:
            cp -= 0x10000
            high = 0xD800 | (cp >> 10)
            low = 0xDC00 | (cp & 0x3FF)
            h = (31 * (31 * h + high) + low) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The `__consumer_offsets` partition of group_id among `partitions` partitions."""
    if partitions <= 0:
        raise ValueError(f"the offsets topic needs at least one partition, got {partitions}")
    h = java_string_hash(group_id)
    return 0 if h == _INT32_MIN else abs(h) % partitions
