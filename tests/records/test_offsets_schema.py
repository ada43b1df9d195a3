"""__consumer_offsets keys and values: exact bytes per version, old versions, round trips.

The expected bytes are built by hand from Kafka's record layout (GroupMetadataManager's key and value
schemas), not with the module under test: int16 version first, big-endian fields, non-flexible strings as int16
length + UTF-8, bytes as int32 length, arrays as int32 count; flexible (v4) lengths as unsigned
varint N+1 and a tagged-field section at the end of every struct.
"""

import dataclasses
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.records.offsets_schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)

# -- hand-built primitives ---------------------------------------------------------------------


def i16(n):
    return struct.pack(">h", n)


def i32(n):
    return struct.pack(">i", n)


def i64(n):
    return struct.pack(">q", n)


def string(s):
    if s is None:
        return i16(-1)
    b = s.encode()
    return i16(len(b)) + b


def bytes32(b):
    return i32(len(b)) + b


def uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def cstring(s):
    if s is None:
        return b"\x00"
    b = s.encode()
    return uvarint(len(b) + 1) + b


def cbytes(b):
    return uvarint(len(b) + 1) + b


NO_TAGS = b"\x00"


# -- keys ----------------------------------------------------------------------------------------


def test_offset_commit_key_is_written_as_version_1():
    key = OffsetCommitKey("grp", "topic", 5)
    expected = bytes.fromhex("0001" "0003" "677270" "0005" "746f706963" "00000005")
    assert encode_key(key) == expected
    assert decode_key(expected) == key


def test_group_metadata_key_is_written_as_version_2():
    key = GroupMetadataKey("grp")
    expected = bytes.fromhex("0002" "0003" "677270")
    assert encode_key(key) == expected
    assert decode_key(expected) == key


def test_offset_commit_key_version_0_is_read():
    data = bytes.fromhex("0000" "0003" "677270" "0005" "746f706963" "00000005")
    assert decode_key(data) == OffsetCommitKey("grp", "topic", 5)


def test_key_string_lengths_count_utf8_bytes():
    key = OffsetCommitKey("grüppe", "t\u00f6pic\U0001F600", 2**31 - 1)
    expected = i16(1) + i16(7) + "grüppe".encode() + i16(10) + "t\u00f6pic\U0001F600".encode() + i32(2**31 - 1)
    assert encode_key(key) == expected
    assert decode_key(expected) == key


@pytest.mark.parametrize("version", [3, 4, 5, 6, 7, 8, 9, 100, 32767, -1])
def test_other_record_types_decode_to_unknown_key(version):
    # KIP-848 consumer-group records (3..8) and whatever comes later: the loader skips them.
    assert decode_key(i16(version) + string("grp") + b"\x00\x01more") == UnknownKey(version)
    assert decode_key(i16(version)) == UnknownKey(version)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        i16(1),
        i16(1) + string("grp"),
        i16(1) + string("grp") + string("topic"),
        i16(1) + string("grp") + string("topic") + b"\x00\x00\x01",
        i16(1) + string("grp") + string("topic") + i32(0) + b"\x00",  # trailing byte
        i16(1) + i16(10) + b"short",
        i16(1) + string(None) + string("topic") + i32(0),  # null group
        i16(1) + i16(-2) + string("topic") + i32(0),
        i16(2) + i16(2) + b"\xff\xfe",  # invalid UTF-8
        i16(2),
        i16(2) + string("grp") + b"x",
    ],
)
def test_malformed_keys_raise_value_error(data):
    with pytest.raises(ValueError):
        decode_key(data)


def test_encode_key_rejects_other_types():
    with pytest.raises(TypeError):
        encode_key(UnknownKey(3))


def test_encode_key_rejects_values_that_do_not_fit():
    with pytest.raises(ValueError):
        encode_key(OffsetCommitKey("g", "t", 2**31))
    with pytest.raises(ValueError):
        encode_key(GroupMetadataKey("g" * 32768))


# -- offset commit values --------------------------------------------------------------------------


