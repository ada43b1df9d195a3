"""`tidemark offsets dump` over segment files laid out like the broker's data directory."""

import struct

import pytest
from click.testing import CliRunner

from tidemark.cli.offsets import offsets
from tidemark.records import build_batch
from tidemark.records import consumer_group_schema as cg
from tidemark.records.offsets_schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)

T = 1_700_000_000_000

OFFSET_KEY = encode_key(OffsetCommitKey("g1", "orders", 0))
GROUP_KEY = encode_key(GroupMetadataKey("g1"))
MEMBER = MemberMetadata("m-1", None, "client-1", "/127.0.0.1", 300000, 45000, b"\x00\x01sub", b"\xff")
GROUP_VALUE = encode_group_metadata_value(GroupMetadataValue("consumer", 3, "range", "m-1", T, (MEMBER,)))


def segment_name(base_offset):
    return f"{base_offset:020d}.log"


def write_segment(data_dir, partition, base_offset, batches):
    directory = data_dir / f"__consumer_offsets-{partition}"
    directory.mkdir(exist_ok=True)
    (directory / segment_name(base_offset)).write_bytes(b"".join(batches))


def control_key(kind):
    return struct.pack(">hh", 0, kind)


@pytest.fixture
def data_dir(tmp_path):
    write_segment(
        tmp_path,
        7,
        0,
        [
            build_batch(
                [
                    (OFFSET_KEY, encode_offset_commit_value(OffsetCommitValue(42, 5, "meta", T)), (), T),
                    (GROUP_KEY, GROUP_VALUE, (), T),
                ],
                base_offset=0,
            ),
            build_batch(
                [
                    (OFFSET_KEY, None, (), T + 1),
                    (cg.encode_key(MEMBER_KEY), cg.encode_value(5, MEMBER_VALUE), (), T + 1),
                    (struct.pack(">h", 3) + b"\x00\x02g1", None, (), T + 1),
                    (
                        encode_key(OffsetCommitKey("g2", "t\u00e9", 11)),
                        encode_offset_commit_value(OffsetCommitValue(7, -1, "", T, T + 60_000)),
                        (),
                        T + 1,
                    ),
                ],
                base_offset=2,
            ),
            build_batch([(control_key(1), b"\x00\x00\x00\x00\x00\x00", (), T + 2)], base_offset=6, is_control=True),
        ],
    )
    return tmp_path


MEMBER_KEY = cg.ConsumerGroupKey(5, "g1", "m")
MEMBER_VALUE = cg.MemberMetadataValue(None, None, "c", "/h", ("orders",), None, 30000, "uniform")

PARTITION_7 = [
    'partition: 7 offset: 0 key: {"group":"g1","topic":"orders","partition":0} '
    'value: {"offset":42,"leader_epoch":5,"metadata":"meta","commit_timestamp":1700000000000,"expire_timestamp":-1}',
    'partition: 7 offset: 1 key: {"group":"g1"} '
    'value: {"protocol_type":"consumer","generation":3,"protocol":"range","leader":"m-1",'
    '"current_state_timestamp":1700000000000,"members":[{"member_id":"m-1","group_instance_id":null,'
    '"client_id":"client-1","client_host":"/127.0.0.1","rebalance_timeout":300000,"session_timeout":45000,'
    '"subscription":"AAFzdWI=","assignment":"/w=="}]}',
    'partition: 7 offset: 2 key: {"group":"g1","topic":"orders","partition":0} value: <tombstone>',
    # KIP-848 consumer group records (types 3..8), decoded
    'partition: 7 offset: 3 key: {"record_type":5,"group":"g1","member_id":"m"} '
    'value: {"instance_id":null,"rack_id":null,"client_id":"c","client_host":"/h","subscribed_topic_names":["orders"],'
    '"subscribed_topic_regex":null,"rebalance_timeout_ms":30000,"server_assignor":"uniform"}',
    'partition: 7 offset: 4 key: {"record_type":3,"group":"g1","member_id":null} value: <tombstone>',
    'partition: 7 offset: 5 key: {"group":"g2","topic":"t\u00e9","partition":11} '
    'value: {"offset":7,"leader_epoch":-1,"metadata":"","commit_timestamp":1700000000000,"expire_timestamp":1700000060000}',
    "partition: 7 offset: 6 control: COMMIT",
]


