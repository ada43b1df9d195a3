"""The tuple decoders of offset commit keys and values against the full decoders.

decode_offset_commit_key_tuple and decode_offset_commit_value_tuple decode the common versions
(keys 0 and 1, values 1 and 3) and return None for everything else, malformed bytes included, so
a caller falls back to decode_key / decode_offset_commit_value. Whenever they return a tuple it
must be exactly what the full decoder returns; whenever the full decoder raises they return None.
"""

import struct

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tidemark.records.offsets_schema import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_offset_commit_key_tuple,
    decode_offset_commit_value,
    decode_offset_commit_value_tuple,
    encode_key,
    encode_offset_commit_value,
)

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
# Short and long, ASCII and not (every plane, multi-byte UTF-8).
strings = st.text(max_size=40) | st.text(alphabet="aé€😀", max_size=20) | st.just("") | st.text(min_size=200,
                                                                                                 max_size=400)
epochs = st.just(-1) | int32s
timestamps = st.just(-1) | st.integers(0, 2**45) | int64s

offset_keys = st.builds(OffsetCommitKey, strings, strings, int32s)
offset_values = st.builds(OffsetCommitValue, offset=int64s, leader_epoch=epochs, metadata=strings,
                          commit_timestamp=timestamps, expire_timestamp=timestamps)


def key_as_tuple(data):
    """The full decoder's answer, shaped as the tuple decoder's."""
    key = decode_key(data)
    assert isinstance(key, OffsetCommitKey)
    return (struct.unpack_from(">h", data)[0], key.group, key.topic, key.partition)


def value_as_tuple(data):
    value = decode_offset_commit_value(data)
    return (struct.unpack_from(">h", data)[0], value.offset, value.leader_epoch, value.metadata,
            value.commit_timestamp, value.expire_timestamp)


def full_key_or_error(data):
    try:
        key = decode_key(data)
    except ValueError:
        return ValueError
    return key


def full_value_or_error(data):
    try:
        return decode_offset_commit_value(data)
    except ValueError:
        return ValueError


# -- keys ----------------------------------------------------------------------------------------


@given(offset_keys, st.sampled_from([0, 1]))
def test_offset_commit_keys_of_both_versions_decode_as_the_full_decoder(key, version):
    data = struct.pack(">h", version) + encode_key(key)[2:]
    decoded = decode_offset_commit_key_tuple(data)
    assert decoded == (version, key.group, key.topic, key.partition) == key_as_tuple(data)
    assert type(decoded[1]) is str and type(decoded[3]) is int


@given(strings)
def test_group_metadata_keys_are_left_to_the_full_decoder(group):
    assert decode_offset_commit_key_tuple(encode_key(GroupMetadataKey(group))) is None


@pytest.mark.parametrize("version", [2, 3, 8, 256, 32767, -1, -256])
def test_other_key_versions_are_left_to_the_full_decoder(version):
    data = struct.pack(">h", version) + encode_key(OffsetCommitKey("g", "t", 0))[2:]
    assert decode_offset_commit_key_tuple(data) is None


def mutations(encoded):
    """Bytes near a valid encoding: truncated, extended, one byte replaced."""
    return st.one_of(
        encoded.flatmap(lambda b: st.integers(0, len(b)).map(lambda n: b[:n])),
        st.tuples(encoded, st.binary(min_size=1, max_size=4)).map(lambda t: t[0] + t[1]),
        encoded.flatmap(lambda b: st.tuples(st.integers(0, len(b) - 1), st.integers(0, 255)).map(
            lambda t: b[: t[0]] + bytes([t[1]]) + b[t[0] + 1 :])),
    )


