"""The compiled loops (tidemark.records._speedups) against their pure-Python references in
records.batch, on random batches well-formed and not: the same return value, the same dict
afterwards (contents and order), the same exception (type and message) for a bad batch, and
never a crash. Run with TIDEMARK_PURE_PYTHON=1 the rest of the suite checks the references;
these compare both either way."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark.records import batch as records_batch
from tidemark.records.batch import (
    _HEADER,
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    _build_key_value_batch_compiled,
    _collect_latest_compiled,
    _key_values_compiled,
    _latest_record_ranges_compiled,
    _map_key_offsets_compiled,
    build_batch,
    build_key_value_batch_py,
    collect_latest_py,
    key_values_py,
    latest_record_ranges_py,
    map_key_offsets_py,
    records_section,
)
from tidemark.records.compression import CompressionType

# Not built fails here (an ImportError), not skipped: a run must not check the pure path alone.
from tidemark.records import _speedups  # isort: skip

PURE = os.environ.get("TIDEMARK_PURE_PYTHON", "") not in ("", "0")


def test_the_extension_is_built_and_chosen_unless_the_pure_path_is_forced():
    assert records_batch.COMPILED is not PURE
    chosen = (records_batch.collect_latest, records_batch.map_key_offsets, records_batch.latest_record_ranges,
              records_batch.build_key_value_batch, records_batch.key_values)
    if PURE:
        assert chosen == (collect_latest_py, map_key_offsets_py, latest_record_ranges_py, build_key_value_batch_py,
                          key_values_py)
    else:
        assert chosen == (_collect_latest_compiled, _map_key_offsets_compiled, _latest_record_ranges_compiled,
                          _build_key_value_batch_compiled, _key_values_compiled)


def test_the_environment_forces_the_pure_path():
    code = "import tidemark.records.batch as b, tidemark.records as r; print(b.COMPILED, r.collect_latest is b.collect_latest_py)"
    env = dict(os.environ, TIDEMARK_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "True"]


# -- random batches ----------------------------------------------------------------------------

keys = st.one_of(st.none(), st.sampled_from([b"", b"k1", b"k2", b"x" * 63, b"y" * 64, b"z" * 8200]))
values = st.one_of(st.none(), st.just(b""), st.binary(max_size=70), st.binary(min_size=8190, max_size=8200))
headers = st.lists(st.tuples(st.sampled_from(["", "h", "trace"]), st.one_of(st.none(), st.binary(max_size=4))),
                   max_size=2)
records = st.lists(st.tuples(keys, values, headers, st.integers(0, 2**40)), min_size=1, max_size=40)
base_offsets = st.one_of(st.integers(0, 2**40), st.integers(2**63 - 60, 2**63 - 1))  # the sum may pass int64
known = st.dictionaries(st.sampled_from([b"k1", b"k9", b""]), st.integers(0, 2**64), max_size=3)


def _zigzag_bytes(n: int, padding: int = 0) -> bytes:
    """n as a zigzag varint of any size (past 64 bits too), with `padding` extra 0x80 bytes."""
    z = (n << 1) ^ (n >> 200) if n < 0 else n << 1
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    if padding:  # the same value, longer: continuation bits over zero groups
        out.append(z | 0x80)
        out += b"\x80" * (padding - 1)
        out.append(0)
    else:
        out.append(z)
    return bytes(out)


# A varint field: usually a small value, sometimes an edge (one/two-byte limits, int64 and past).
edge_ints = st.sampled_from([0, -1, 1, 63, 64, -64, -65, 8191, 8192, 2**31, -(2**31), 2**63 - 1, -(2**63),
                             2**63, 2**64, -(2**70)])
varint = st.tuples(st.one_of(st.integers(-3, 70), edge_ints), st.sampled_from([0, 0, 0, 1, 3, 9]))


@st.composite
def raw_records(draw):
    """A records section written field by field: lengths that may lie, varints of any size and
    padding, headers, bytes cut off the end."""
    out = bytearray()
    for _ in range(draw(st.integers(0, 6))):
        key = draw(st.one_of(st.none(), st.binary(max_size=8)))
        value = draw(st.one_of(st.none(), st.binary(max_size=8)))
        body = bytearray(draw(st.binary(min_size=1, max_size=1)))  # attributes
        for _ in range(2):  # timestamp delta, offset delta
            n, pad = draw(varint)
            body += _zigzag_bytes(n, pad)
        for field in (key, value):
            n, pad = draw(varint)
            n = draw(st.sampled_from([-1 if field is None else len(field), n]))
            body += _zigzag_bytes(n, pad) + (field or b"")
        header_count = draw(st.integers(-2, 2))
        body += _zigzag_bytes(header_count)
        for _ in range(max(header_count, 0)):
            body += _zigzag_bytes(draw(st.integers(-2, 3))) + b"h" + _zigzag_bytes(draw(st.integers(-2, 3))) + b"v"
        length = draw(st.sampled_from([len(body)] * 4 + [len(body) - 1, len(body) + 1, 0, -1, 2**63 - 1]))
        out += _zigzag_bytes(length, draw(st.sampled_from([0, 0, 1]))) + body
    cut = draw(st.integers(0, 3))
    return bytes(out[: len(out) - cut] if cut <= len(out) else out)


def _around(section: bytes, count: int, base_offset: int, attributes: int = 0) -> bytes:
    """A batch header (CRC not set: these scans do not check it) around a records section."""
    return _HEADER.pack(base_offset, BATCH_OVERHEAD - LOG_OVERHEAD + len(section), 0, 2, 0, attributes,
                        max(count - 1, 0), 1, 1, -1, -1, -1, count) + section


@st.composite
def batches(draw):
    """(data, position): a batch well-formed or damaged, alone or between other bytes."""
    base = draw(base_offsets)
    kind = draw(st.sampled_from(["built", "built", "control", "raw", "damaged"]))
    if kind == "raw":
        section = draw(raw_records())
        count = draw(st.sampled_from([0, 1, 2, 3, 6, -1]))
        batch = _around(section, count, base)
    else:
        codec = draw(st.sampled_from([CompressionType.NONE, CompressionType.NONE, CompressionType.GZIP]))
        batch = build_batch(draw(records), base_offset=base, compression=codec, is_control=kind == "control")
        if kind == "damaged":
            damaged = bytearray(batch)
            for _ in range(draw(st.integers(1, 3))):
                at = draw(st.integers(BATCH_OVERHEAD, len(damaged) - 1))
                damaged[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, damaged[at] ^ 1]))
            if draw(st.booleans()):  # a count that disagrees with the records
                struct.pack_into(">i", damaged, BATCH_OVERHEAD - 4, draw(st.integers(-1, 50)))
            batch = bytes(damaged)
    before, after = draw(st.sampled_from([(b"", b""), (b"\x00" * 7, b""), (b"", b"\x03" * 9)]))
    return before + batch + after, len(before)


def _outcome(fn, *args, **kwargs):
    try:
        return "returned", fn(*args, **kwargs)
    except Exception as e:  # the same type and message, whichever raised
        return "raised", type(e), str(e)


def _state(d: dict) -> list:
    return list(d.items())  # contents and order


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(case=batches(), start=known)
def test_collect_latest_compiled_is_the_reference(case, start):
    data, position = case
    pure, compiled = dict.fromkeys(start, (0, None)), dict.fromkeys(start, (0, None))
    assert _outcome(_collect_latest_compiled, data, position, compiled) == \
        _outcome(collect_latest_py, data, position, pure)
    assert _state(compiled) == _state(pure)


@SETTINGS
@given(case=batches(), start=known)
def test_map_key_offsets_compiled_is_the_reference(case, start):
    data, position = case
    pure, compiled = dict(start), dict(start)
    assert _outcome(_map_key_offsets_compiled, data, position, compiled) == \
        _outcome(map_key_offsets_py, data, position, pure)
    assert _state(compiled) == _state(pure)


@SETTINGS
@given(case=batches(), as_type=st.sampled_from([bytes, bytes, bytearray, memoryview]))
def test_key_values_compiled_is_the_reference(case, as_type):
    data, position = case
    data = as_type(data)
    assert _outcome(_key_values_compiled, data, position) == _outcome(key_values_py, data, position)


@SETTINGS
@given(case=batches(), retain=st.booleans(), data=st.data())
def test_latest_record_ranges_compiled_is_the_reference(case, retain, data):
    batch, position = case
    try:
        header, section, first, last = records_section(batch, position)
    except Exception:
        return  # the cleaner reads the section first: nothing of this function's to compare
    offsets: dict = {}
    try:
        map_key_offsets_py(batch, position, offsets)
    except Exception:
        pass
    # Some keys elsewhere (a later batch), some values that are not ints at all.
    for key in data.draw(st.lists(st.sampled_from(sorted(offsets) or [b"k1"]), max_size=3)):
        offsets[key] = data.draw(st.one_of(st.integers(-1, 2**65), st.none(), st.just(1.0 * header.base_offset)))
    count = data.draw(st.sampled_from([header.records_count, header.records_count, 0, header.records_count + 1]))
    args = (section, first, last, count, header.base_offset, offsets, retain)
    assert _outcome(_latest_record_ranges_compiled, *args) == _outcome(latest_record_ranges_py, *args)


pair_items = st.one_of(keys, values, st.just(bytearray(b"ba")), st.just(memoryview(b"mv")), st.just("text"),
                       st.just(5))


@SETTINGS
@given(pairs=st.lists(st.one_of(st.tuples(keys, values), st.tuples(keys, values), st.tuples(pair_items, pair_items),
                                st.lists(values, min_size=2, max_size=2), st.tuples(keys), st.just(None)),
                      max_size=12),
       as_tuple=st.booleans(), timestamp=st.one_of(st.integers(-(2**63), 2**63 - 1), st.just(2**63)),
       codec=st.sampled_from([CompressionType.NONE, 0, CompressionType.GZIP, 1, None, 9]), transactional=st.booleans(),
       producer_id=st.one_of(st.integers(-1, 2**63 - 1), st.just(-(2**63) - 1)),
       producer_epoch=st.one_of(st.integers(-1, 2**15 - 1), st.sampled_from([-(2**15) - 1, 2**15, True])))
def test_build_key_value_batch_compiled_is_the_reference(pairs, as_tuple, timestamp, codec, transactional,
                                                         producer_id, producer_epoch):
    pairs = tuple(pairs) if as_tuple else pairs
    options = dict(compression=codec, producer_id=producer_id, producer_epoch=producer_epoch,
                   is_transactional=transactional)
    assert _outcome(_build_key_value_batch_compiled, pairs, timestamp, **options) == \
        _outcome(build_key_value_batch_py, pairs, timestamp, **options)


# -- the compiled loops take the common case themselves (else the properties prove nothing) ----


@settings(max_examples=100, deadline=None)
@given(batch_records=records, base=st.integers(0, 2**40), retain=st.booleans())
def test_well_formed_batches_are_read_by_the_compiled_loops(batch_records, base, retain):
    data = build_batch(batch_records, base_offset=base)
    count = len(batch_records)
    latest: dict = {}
    assert _speedups.collect_latest(data, BATCH_OVERHEAD, count, base, latest) is not None
    assert _speedups.collect_latest_batch(b"\x00" * 3 + data, 3, {}) == _collect_latest_compiled(data, 0, latest)
    offsets: dict = {}
    assert _speedups.map_key_offsets(data, BATCH_OVERHEAD, len(data), count, base, offsets) is not None
    assert _speedups.map_key_offsets_batch(data + b"\x00" * 3, 0, {}) == _map_key_offsets_compiled(data, 0, offsets)
    assert _speedups.latest_record_ranges(data, BATCH_OVERHEAD, len(data), count, base, offsets, retain) is not None
    assert _speedups.read_key_values_batch(b"\x00" * 3 + data + b"\x01", 3) == key_values_py(data) is not None
    pairs = [(key, value) for key, value, _, _ in batch_records]
    assert _speedups.key_value_section(pairs) is not None
    assert _speedups.key_value_batch(pairs, base, -1, -1, 0, crc32c) is not None


@settings(max_examples=50, deadline=None)
@given(batch_records=records, base=st.integers(0, 2**40),
       codec=st.sampled_from([CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]))
def test_compressed_batches_are_read_by_the_compiled_loop(batch_records, base, codec):
    data = build_batch(batch_records, base_offset=base, compression=codec)
    assert _speedups.read_key_values_batch(data, 0) is None  # the section is decompressed first
    _, section, start, _ = records_section(data)
    listed = _speedups.read_key_values(section, start, len(batch_records), base)
    assert listed == _key_values_compiled(data) == key_values_py(data)
    assert [offset for offset, _, _ in listed] == list(range(base, base + len(batch_records)))


def test_a_batch_past_int64_offsets_is_the_references():
    data = build_batch([(b"k", b"v", (), 1)] * 3, base_offset=2**63 - 2)  # offsets 2**63 - 2 to 2**63
    assert _speedups.collect_latest(data, BATCH_OVERHEAD, 3, 2**63 - 2, {}) is None  # left to the reference
    latest: dict = {}
    assert _collect_latest_compiled(data, 0, latest) == 3
    assert latest == {b"k": (2**63, b"v")}
    assert _speedups.read_key_values_batch(data, 0) is None
    assert _key_values_compiled(data) == [(2**63 - 2, b"k", b"v"), (2**63 - 1, b"k", b"v"), (2**63, b"k", b"v")]


# -- hand-written edges found in review -------------------------------------------------------


def test_a_batch_length_near_int32_max_is_a_partial_batch():
    # length + 12 wrapped in 32-bit arithmetic used to pass for a short batch and was read.
    data = bytearray(build_key_value_batch_py([(b"k", b"v")], 0))
    struct.pack_into(">i", data, 8, 2**31 - 8)
    data = bytes(data)
    for compiled, pure in ((_collect_latest_compiled, collect_latest_py),
                           (_map_key_offsets_compiled, map_key_offsets_py)):
        got, want = {}, {}
        assert _outcome(compiled, data, 0, got) == _outcome(pure, data, 0, want) == \
            ("raised", records_batch.CorruptRecordError, "partial batch")
        assert got == want == {}
    assert _speedups.collect_latest_batch(data, 0, {}) is None


def test_a_view_the_checksum_function_keeps_reads_the_batch_after_it_is_gone():
    # The view used to lend the batch's storage without owning it: kept, it read freed memory
    # (a batch this large is unmapped when freed, so that read crashed).
    code = """
