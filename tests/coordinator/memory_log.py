"""The in-memory partition log the coordinator tests replay through.

It keeps the storage contract of UnifiedLog (tests/log/test_storage_contract.py): offsets
assigned per batch, whole-batch reads bounded by max_bytes and an upper bound, a high
watermark within [log start, log end], retention that removes whole batches (each batch plays
a segment) wholly below the high watermark and never the last one.
"""

from __future__ import annotations

from bisect import bisect_right

from tidemark.log import AppendInfo, LogConfig, OffsetOutOfRangeError
from tidemark.records import build_batch, decode_records, iter_batches, set_base_offset

NOW = 1_700_000_000_000


class InMemoryLog:
    def __init__(self, config: LogConfig | None = None) -> None:
        self.config = config or LogConfig()
        self._batches: list[tuple[int, int, int, bytes]] = []  # (base, next offset, max timestamp, bytes)
        self.log_start_offset = 0
        self._high_watermark = 0

    # -- the storage contract ---------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._batches[-1][1] if self._batches else self.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def update_high_watermark(self, offset: int) -> int:
        self._high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        return self._high_watermark

    def append(self, records: bytes, *, leader_epoch: int = 0, now_ms: int) -> AppendInfo:
        buf = bytearray(records)
        first = next_offset = self.log_end_offset
        max_ts, offset_of_max = -1, first
        for pos, h in iter_batches(buf):
            set_base_offset(buf, pos, next_offset)
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max = h.max_timestamp, next_offset + h.last_offset_delta
            self._batches.append((next_offset, next_offset + h.last_offset_delta + 1, h.max_timestamp,
                                  bytes(buf[pos:pos + h.size])))
            next_offset += h.last_offset_delta + 1
        return AppendInfo(first, next_offset - 1, max_ts, offset_of_max)

    def read(self, offset: int, max_bytes: int, *, upper_bound: int | None = None, min_one_batch: bool = True) -> bytes:
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRangeError(f"offset {offset} is outside [{self.log_start_offset}, {end}]")
        bound = end if upper_bound is None else min(upper_bound, end)
        out = bytearray()
        i = max(0, bisect_right([base for base, *_ in self._batches], offset) - 1)
        for _, next_offset, _, data in self._batches[i:]:
            if offset >= bound or next_offset > bound:
                break
            if len(out) + len(data) > max_bytes and not (min_one_batch and not out):
                break
            out += data
        return bytes(out)

    def delete_retention(self, now_ms: int) -> int:
        doomed = 0
        for base, next_offset, max_ts, _ in self._batches[:-1]:
            if next_offset > self._high_watermark or not (
                    self.config.retention_ms >= 0 and now_ms - max_ts > self.config.retention_ms):
                break
            doomed += 1
        del self._batches[:doomed]
        if doomed:
            self.log_start_offset = self._batches[0][0]
        return doomed

    # -- for the coordinator tests ----------------------------------------------------------

    @property
    def records(self) -> list[tuple[bytes | None, bytes | None]]:
        return [(key, value) for _, key, value in self._records()]

    def _records(self):
        for _, _, _, data in self._batches:
            for r in decode_records(data):
                yield r.offset, r.key, r.value

    def append_pending(self, shard, result, now=NOW) -> int:
        """Append the result's records as the runtime does, not committed yet: the shard's
        latest view takes them. Returns the offset of the first."""
        info = self.append(build_batch([(r.key, r.value, (), now) for r in result.records]), now_ms=now)
        for offset, record in enumerate(result.records, start=info.first_offset):
            result.responses.update(shard.replay_appended(offset, record, now_ms=now).responses)
        return info.first_offset

    def commit_from(self, shard, first, result, now=NOW):
        """The records from `first` on are committed: the shard's committed view takes them."""
        for offset, key, value in self._records():
            if offset >= first:
                result.responses.update(shard.replay(offset, key, value, now_ms=now).responses)
        return result

    def append_and_replay(self, shard, result, now=NOW):
        if result.records:
            self.commit_from(shard, self.append_pending(shard, result, now), result, now)
        return result

    def replay_into(self, shard) -> None:
        for offset, key, value in self._records():
            shard.replay(offset, key, value, now_ms=NOW)