@given(st.binary(max_size=40) | mutations(offset_keys.map(encode_key)))
@example(b"")
@example(b"\x00\x01\x00\x01\xff\x00\x01t\x00\x00\x00\x00")  # invalid UTF-8 group
@example(b"\x00\x01\x00\x01g\x00\x01\xff\x00\x00\x00\x00")  # invalid UTF-8 topic
@example(b"\x00\x01\xff\xff\x00\x01t\x00\x00\x00\x00")  # null group
@example(b"\x00\x01\x00\x01g\xff\xff\x00\x00\x00\x00")  # null topic
@example(b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00")  # short partition
@example(b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00\x00")  # trailing byte
@example(b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00")  # empty names
def test_any_key_bytes_decode_as_the_full_decoder_or_fall_back(data):
    decoded = decode_offset_commit_key_tuple(data)
    full = full_key_or_error(data)
    if decoded is not None:
        assert isinstance(full, OffsetCommitKey)
        assert decoded == key_as_tuple(data)
    elif isinstance(full, OffsetCommitKey):
        # Only the full decoder's own fallbacks are left: every well-formed key is taken.
        pytest.fail(f"well-formed offset commit key {data!r} not decoded")


# -- values --------------------------------------------------------------------------------------


@given(offset_values)
def test_values_as_kafka_writes_them_decode_as_the_full_decoder(value):
    data = encode_offset_commit_value(value)  # v3, or v1 with an expire timestamp
    decoded = decode_offset_commit_value_tuple(data)
    assert decoded is not None and decoded == value_as_tuple(data)
    assert decoded[0] == (1 if value.expire_timestamp >= 0 else 3)


@given(offset_values, st.integers(0, 4))
def test_values_of_every_version_decode_as_the_full_decoder_or_fall_back(value, version):
    data = encode_offset_commit_value(value, version=version)
    decoded = decode_offset_commit_value_tuple(data)
    if version in (1, 3):
        assert decoded == value_as_tuple(data)
        assert decoded[2] == (value.leader_epoch if version == 3 else -1)
        assert decoded[5] == (value.expire_timestamp if version == 1 else -1)
    else:
        assert decoded is None


def v3(offset, epoch, metadata_length, metadata, commit):
    return struct.pack(">hqih", 3, offset, epoch, metadata_length) + metadata + struct.pack(">q", commit)


def v1(offset, metadata_length, metadata, commit, expire):
    return struct.pack(">hqh", 1, offset, metadata_length) + metadata + struct.pack(">qq", commit, expire)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (v3(5, -1, -1, b"", 7), (3, 5, -1, "", 7, -1)),  # null metadata reads as ""
        (v3(5, 2, 0, b"", -1), (3, 5, 2, "", -1, -1)),
        (v3(5, 2, 4, "é€".encode()[:4], 9), None),  # (not valid UTF-8 when cut: see below)
        (v3(5, 2, 5, "é€".encode(), 9), (3, 5, 2, "é€", 9, -1)),
        (v1(5, -1, b"", 7, 8), (1, 5, -1, "", 7, 8)),
        (v1(5, 0, b"", 7, -1), (1, 5, -1, "", 7, -1)),
        (v1(5, 3, b"abc", 7, 8), (1, 5, -1, "abc", 7, 8)),
    ],
)
def test_hand_built_values(data, expected):
    assert decode_offset_commit_value_tuple(data) == expected
    if expected is not None:
        assert value_as_tuple(data) == expected
    else:
        with pytest.raises(ValueError):
            decode_offset_commit_value(data)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        v3(5, 2, -2, b"", 7),  # negative length
        v3(5, 2, -1, b"", 7) + b"\x00",  # null metadata, then a trailing byte
        v3(5, 2, 1, b"\xff", 7),  # invalid UTF-8
        v3(5, 2, 3, b"abc", 7)[:-1],  # truncated
        v3(5, 2, 3, b"abc", 7) + b"\x00",  # trailing byte
        v3(5, 2, 0, b"", 7)[:-1],
        v3(5, 2, 0, b"", 7) + b"\x00",
        v1(5, 1, b"\xff", 7, 8),
        v1(5, -2, b"", 7, 8),
        v1(5, -1, b"", 7, 8) + b"\x00",
        v1(5, 0, b"", 7, 8)[:-1],
        struct.pack(">h", 5) + v3(5, 2, 0, b"", 7)[2:],  # unknown version
        struct.pack(">h", 259) + v3(5, 2, 0, b"", 7)[2:],
        struct.pack(">h", -253) + v3(5, 2, 0, b"", 7)[2:],
    ],
)
def test_malformed_values_fall_back_to_the_full_decoder_which_raises(data):
    assert decode_offset_commit_value_tuple(data) is None
    with pytest.raises(ValueError):
        decode_offset_commit_value(data)


@given(st.binary(max_size=40)
       | mutations(offset_values.map(encode_offset_commit_value))
       | mutations(st.tuples(offset_values, st.integers(0, 4)).map(
           lambda t: encode_offset_commit_value(t[0], version=t[1]))))
def test_any_value_bytes_decode_as_the_full_decoder_or_fall_back(data):
    decoded = decode_offset_commit_value_tuple(data)
    full = full_value_or_error(data)
    if decoded is not None:
        assert isinstance(full, OffsetCommitValue)
        assert decoded == value_as_tuple(data)
    elif isinstance(full, OffsetCommitValue) and data[:2] in (b"\x00\x01", b"\x00\x03"):
        pytest.fail(f"well-formed v1/v3 value {data!r} not decoded")
