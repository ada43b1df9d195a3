"""Keys and values of the records in `__consumer_offsets`, byte-compatible with Kafka.

Every key and every value starts with an int16 version followed by the fields, big-endian and
without a length prefix. The key version is the record type:

* 0 and 1: offset commit (group, topic, partition). Kafka writes 1 and reads both.
* 2: group metadata (group).
* anything else (3..8 are KIP-848 consumer-group records, newer Kafka adds more): decoded as
  `UnknownKey` so a loader can skip the record with a warning.

Offset commit values come in versions 0..4 and group metadata values in 0..4, where 4 is the
flexible encoding (compact lengths, a tagged-field section after every struct). Kafka writes
offset commit value v3 (v1 only when the commit carried an explicit retention) and group
metadata value v3, which is what the encoders here write by default; Burrow and other lag tools
decode exactly those.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tidemark.wire.primitives import read_uvarint, skip_tagged_fields, uvarint

_V3_VALUE_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_INT64 = struct.Struct(">q")
_V3_VALUE_EMPTY = struct.Struct(">hqihq")  # a v3 value without metadata: the whole 24 bytes
V3_VALUE_EMPTY = _V3_VALUE_EMPTY  # (version, offset, leader epoch, 0, commit timestamp): for a hot loop to pack itself
_V1_VALUE_HEAD = struct.Struct(">hqh")  # version, offset, metadata length
_TWO_INT64 = struct.Struct(">qq")

__all__ = [
    "OFFSETS_TOPIC",
    "GROUP_METADATA_KEY_VERSION",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSET_COMMIT_KEY_VERSION",
    "OFFSET_COMMIT_VALUE_VERSION",
    "OFFSET_COMMIT_VALUE_VERSION_EXPIRE",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "UnknownKey",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_key_tuple",
    "decode_offset_commit_value",
    "decode_offset_commit_value_tuple",
    "encode_group_metadata_value",
    "encode_key",
    "encode_offset_commit_value",
    "encode_offset_commit_value_v3",
]

OFFSETS_TOPIC = "__consumer_offsets"  # the topic these records live in

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
_OFFSET_COMMIT_KEY_V1 = OFFSET_COMMIT_KEY_VERSION.to_bytes(2, "big")
OFFSET_COMMIT_VALUE_VERSION_EXPIRE = 1
GROUP_METADATA_VALUE_VERSION = 3

_FLEXIBLE_VERSION = 4
_MAX_VALUE_VERSION = 4


# --------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key whose record type this module does not decode (KIP-848 records and newer)."""

    version: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()


# --------------------------------------------------------------------------------------------
# Primitive writers


class _Writer:
    __slots__ = ("out", "flexible")

    def __init__(self, version: int, flexible: bool = False) -> None:
        self.out = bytearray()
        self.flexible = flexible
        self.int16(version)

    def _pack(self, fmt: str, n: int, what: str) -> None:
        try:
            self.out += struct.pack(fmt, n)
        except struct.error:
            raise ValueError(f"{what} {n!r} does not fit its field") from None

    def int16(self, n: int) -> None:
        self._pack(">h", n, "int16")

    def int32(self, n: int) -> None:
        self._pack(">i", n, "int32")

    def int64(self, n: int) -> None:
        self._pack(">q", n, "int64")

    def uvarint(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"unsigned varint {n} is negative")
        self.out += uvarint(n)

    def string(self, s: str | None, *, nullable: bool = False) -> None:
        if s is None:
            if not nullable:
                raise ValueError("null in a non-nullable string field")
            if self.flexible:
                self.uvarint(0)
            else:
                self.int16(-1)
            return
        data = s.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes is longer than 32767")
        if self.flexible:
            self.uvarint(len(data) + 1)
        else:
            self.int16(len(data))
        self.out += data

    def bytes_(self, data: bytes) -> None:
        if data is None:
            raise ValueError("null in a non-nullable bytes field")
        if self.flexible:
            self.uvarint(len(data) + 1)
        else:
            self.int32(len(data))
        self.out += data

    def array_length(self, n: int) -> None:
        if self.flexible:
            self.uvarint(n + 1)
        else:
            self.int32(n)

    def tagged_fields(self) -> None:
        """An empty tagged-field section (flexible versions only)."""
        if self.flexible:
            self.uvarint(0)