def test_offset_commit_value_is_written_as_version_3():
    value = OffsetCommitValue(offset=42, leader_epoch=5, metadata="m", commit_timestamp=1000)
    expected = bytes.fromhex("0003" "000000000000002a" "00000005" "0001" "6d" "00000000000003e8")
    assert encode_offset_commit_value(value) == expected
    assert decode_offset_commit_value(expected) == value


def test_offset_commit_value_with_explicit_retention_is_written_as_version_1():
    value = OffsetCommitValue(offset=42, leader_epoch=5, metadata="m", commit_timestamp=1000, expire_timestamp=2000)
    expected = bytes.fromhex("0001" "000000000000002a" "0001" "6d" "00000000000003e8" "00000000000007d0")
    assert encode_offset_commit_value(value) == expected
    # v1 has no leader epoch: it reads back as -1.
    assert decode_offset_commit_value(expected) == dataclasses.replace(value, leader_epoch=-1)


def test_offset_commit_value_expire_timestamp_zero_is_explicit():
    value = OffsetCommitValue(1, -1, "", 0, 0)
    assert encode_offset_commit_value(value) == i16(1) + i64(1) + string("") + i64(0) + i64(0)


def test_offset_commit_value_defaults():
    value = OffsetCommitValue(7)
    assert encode_offset_commit_value(value) == i16(3) + i64(7) + i32(-1) + string("") + i64(-1)


def test_offset_commit_value_version_0():
    data = i16(0) + i64(123) + string("meta") + i64(1_700_000_000_000)
    assert data.hex() == "0000" "000000000000007b" "0004" "6d657461" "0000018bcfe56800"
    assert decode_offset_commit_value(data) == OffsetCommitValue(123, -1, "meta", 1_700_000_000_000, -1)
    assert encode_offset_commit_value(OffsetCommitValue(123, 9, "meta", 1_700_000_000_000), version=0) == data


def test_offset_commit_value_version_2_is_laid_out_as_version_0():
    data = i16(2) + i64(123) + string("meta") + i64(1_700_000_000_000)
    assert decode_offset_commit_value(data) == OffsetCommitValue(123, -1, "meta", 1_700_000_000_000, -1)
    assert encode_offset_commit_value(OffsetCommitValue(123, 9, "meta", 1_700_000_000_000, 55), version=2) == data


def test_offset_commit_value_version_1():
    data = i16(1) + i64(-1) + string("") + i64(10) + i64(20)
    assert decode_offset_commit_value(data) == OffsetCommitValue(-1, -1, "", 10, 20)


def test_offset_commit_value_version_4_flexible():
    value = OffsetCommitValue(offset=42, leader_epoch=5, metadata="m", commit_timestamp=1000)
    expected = bytes.fromhex("0004" "000000000000002a" "00000005" "02" "6d" "00000000000003e8" "00")
    assert encode_offset_commit_value(value, version=4) == expected
    assert decode_offset_commit_value(expected) == value


def test_offset_commit_value_version_4_skips_unknown_tagged_fields():
    long_metadata = "x" * 200  # compact length 201 needs a two-byte varint
    tagged = uvarint(2) + uvarint(0) + uvarint(3) + b"abc" + uvarint(300) + uvarint(130) + b"z" * 130
    data = i16(4) + i64(9) + i32(2) + uvarint(201) + long_metadata.encode() + i64(77) + tagged
    assert uvarint(201) == b"\xc9\x01" and uvarint(300) == b"\xac\x02"
    assert decode_offset_commit_value(data) == OffsetCommitValue(9, 2, long_metadata, 77, -1)


@pytest.mark.parametrize(
    "data",
    [
        i16(0) + i64(5) + i16(-1) + i64(6),
        i16(1) + i64(5) + i16(-1) + i64(6) + i64(7),
        i16(2) + i64(5) + i16(-1) + i64(6),
        i16(3) + i64(5) + i32(-1) + i16(-1) + i64(6),
        i16(4) + i64(5) + i32(-1) + b"\x00" + i64(6) + NO_TAGS,
    ],
)
def test_null_metadata_decodes_to_empty_string(data):
    value = decode_offset_commit_value(data)
    assert value.metadata == ""
    assert value.offset == 5 and value.commit_timestamp == 6