def run(*args):
    return CliRunner().invoke(offsets, ["dump", *map(str, args)], catch_exceptions=False)


def test_dump_one_partition(data_dir):
    result = run("--data-dir", data_dir, "--partition", 7)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == PARTITION_7
    assert result.stderr == ""


def test_dump_all_partitions_in_numeric_order(data_dir):
    later = build_batch([(OFFSET_KEY, encode_offset_commit_value(OffsetCommitValue(43, 5, "", T)), (), T)], base_offset=10)
    write_segment(data_dir, 7, 10, [later])
    write_segment(data_dir, 10, 0, [build_batch([(GROUP_KEY, None, (), T)])])
    write_segment(data_dir, 3, 0, [build_batch([(GROUP_KEY, None, (), T)], base_offset=4)])
    # Not partitions of the offsets topic: ignored.
    (data_dir / "orders-0").mkdir()
    (data_dir / "orders-0" / segment_name(0)).write_bytes(build_batch([(b"k", b"v", (), T)]))
    (data_dir / "__consumer_offsets-9.0123abcd-delete").mkdir()
    (data_dir / "__consumer_offsets-3" / "00000000000000000000.index").write_bytes(b"\x00" * 8)

    result = run("--data-dir", data_dir)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        'partition: 3 offset: 4 key: {"group":"g1"} value: <tombstone>',
        *PARTITION_7,
        'partition: 7 offset: 10 key: {"group":"g1","topic":"orders","partition":0} '
        'value: {"offset":43,"leader_epoch":5,"metadata":"","commit_timestamp":1700000000000,"expire_timestamp":-1}',
        'partition: 10 offset: 0 key: {"group":"g1"} value: <tombstone>',
    ]


def test_partition_filter(data_dir):
    write_segment(data_dir, 3, 0, [build_batch([(GROUP_KEY, None, (), T)])])
    result = run("--data-dir", data_dir, "--partition", 3)
    assert result.stdout.splitlines() == ['partition: 3 offset: 0 key: {"group":"g1"} value: <tombstone>']


def test_missing_partition_is_an_error(data_dir):
    result = run("--data-dir", data_dir, "--partition", 8)
    assert result.exit_code != 0
    assert "__consumer_offsets-8" in result.stderr
    assert result.stdout == ""


def test_a_directory_without_offsets_partitions_is_an_error(tmp_path):
    (tmp_path / "orders-0").mkdir()
    result = run("--data-dir", tmp_path)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (f"Error: no __consumer_offsets-N directories in {tmp_path}: not a tidemark data "
                             f"directory, or no consumer group has committed offsets to it yet\n")


def test_empty_offsets_partitions_say_so(tmp_path):
    (tmp_path / "__consumer_offsets-0").mkdir()
    (tmp_path / "__consumer_offsets-0" / "00000000000000000000.log").write_bytes(b"")
    result = run("--data-dir", tmp_path)
    assert result.exit_code == 0
    assert result.stdout == ""
    assert result.stderr == f"1 __consumer_offsets partition(s) in {tmp_path}, no records in them\n"


def test_malformed_records_and_a_torn_tail(tmp_path):
    good = build_batch(
        [
            (b"\x00\x01\x00", b"\x00", (), T),  # truncated key
            (OFFSET_KEY, b"\x00\x09" + b"\x00" * 8, (), T),  # unknown value version
            (None, b"x", (), T),
        ]
    )
    write_segment(tmp_path, 0, 0, [good, good[:30]])
    result = run("--data-dir", tmp_path)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("partition: 0 offset: 0 key: <malformed: ")
    assert lines[0].endswith(" value: <1 bytes>")
    assert lines[1].startswith('partition: 0 offset: 1 key: {"group":"g1","topic":"orders","partition":0} value: <malformed: ')
    assert lines[2] == "partition: 0 offset: 2 key: <null> value: <1 bytes>"
    assert "30 bytes after the last complete batch" in result.stderr