# --------------------------------------------------------------------------------------------
# Primitive readers


class _Reader:
    __slots__ = ("data", "pos", "flexible", "what")

    def __init__(self, data, what: str) -> None:
        self.data = bytes(data)
        self.pos = 0
        self.flexible = False
        self.what = what

    def _fail(self, message: str) -> ValueError:
        return ValueError(f"malformed {self.what}: {message} at byte {self.pos}")

    def _unpack(self, fmt: str, size: int) -> int:
        if self.pos + size > len(self.data):
            raise self._fail(f"{len(self.data) - self.pos} bytes left, {size} needed")
        (n,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return n

    def int16(self) -> int:
        return self._unpack(">h", 2)

    def int32(self) -> int:
        return self._unpack(">i", 4)

    def int64(self) -> int:
        return self._unpack(">q", 8)

    def uvarint(self) -> int:
        try:
            n, self.pos = read_uvarint(self.data, self.pos)
        except ValueError as exc:
            raise self._fail(str(exc)) from None
        return n

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self._fail(f"length {n} runs past the end ({len(self.data) - self.pos} bytes left)")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def string(self, *, nullable: bool = False) -> str | None:
        if self.flexible:
            n = self.uvarint() - 1
        else:
            n = self.int16()
        if n < 0:
            if n == -1 and nullable:
                return None
            raise self._fail("null string" if n == -1 else f"negative string length {n}")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._fail(f"invalid UTF-8 ({exc.reason})") from None

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            raise self._fail("null bytes" if n == -1 else f"negative bytes length {n}")
        return self._take(n)

    def array_length(self) -> int:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            raise self._fail("null array" if n == -1 else f"negative array length {n}")
        return n

    def skip_tagged_fields(self) -> None:
        """Skip a struct's tagged-field section: none of these records defines a tagged field."""
        if not self.flexible:
            return
        try:
            self.pos = skip_tagged_fields(self.data, self.pos)
        except ValueError as exc:
            raise self._fail(str(exc)) from None

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self._fail(f"{len(self.data) - self.pos} trailing bytes")


# --------------------------------------------------------------------------------------------
# Keys


def _short_string(text: str) -> bytes | None:
    """An int16-length string, or None when too long for one (the checked writer then raises)."""
    raw = text.encode()
    return len(raw).to_bytes(2, "big") + raw if len(raw) <= 0x7FFF else None


def offset_commit_key_prefix(group: str, topic: str) -> bytes | None:
    """The bytes every offset commit key of (group, topic) starts with; append the partition as a
    big-endian int32. None when a name is too long for the fast path (use encode_key)."""
    group_bytes, topic_bytes = _short_string(group), _short_string(topic)
    if group_bytes is None or topic_bytes is None:
        return None
    return _OFFSET_COMMIT_KEY_V1 + group_bytes + topic_bytes


def encode_key(key: OffsetCommitKey | GroupMetadataKey) -> bytes:
    """Encode a key as Kafka writes it: offset commit keys as version 1, group keys as version 2."""
    if isinstance(key, OffsetCommitKey):
        prefix = offset_commit_key_prefix(key.group, key.topic)
        if prefix is not None and -(2**31) <= key.partition < 2**31:
            # The hot path of every commit: one concatenation instead of the general writer.
            return prefix + key.partition.to_bytes(4, "big", signed=True)
        w = _Writer(OFFSET_COMMIT_KEY_VERSION)
        w.string(key.group)
        w.string(key.topic)
        w.int32(key.partition)
        return bytes(w.out)
    if isinstance(key, GroupMetadataKey):
        w = _Writer(GROUP_METADATA_KEY_VERSION)
        w.string(key.group)
        return bytes(w.out)
    raise TypeError(f"cannot encode a key of type {type(key).__name__}")


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | UnknownKey:
    """Decode a key; record types other than 0, 1 and 2 come back as UnknownKey(version).

    Raises ValueError on malformed bytes (truncated, bad lengths, trailing bytes).
    """
    # Fast path for the offset commit key that fills the topic (loading reads millions of them);
    # anything unusual falls through to the checked reader below.
    size = len(data)
    if size >= 10 and data[0] == 0 and data[1] <= 1:
        topic_at = 4 + ((data[2] << 8) | data[3])
        if data[2] < 0x80 and topic_at + 2 <= size and data[topic_at] < 0x80:
            partition_at = topic_at + 2 + ((data[topic_at] << 8) | data[topic_at + 1])
            if partition_at + 4 == size:
                try:
                    return OffsetCommitKey(
                        data[4:topic_at].decode(),
                        data[topic_at + 2 : partition_at].decode(),
                        int.from_bytes(data[partition_at:], "big", signed=True),
                    )
                except UnicodeDecodeError:
                    pass
    r = _Reader(data, "__consumer_offsets key")
    version = r.int16()
    if version in (0, 1):
        group = r.string()
        topic = r.string()
        partition = r.int32()
        r.end()
        return OffsetCommitKey(group, topic, partition)
    if version == 2:
        group = r.string()
        r.end()
        return GroupMetadataKey(group)
    return UnknownKey(version)


def decode_offset_commit_key_tuple(data: bytes) -> tuple[int, str, str, int] | None:
    """(version, group, topic, partition) of a well-formed offset commit key (version 0 or 1),
    without building an OffsetCommitKey; None for any other key, malformed ones included, which
    decode_key then decodes or rejects. For tools that decode whole offsets logs into columns."""
    size = len(data)
    if size < 10 or data[0] != 0 or data[1] > 1 or data[2] >= 0x80:
        return None
    topic_at = 4 + ((data[2] << 8) | data[3])
    if topic_at + 2 > size or data[topic_at] >= 0x80:
        return None
    partition_at = topic_at + 2 + ((data[topic_at] << 8) | data[topic_at + 1])
    if partition_at + 4 != size:
        return None
    try:
        return (data[1], data[4:topic_at].decode(), data[topic_at + 2 : partition_at].decode(),
                int.from_bytes(data[partition_at:], "big", signed=True))
    except UnicodeDecodeError:
        return None


# --------------------------------------------------------------------------------------------
# Offset commit values


def encode_offset_commit_value(value: OffsetCommitValue, *, version: int | None = None) -> bytes:
    """Encode as Kafka writes: version 3, or version 1 when expire_timestamp >= 0.

    version forces a specific version (0..4), dropping the fields it lacks (tests and tools).
    """
    if version is None and value.expire_timestamp < 0:
        metadata = _short_string(value.metadata or "")
        if metadata is not None:  # the v3 value every commit writes, packed directly
            return (_V3_VALUE_HEAD.pack(OFFSET_COMMIT_VALUE_VERSION, value.offset, value.leader_epoch, len(metadata) - 2)
                    + metadata[2:] + _INT64.pack(value.commit_timestamp))
    if version is None:
        version = OFFSET_COMMIT_VALUE_VERSION_EXPIRE if value.expire_timestamp >= 0 else OFFSET_COMMIT_VALUE_VERSION
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise ValueError(f"offset commit value version {version} is not one of 0..{_MAX_VALUE_VERSION}")
    w = _Writer(version, flexible=version >= _FLEXIBLE_VERSION)
    w.int64(value.offset)
    if version >= 3:
        w.int32(value.leader_epoch)
    w.string(value.metadata if value.metadata is not None else "")
    w.int64(value.commit_timestamp)
    if version == 1:
        w.int64(value.expire_timestamp)
    w.tagged_fields()
    return bytes(w.out)


def encode_offset_commit_value_v3(offset: int, leader_epoch: int, metadata: bytes, commit_timestamp: int) -> bytes:
    """The v3 value every commit without an explicit retention writes, from the metadata's
    UTF-8 (at most 32767 bytes: longer goes through encode_offset_commit_value, which refuses
    it); the same bytes as encode_offset_commit_value, without an OffsetCommitValue."""
    if not metadata:
        return _V3_VALUE_EMPTY.pack(OFFSET_COMMIT_VALUE_VERSION, offset, leader_epoch, 0, commit_timestamp)
    return (_V3_VALUE_HEAD.pack(OFFSET_COMMIT_VALUE_VERSION, offset, leader_epoch, len(metadata))
            + metadata + _INT64.pack(commit_timestamp))


def decode_offset_commit_value_tuple(data: bytes) -> tuple[int, int, int, str, int, int] | None:
    """(version, offset, leader_epoch, metadata, commit_timestamp, expire_timestamp) of a
    well-formed offset commit value of version 3 or 1 (what Kafka writes), as
    decode_offset_commit_value decodes it but without building an OffsetCommitValue; None for
    any other value, malformed ones included, which decode_offset_commit_value then decodes or
    rejects."""
    size = len(data)
    if size < 22 or data[0] != 0:
        return None
    if data[1] == 3:
        if size == 24:
            version, offset, leader_epoch, metadata_length, commit_timestamp = _V3_VALUE_EMPTY.unpack(data)
            if metadata_length == 0:
                return version, offset, leader_epoch, "", commit_timestamp, -1
        version, offset, leader_epoch, metadata_length = _V3_VALUE_HEAD.unpack_from(data)
        if metadata_length < 0:
            if metadata_length != -1 or size != 24:
                return None
            return version, offset, leader_epoch, "", _INT64.unpack_from(data, 16)[0], -1
        if 24 + metadata_length != size:
            return None
        try:
            metadata = data[16 : 16 + metadata_length].decode()
        except UnicodeDecodeError:
            return None
        return version, offset, leader_epoch, metadata, _INT64.unpack_from(data, 16 + metadata_length)[0], -1
    if data[1] == 1 and size >= 28:
        version, offset, metadata_length = _V1_VALUE_HEAD.unpack_from(data)
        if metadata_length < 0:
            if metadata_length != -1 or size != 28:
                return None
            metadata_length = 0
        elif 28 + metadata_length != size:
            return None
        try:
            metadata = data[12 : 12 + metadata_length].decode()
        except UnicodeDecodeError:
            return None
        commit_timestamp, expire_timestamp = _TWO_INT64.unpack_from(data, 12 + metadata_length)
        return version, offset, -1, metadata, commit_timestamp, expire_timestamp
    return None


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    """Decode versions 0..4; fields a version lacks take their defaults (-1), null metadata is ""."""
    # Fast path for version 3, what Kafka and tidemark write; the checked reader handles the rest.
    if len(data) >= 24 and data[0] == 0 and data[1] == 3:
        _, offset, leader_epoch, metadata_length = _V3_VALUE_HEAD.unpack_from(data)
        if metadata_length >= 0 and 24 + metadata_length == len(data):
            try:
                metadata = data[16 : 16 + metadata_length].decode()
            except UnicodeDecodeError:
                pass
            else:
                return OffsetCommitValue(offset, leader_epoch, metadata, _INT64.unpack_from(data, 16 + metadata_length)[0])
    r = _Reader(data, "offset commit value")
    version = r.int16()
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise ValueError(f"malformed offset commit value: unknown version {version}")
    r.flexible = version >= _FLEXIBLE_VERSION
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string(nullable=True) or ""
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    r.skip_tagged_fields()
    r.end()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


# --------------------------------------------------------------------------------------------
# Group metadata values


def encode_group_metadata_value(value: GroupMetadataValue, *, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    """Encode as Kafka writes: version 3 (another version 0..4 on request, dropping fields)."""
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise ValueError(f"group metadata value version {version} is not one of 0..{_MAX_VALUE_VERSION}")
    w = _Writer(version, flexible=version >= _FLEXIBLE_VERSION)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol, nullable=True)
    w.string(value.leader, nullable=True)
    if version >= 2:
        w.int64(value.current_state_timestamp)
    w.array_length(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id, nullable=True)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.tagged_fields()
    w.tagged_fields()
    return bytes(w.out)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    """Decode versions 0..4.

    Fields a version lacks: current_state_timestamp -1, group_instance_id None, and (v0) the
    rebalance timeout equal to the session timeout, as Kafka's loader does.
    """
    r = _Reader(data, "group metadata value")
    version = r.int16()
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise ValueError(f"malformed group metadata value: unknown version {version}")
    r.flexible = version >= _FLEXIBLE_VERSION
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    current_state_timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length()):
        member_id = r.string()
        group_instance_id = r.string(nullable=True) if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else None
        session_timeout = r.int32()
        if rebalance_timeout is None:
            rebalance_timeout = session_timeout
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.skip_tagged_fields()
        members.append(
            MemberMetadata(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    r.skip_tagged_fields()
    r.end()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members))