def test_null_metadata_is_never_written():
    value = OffsetCommitValue(5, -1, None, 6)  # type: ignore[arg-type]
    assert encode_offset_commit_value(value) == i16(3) + i64(5) + i32(-1) + string("") + i64(6)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        i16(5) + i64(1) + i32(-1) + string("") + i64(1),  # unknown version
        i16(-1) + i64(1),
        i16(3) + i64(1) + i32(-1) + string(""),  # truncated
        i16(3) + i64(1) + i32(-1) + string("") + i64(1) + b"\x00",  # trailing byte
        i16(1) + i64(1) + string("") + i64(1),  # v1 without expire timestamp
        i16(3) + i64(1) + i32(-1) + i16(-2) + i64(1),
        i16(4) + i64(1) + i32(-1) + b"\x01" + i64(1),  # no tagged-field section
        i16(4) + i64(1) + i32(-1) + b"\x01" + i64(1) + b"\x01\x00\x05ab",  # tagged field too short
        i16(4) + i64(1) + i32(-1) + b"\xff\xff\xff\xff\xff\x01",  # varint too long
    ],
)
def test_malformed_offset_commit_values_raise_value_error(data):
    with pytest.raises(ValueError):
        decode_offset_commit_value(data)


def test_offset_commit_value_rejects_unknown_encode_version():
    with pytest.raises(ValueError):
        encode_offset_commit_value(OffsetCommitValue(1), version=5)


# -- group metadata values -----------------------------------------------------------------------

M1 = MemberMetadata(
    member_id="consumer-1-abc",
    group_instance_id="instance-1",
    client_id="consumer-1",
    client_host="/10.0.0.1",
    rebalance_timeout=300000,
    session_timeout=45000,
    subscription=b"\x00\x01sub",
    assignment=b"\x00\x01\x02assign",
)
M2 = MemberMetadata("m2", None, "c2", "/10.0.0.2", 60000, 10000, b"", b"")
GROUP = GroupMetadataValue(
    protocol_type="consumer",
    generation=7,
    protocol="range",
    leader="consumer-1-abc",
    current_state_timestamp=1_700_000_000_123,
    members=(M1, M2),
)


def member_bytes(m, version):
    out = string(m.member_id)
    if version >= 3:
        out += string(m.group_instance_id)
    out += string(m.client_id) + string(m.client_host)
    if version >= 1:
        out += i32(m.rebalance_timeout)
    return out + i32(m.session_timeout) + bytes32(m.subscription) + bytes32(m.assignment)


def group_bytes(g, version):
    out = i16(version) + string(g.protocol_type) + i32(g.generation) + string(g.protocol) + string(g.leader)
    if version >= 2:
        out += i64(g.current_state_timestamp)
    out += i32(len(g.members))
    return out + b"".join(member_bytes(m, version) for m in g.members)


def test_group_metadata_value_is_written_as_version_3():
    expected = (
        i16(3)
        + i16(8) + b"consumer"
        + i32(7)
        + i16(5) + b"range"
        + i16(14) + b"consumer-1-abc"
        + i64(1_700_000_000_123)
        + i32(2)
        + i16(14) + b"consumer-1-abc"
        + i16(10) + b"instance-1"
        + i16(10) + b"consumer-1"
        + i16(9) + b"/10.0.0.1"
        + i32(300000)
        + i32(45000)
        + i32(5) + b"\x00\x01sub"
        + i32(9) + b"\x00\x01\x02assign"
        + i16(2) + b"m2"
        + i16(-1)
        + i16(2) + b"c2"
        + i16(9) + b"/10.0.0.2"
        + i32(60000)
        + i32(10000)
        + i32(0)
        + i32(0)
    )  # fmt: skip
    assert expected == group_bytes(GROUP, 3)
    assert encode_group_metadata_value(GROUP) == expected
    assert decode_group_metadata_value(expected) == GROUP


def test_empty_group_record_version_3():
    # Written when a group becomes Empty: no members, generation kept, protocol and leader null.
    empty = GroupMetadataValue("consumer", 8, None, None, 1_700_000_001_000, ())
    expected = bytes.fromhex("0003" "0008" "636f6e73756d6572" "00000008" "ffff" "ffff" "0000018bcfe56be8" "00000000")
    assert encode_group_metadata_value(empty) == expected
    assert decode_group_metadata_value(expected) == empty