def test_help_lists_dump():
    result = CliRunner().invoke(offsets, ["--help"])
    assert result.exit_code == 0
    assert "dump" in result.stdout


def test_dump_beside_a_cleaner_swapping_segments(tmp_path, monkeypatch):
    """A running broker's cleaner replaces segments between the dump's listing and its reads:
    every record of the log is printed once, none missed."""
    from tidemark.log import LogConfig, UnifiedLog, direct_read
    from tidemark.log.cleaner import Cleaner
    from tidemark.records import decode_records, iter_batches

    config = LogConfig(cleanup_policy="compact", segment_bytes=2048)
    log = UnifiedLog.open(tmp_path / "__consumer_offsets-0", config, now_ms=T)
    for i in range(300):
        value = encode_offset_commit_value(OffsetCommitValue(i, -1, "", T))
        log.append(build_batch([(encode_key(OffsetCommitKey("g", "t", i % 7)), value, (), T)]), now_ms=T)
    log.update_high_watermark(log.log_end_offset)
    listings = []

    def listed(directory, names):
        listings.append(names)
        if len(listings) == 1:  # cleaned into one segment: the listed names vanish
            log.config = LogConfig(cleanup_policy="compact", segment_bytes=1 << 20)
            Cleaner().clean(log, 0)

    monkeypatch.setattr(direct_read, "listing_hook", listed)
    result = run("--data-dir", tmp_path)
    assert result.exit_code == 0 and result.stderr.strip() == "", result.output  # no warning
    printed = [int(line.split()[3]) for line in result.stdout.splitlines()]
    in_log, offset = [], 0
    while offset < log.log_end_offset:  # one segment per read
        data = log.read(offset, 1 << 30)
        for pos, header in iter_batches(data):
            in_log += [r.offset for r in decode_records(data, pos)]
            offset = header.next_offset
    log.close()
    assert printed == in_log
    assert len(listings) > 1 and len(in_log) < 300


def test_dump_shows_transactional_commits_and_markers(tmp_path):
    from tidemark.records.control import build_marker_batch

    value = encode_offset_commit_value(OffsetCommitValue(9, -1, "", T, -1))
    write_segment(tmp_path, 0, 0, [
        build_batch([(OFFSET_KEY, value, (), T)], producer_id=12, producer_epoch=3, is_transactional=True),
        build_marker_batch(12, 3, False, 7, T, base_offset=1),
    ])
    result = run("--data-dir", tmp_path)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        'partition: 0 offset: 0 key: {"group":"g1","topic":"orders","partition":0} '
        'value: {"offset":9,"leader_epoch":-1,"metadata":"","commit_timestamp":1700000000000,"expire_timestamp":-1} '
        'transactional: {"producer_id":12,"producer_epoch":3}',
        'partition: 0 offset: 1 control: ABORT transactional: {"producer_id":12,"producer_epoch":3,"coordinator_epoch":7}',
    ]


def test_dump_decodes_the_transaction_log(tmp_path):
    from tidemark.records.transaction_log_schema import TransactionLogValue, TransactionStatus, \
        encode_transaction_key, encode_transaction_value
    value = TransactionLogValue(4000, 2, 60000, TransactionStatus.ONGOING, (("orders", (0, 1)),), T + 5, T)
    directory = tmp_path / "__transaction_state-3"
    directory.mkdir()
    (directory / segment_name(0)).write_bytes(build_batch([
        (encode_transaction_key("app"), encode_transaction_value(value), (), T),
        (encode_transaction_key("old"), None, (), T)]))
    result = CliRunner().invoke(offsets, ["dump", "--data-dir", str(tmp_path), "--topic", "__transaction_state"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        'partition: 3 offset: 0 key: {"transactional_id":"app"} value: {"producer_id":4000,"producer_epoch":2,'
        '"transaction_timeout_ms":60000,"state":"Ongoing","partitions":{"orders":[0,1]},'
        f'"last_update_timestamp_ms":{T + 5},"start_timestamp_ms":{T}}}',
        'partition: 3 offset: 1 key: {"transactional_id":"old"} value: <tombstone>']
