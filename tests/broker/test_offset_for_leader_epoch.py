"""OffsetForLeaderEpoch's per-partition answer against a partition with a real leader epoch."""

from kio.schema.errors import ErrorCode

from tidemark.broker.apis.offset_for_leader_epoch import end_offset
from tidemark.replication.partition import Partition
from tidemark.log import LogConfig, UnifiedLog
from tidemark.records import build_batch

NOW = 1_700_000_000_000


def test_answers_from_the_epoch_cache_and_fences_on_the_current_leader_epoch(tmp_path):
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    for epoch, n in [(2, 3), (4, 2)]:
        log.append(build_batch([(None, b"v", (), NOW)] * n), leader_epoch=epoch, now_ms=NOW)
    log.assign_epoch_start_offset(5)
    partition = Partition("t", 0, log, leader_epoch=5)
    assert end_offset(partition, 5, 3) == {"error_code": ErrorCode.none, "leader_epoch": 2, "end_offset": 3}
    assert end_offset(partition, -1, 4) == {"error_code": ErrorCode.none, "leader_epoch": 4, "end_offset": 5}
    assert end_offset(partition, 5, 5) == {"error_code": ErrorCode.none, "leader_epoch": 5, "end_offset": 5}
    assert end_offset(partition, 4, 4) == {"error_code": ErrorCode.fenced_leader_epoch}
    assert end_offset(partition, 6, 4) == {"error_code": ErrorCode.unknown_leader_epoch}
    assert end_offset(None, 5, 4) == {"error_code": ErrorCode.unknown_topic_or_partition}
    log.local.offline = OSError("disk gone")
    assert end_offset(partition, 5, 4) == {"error_code": ErrorCode.kafka_storage_error}
    log.local.offline = None
    log.close()