def test_group_metadata_value_version_0():
    data = group_bytes(GROUP, 0)
    # v0 has no rebalance timeout (Kafka's loader uses the session timeout), no state timestamp,
    # no group instance id.
    assert decode_group_metadata_value(data) == dataclasses.replace(
        GROUP,
        current_state_timestamp=-1,
        members=(
            dataclasses.replace(M1, group_instance_id=None, rebalance_timeout=45000),
            dataclasses.replace(M2, rebalance_timeout=10000),
        ),
    )
    assert encode_group_metadata_value(GROUP, version=0) == data


def test_group_metadata_value_version_1():
    data = group_bytes(GROUP, 1)
    assert decode_group_metadata_value(data) == dataclasses.replace(
        GROUP, current_state_timestamp=-1, members=(dataclasses.replace(M1, group_instance_id=None), M2)
    )
    assert encode_group_metadata_value(GROUP, version=1) == data


def test_group_metadata_value_version_2():
    data = group_bytes(GROUP, 2)
    assert decode_group_metadata_value(data) == dataclasses.replace(
        GROUP, members=(dataclasses.replace(M1, group_instance_id=None), M2)
    )
    assert encode_group_metadata_value(GROUP, version=2) == data


def test_group_metadata_value_version_4_flexible():
    expected = (
        i16(4)
        + cstring("consumer")
        + i32(7)
        + cstring("range")
        + cstring("consumer-1-abc")
        + i64(1_700_000_000_123)
        + uvarint(3)  # compact array: 2 members
        + cstring("consumer-1-abc") + cstring("instance-1") + cstring("consumer-1") + cstring("/10.0.0.1")
        + i32(300000) + i32(45000) + cbytes(b"\x00\x01sub") + cbytes(b"\x00\x01\x02assign") + NO_TAGS
        + cstring("m2") + cstring(None) + cstring("c2") + cstring("/10.0.0.2")
        + i32(60000) + i32(10000) + cbytes(b"") + cbytes(b"") + NO_TAGS
        + NO_TAGS
    )  # fmt: skip
    assert expected[:12].hex() == "0004" "09" "636f6e73756d6572" "00"
    assert encode_group_metadata_value(GROUP, version=4) == expected
    assert decode_group_metadata_value(expected) == GROUP


def test_group_metadata_value_version_4_skips_tagged_fields_in_every_struct():
    member_tags = uvarint(1) + uvarint(7) + uvarint(2) + b"\xaa\xbb"
    top_tags = uvarint(2) + uvarint(0) + uvarint(0) + uvarint(1000) + uvarint(1) + b"\x01"
    data = (
        i16(4) + cstring("consumer") + i32(1) + cstring(None) + cstring(None) + i64(-1)
        + uvarint(2)
        + cstring("m") + cstring(None) + cstring("c") + cstring("h") + i32(1) + i32(2)
        + cbytes(b"s" * 200) + cbytes(b"a") + member_tags
        + top_tags
    )  # fmt: skip
    assert decode_group_metadata_value(data) == GroupMetadataValue(
        "consumer", 1, None, None, -1, (MemberMetadata("m", None, "c", "h", 1, 2, b"s" * 200, b"a"),)
    )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        i16(5) + group_bytes(GROUP, 3)[2:],  # unknown version
        group_bytes(GROUP, 3)[:-1],  # truncated
        group_bytes(GROUP, 3) + b"\x00",  # trailing byte
        i16(3) + string(None) + i32(1) + string(None) + string(None) + i64(-1) + i32(0),  # null protocol_type
        i16(3) + string("c") + i32(1) + string(None) + string(None) + i64(-1) + i32(-1),  # null members
        i16(3) + string("c") + i32(1) + string(None) + string(None) + i64(-1) + i32(1),  # missing member
        i16(3) + string("c") + i32(1) + string(None) + string(None) + i64(-1) + i32(1)
        + string("m") + string(None) + string("c") + string("h") + i32(1) + i32(2) + i32(-1) + i32(0),  # null bytes
        i16(4) + cstring("c") + i32(1) + cstring(None) + cstring(None) + i64(-1) + uvarint(1),  # no tags
        i16(4) + cstring("c") + i32(1) + cstring(None) + cstring(None) + i64(-1) + uvarint(0) + NO_TAGS,  # null array
    ],
)  # fmt: skip
def test_malformed_group_metadata_values_raise_value_error(data):
    with pytest.raises(ValueError):
        decode_group_metadata_value(data)