import tidemark.records.batch as b
from crc32c import crc32c
kept = []
def keep(view):
    kept.append(view)
    return crc32c(view)
b.crc32c = keep
pairs = [(b"k", b"x" * (40 << 20))]
batch = b._build_key_value_batch_compiled(pairs, 0)
assert batch == b.build_key_value_batch_py(pairs, 0)
expected = crc32c(memoryview(batch)[21:])
del batch
print(crc32c(kept[0]) == expected, len(kept[0]) == 61 - 21 + 3 + 4 + 1 + 1 + (40 << 20) + 1 + 4)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout.split()) == (0, ["True", "True"]), out.stderr


@pytest.mark.parametrize("checksum", [2**32, -1, 2**64, 1.5, True])
def test_a_checksum_that_is_not_32_bits_is_the_references(monkeypatch, checksum):
    monkeypatch.setattr(records_batch, "crc32c", lambda view: checksum)
    pairs = [(b"k", b"v")]
    assert _outcome(_build_key_value_batch_compiled, pairs, 0) == _outcome(build_key_value_batch_py, pairs, 0)


class _EqualAndUnequal:
    """A map value whose `==` and `!=` both say yes: the reference asks `!=`."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return True

    __hash__ = None


class _NoTruth:
    def __bool__(self):
        raise RuntimeError("no truth value")


_ONE = build_key_value_batch_py([(b"k", b"v")], 0)


@pytest.mark.parametrize("count, base_offset, offsets, retain", [
    (1, 0, {b"k": _EqualAndUnequal()}, False),  # used to compare with == and keep the record
    (1, 0, {}, _NoTruth()),                     # used to ask the truth up front and raise
    (2**63, 0, {b"k": 0}, False),               # used to raise OverflowError, not the reference's error
    (1, 2**64, {b"k": 0}, False),
    (1, -(2**63) - 1, {b"k": 0}, True),
])
def test_latest_record_ranges_leaves_unusual_arguments_to_the_reference(count, base_offset, offsets, retain):
    args = (_ONE, BATCH_OVERHEAD, len(_ONE), count, base_offset, offsets, retain)
    assert _outcome(_latest_record_ranges_compiled, *args) == _outcome(latest_record_ranges_py, *args)


def test_read_key_values_leaves_counts_and_positions_it_cannot_read_to_the_reference():
    assert _speedups.read_key_values(_ONE, BATCH_OVERHEAD, 2**64, 0) is None
    assert _speedups.read_key_values(_ONE, 2**64, 1, 0) is None
    assert _speedups.read_key_values(_ONE, BATCH_OVERHEAD, 1, 2**64) is None
    assert _speedups.read_key_values(_ONE, BATCH_OVERHEAD, 2**31 - 1, 0) is None  # more records than bytes
    assert _speedups.read_key_values(_ONE, len(_ONE) + 1, 1, 0) is None
    assert _speedups.read_key_values(bytearray(_ONE), BATCH_OVERHEAD, 1, 0) is None
    assert _speedups.read_key_values(_ONE, BATCH_OVERHEAD, -1, 0) == [] == key_values_py(_around(b"", -1, 0))
    assert _speedups.read_key_values_batch(_ONE, True) is None


def test_map_key_offsets_and_collect_latest_leave_ints_past_64_bits_to_the_reference():
    assert _speedups.collect_latest(_ONE, BATCH_OVERHEAD, 2**64, 0, {}) is None
    assert _speedups.collect_latest(_ONE, 2**64, 1, 0, {}) is None
    assert _speedups.map_key_offsets(_ONE, BATCH_OVERHEAD, len(_ONE), 1, 2**64, {}) is None
    assert _speedups.map_key_offsets(_ONE, BATCH_OVERHEAD, 2**63, 1, 0, {}) is None
