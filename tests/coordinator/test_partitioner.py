import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.coordinator.partitioner import java_string_hash, partition_for

INT32_MIN = -(2**31)


def reference_hash(s: str) -> int:
    """String.hashCode spelled out differently: UTF-16 code units, Python ints, wrap at the end."""
    units = struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be"))
    n = len(units)
    h = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)) % 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("Aa", 2112),
        ("BB", 2112),
        ("abc", 96354),  # 97*31*31 + 98*31 + 99
        ("hello", 99162322),  # Java: "hello".hashCode()
        ("testGroup", -1202336499),
        ("é", 0xE9),  # one BMP unit, not its two UTF-8 bytes
    ],
)
def test_known_java_hashes(s, expected):
    assert java_string_hash(s) == expected


def test_non_bmp_characters_count_as_two_surrogate_units():
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16.
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00 == 1772899
    assert java_string_hash("a\U0001F600") == 97 * 31**2 + 0xD83D * 31 + 0xDE00
    # U+10000, the first supplementary code point: D800 DC00.
    assert java_string_hash("\U00010000") == 0xD800 * 31 + 0xDC00


def test_wraps_around_int32():
    h = java_string_hash("testGroup")
    assert INT32_MIN <= h < 0


def test_test_group_lands_on_partition_49_of_50():
    assert partition_for("testGroup", 50) == 49


def test_small_partition_counts():
    assert partition_for("", 50) == 0
    assert partition_for("a", 50) == 47
    assert partition_for("Aa", 50) == partition_for("BB", 50) == 12
    assert partition_for("\U0001F600", 50) == 1772899 % 50
    assert partition_for("anything", 1) == 0


@pytest.mark.parametrize("s", ["polygenelubricants", "GydZG_", "DESIGNING WORKHOUSES"])
@pytest.mark.parametrize("partitions", [1, 3, 7, 50, 51, 1000])
def test_hash_of_integer_min_value_maps_to_partition_zero(s, partitions):
    # Math.abs(Integer.MIN_VALUE) is still negative; Kafka's Utils.abs maps it to 0.
    assert java_string_hash(s) == INT32_MIN
    assert reference_hash(s) == INT32_MIN
    assert partition_for(s, partitions) == 0


def test_negative_hash_uses_the_absolute_value():
    h = java_string_hash("testGroup")
    assert partition_for("testGroup", 1000) == (-h) % 1000 == 499


@pytest.mark.parametrize("partitions", [0, -1])
def test_needs_a_positive_partition_count(partitions):
    with pytest.raises(ValueError):
        partition_for("g", partitions)


@given(st.text())
def test_matches_reference_hash(s):
    assert java_string_hash(s) == reference_hash(s)


@given(st.text(), st.integers(min_value=1, max_value=10_000))
def test_partition_in_range(s, partitions):
    p = partition_for(s, partitions)
    assert 0 <= p < partitions
    h = java_string_hash(s)
    assert p == (0 if h == INT32_MIN else abs(h) % partitions)