def test_group_metadata_value_rejects_nulls_in_non_nullable_fields():
    with pytest.raises(ValueError):
        encode_group_metadata_value(dataclasses.replace(GROUP, protocol_type=None))
    with pytest.raises(ValueError):
        encode_group_metadata_value(dataclasses.replace(GROUP, members=(dataclasses.replace(M1, assignment=None),)))


# -- round trips ---------------------------------------------------------------------------------

int16s = st.integers(-(2**15), 2**15 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
strings = st.text(max_size=40)
nullable_strings = st.none() | strings

offset_keys = st.builds(OffsetCommitKey, strings, strings, int32s)
group_keys = st.builds(GroupMetadataKey, strings)
offset_values = st.builds(
    OffsetCommitValue,
    offset=int64s,
    leader_epoch=int32s,
    metadata=st.text(max_size=300),
    commit_timestamp=int64s,
    expire_timestamp=int64s,
)
members = st.builds(
    MemberMetadata,
    member_id=strings,
    group_instance_id=nullable_strings,
    client_id=strings,
    client_host=strings,
    rebalance_timeout=int32s,
    session_timeout=int32s,
    subscription=st.binary(max_size=300),
    assignment=st.binary(max_size=300),
)
group_values = st.builds(
    GroupMetadataValue,
    protocol_type=strings,
    generation=int32s,
    protocol=nullable_strings,
    leader=nullable_strings,
    current_state_timestamp=int64s,
    members=st.lists(members, max_size=4).map(tuple),
)


@given(offset_keys | group_keys)
def test_key_round_trip(key):
    assert decode_key(encode_key(key)) == key


@given(offset_values)
def test_offset_commit_value_round_trip(value):
    data = encode_offset_commit_value(value)
    decoded = decode_offset_commit_value(data)
    if value.expire_timestamp >= 0:
        assert struct.unpack_from(">h", data)[0] == 1
        assert decoded == dataclasses.replace(value, leader_epoch=-1)
    else:
        assert struct.unpack_from(">h", data)[0] == 3
        assert decoded == dataclasses.replace(value, expire_timestamp=-1)


@given(offset_values, st.integers(0, 4))
def test_offset_commit_value_round_trip_every_version(value, version):
    data = encode_offset_commit_value(value, version=version)
    assert struct.unpack_from(">h", data)[0] == version
    expected = dataclasses.replace(
        value,
        leader_epoch=value.leader_epoch if version >= 3 else -1,
        expire_timestamp=value.expire_timestamp if version == 1 else -1,
    )
    assert decode_offset_commit_value(data) == expected


@given(group_values)
def test_group_metadata_value_round_trip(value):
    data = encode_group_metadata_value(value)
    assert struct.unpack_from(">h", data)[0] == 3
    assert decode_group_metadata_value(data) == value


@given(group_values, st.integers(0, 4))
def test_group_metadata_value_round_trip_every_version(value, version):
    data = encode_group_metadata_value(value, version=version)
    if version < 4:
        assert data == group_bytes(value, version)
    expected = dataclasses.replace(
        value,
        current_state_timestamp=value.current_state_timestamp if version >= 2 else -1,
        members=tuple(
            dataclasses.replace(
                m,
                group_instance_id=m.group_instance_id if version >= 3 else None,
                rebalance_timeout=m.rebalance_timeout if version >= 1 else m.session_timeout,
            )
            for m in value.members
        ),
    )
    assert decode_group_metadata_value(data) == expected


@given(st.binary(max_size=64))
def test_decoders_only_raise_value_error_on_garbage(data):
    for decode in (decode_key, decode_offset_commit_value, decode_group_metadata_value):
        try:
            decode(data)
        except ValueError:
            pass

