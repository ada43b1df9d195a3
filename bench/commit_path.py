"""The broker's CPU per offset commit, in process: the path a commit takes without sockets or disk.

    python -m bench.commit_path [--partitions N] [--commits N] [--repeats R] [--profile FILE]
    python -m bench.commit_path --load RECORDS [--repeats R]
    python -m bench.commit_path --txn [--partitions N] [--commits N] [--repeats R]
    python -m bench.commit_path --standby [--partitions N] [--commits N] [--repeats R] [--profile FILE]

One OffsetCommit v9 frame (what confluent-kafka 2.16 sends) of --partitions partitions of one
topic, from a standalone consumer (generation -1), goes through the steps the broker runs:
decoding the frame, the shard's handler (checks, records), building the offsets batch, the
latest view's replay at append, the committed view's replay once committed (of the whole write,
as the runtime does, on a tree that has it), and the response frame. The same for OffsetFetch
v8 of those partitions (decode, read, response). Prints the median over --repeats of CPU microseconds (this thread's CPU time, not wall clock: the
machine is shared) per request and per partition, step by step; with
--profile, a cProfile of one repeat of the whole path sorted by own time.

--txn: the same for TxnOffsetCommit v3 (a producer's transactional offsets): decoding, the
handler, the transactional batch, both replays, then the COMMIT marker's replay, which moves the
pending offsets into the committed view.

--standby: a follower's standby replay of --commits such OffsetCommit writes, each read back
from its batch as the broker's reader does (the read, then the replay, timed apart): record by
record (`replay` of each, the runtime's loop before `replay_chunk`) and, on a tree that has it,
the chunk whole (`replay_chunk`), alternated in one process; min and median CPU per write. Then
loading's replay of its kept records (500 groups' commits of 2 topics x 50 partitions, each
key's last record in log order) both ways.

--load: the scan that loading an offsets partition makes of its log, over RECORDS offset commit
records of 1,000 keys in batches of 5,000 (in memory: no log, no replay of the kept records),
in records per CPU second, median of --repeats. On a tree without `records.collect_latest` it
runs the loop loading had before it (every record listed, its key moved to the dict's end).
Where the compiled loops are in use (records.batch.COMPILED) it also times the pure-Python
reference (`collect_latest_py`), alternated with them in this process, and prints the ratio.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

from tidemark.coordinator.shard import CoordinatorConfig, GroupCoordinatorShard
try:
    from tidemark.records import build_key_value_batch
except ImportError:  # a tree from before it: the broker built the batch with build_batch
    from tidemark.records import build_batch

    def build_key_value_batch(pairs, timestamp):
        return build_batch([(key, value, (), timestamp) for key, value in pairs])
from tidemark.wire.api_keys import ApiKey
from tidemark.wire.build import build
from tidemark.wire.client import encode_request
from tidemark.wire.codec import decode_request, encode_response, response_schema
from tidemark.wire.fast_responses import encode_fast

GROUP, TOPIC = "bench-commit-path", "bench-commit-path-topic"
SUPPORTED = {ApiKey.OFFSET_COMMIT: (0, 9), ApiKey.OFFSET_FETCH: (0, 9), ApiKey.TXN_OFFSET_COMMIT: (0, 3)}
PRODUCER_ID = 4_000


def _frame(api_key: int, version: int, body: dict) -> bytes:
    return encode_request(api_key, version, 7, body, client_id="rdkafka")


def commit_frame(partitions: int, offset: int) -> bytes:
    return _frame(ApiKey.OFFSET_COMMIT, 9, {
        "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": p, "committed_offset": offset + p, "committed_leader_epoch": -1,
             "committed_metadata": ""} for p in range(partitions)]}]})


def txn_commit_frame(partitions: int, offset: int) -> bytes:
    return _frame(ApiKey.TXN_OFFSET_COMMIT, 3, {
        "transactional_id": "bench-txn", "group_id": GROUP, "producer_id": PRODUCER_ID, "producer_epoch": 0,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": p, "committed_offset": offset + p, "committed_leader_epoch": -1,
             "committed_metadata": ""} for p in range(partitions)]}]})


def fetch_frame(partitions: int) -> bytes:
    return _frame(ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": list(range(partitions))}]}],
        "require_stable": True})


def encode(request, response: dict) -> bytes:
    frame = encode_fast(request, response)
    if frame is None:
        frame = encode_response(request, build(response_schema(request.api_key, request.api_version), response))
    return frame


EVERY_PARTITION = range(2**31)


class Path:
    """One shard and its log's next offset: commits go through every step, timed per step."""

    def __init__(self) -> None:
        # Every partition exists, asked as the broker asks: once per topic (its range of indexes).
        self.shard = GroupCoordinatorShard(0, CoordinatorConfig(), lambda _t, _p: True, lambda _t: EVERY_PARTITION)
        self.log_end = 0
        self.seconds = dict.fromkeys(("decode", "handler", "batch", "replay_appended", "replay", "response"), 0.0)

    def commit(self, frame: bytes, now: int) -> bytes:
        s, clock = self.seconds, time.thread_time
        t0 = clock()
        request = decode_request(frame, SUPPORTED)
        t1 = clock()
        result = self.shard.commit_offsets(request.body, request.api_version, 1, now)
        t2 = clock()
        build_key_value_batch([(r.key, r.value) for r in result.records], now)
        t3 = clock()
        first = self.log_end
        whole = getattr(result.records, "group", None) is not None  # a write the runtime replays whole
        if whole:
            self.shard.replay_appended_commits(first, result.records, now_ms=now)
        else:  # a tree from before it: record by record
            for offset, record in enumerate(result.records, start=first):
                self.shard.replay_appended(offset, record, now_ms=now)
        t4 = clock()
        if whole:
            self.shard.replay_commits(first, result.records, now_ms=now)
        else:
            for offset, record in enumerate(result.records, start=first):
                self.shard.replay(offset, record.key, record.value, now_ms=now, decoded=record.decoded)
        self.log_end = first + len(result.records)
        t5 = clock()
        frame = encode(request, result.responses[1])
        t6 = clock()
        s["decode"] += t1 - t0
        s["handler"] += t2 - t1
        s["batch"] += t3 - t2
        s["replay_appended"] += t4 - t3
        s["replay"] += t5 - t4
        s["response"] += t6 - t5
        return frame

    def txn_commit(self, frame: bytes, now: int) -> None:
        """One TxnOffsetCommit, then its transaction's COMMIT marker (replayed once committed)."""
        from tidemark.coordinator.txn_offsets import TxnMarkerKey
        s, clock = self.seconds, time.thread_time
        t0 = clock()
        request = decode_request(frame, SUPPORTED)
        t1 = clock()
        result = self.shard.txn_commit_offsets(request.body, 1, now)
        t2 = clock()
        build_txn_batch([(r.key.key, r.value) for r in result.records], now)
        t3 = clock()
        first = self.log_end
        for offset, record in enumerate(result.records, start=first):
            self.shard.replay_appended(offset, record, now_ms=now)
        t4 = clock()
        for offset, record in enumerate(result.records, start=first):
            self.shard.replay(offset, record.key, record.value, now_ms=now, decoded=record.decoded)
        marker = first + len(result.records)
        self.shard.replay(marker, TxnMarkerKey(PRODUCER_ID, 0, True, 0, marker), None, now_ms=now)
        self.log_end = marker + 1
        t5 = clock()
        s["decode"] += t1 - t0
        s["handler"] += t2 - t1
        s["batch"] += t3 - t2
        s["replay_appended"] += t4 - t3
        s["replay"] += t5 - t4

    def fetch(self, frame: bytes) -> tuple[float, float, float]:
        clock = time.thread_time
        t0 = clock()
        request = decode_request(frame, SUPPORTED)
        t1 = clock()
        group = request.body.groups[0]
        wanted = [(t.name, list(t.partition_indexes)) for t in group.topics]
        response = {"throttle_time": 0, "groups": [
            {"group_id": group.group_id, "error_code": 0,
             "topics": self.shard.fetch_offsets(group.group_id, wanted, request.body.require_stable)}]}
        t2 = clock()
        encode(request, response)
        t3 = clock()
        return t1 - t0, t2 - t1, t3 - t2


def run(partitions: int, commits: int) -> tuple[dict[str, float], dict[str, float]]:
    path = Path()
    frames = [commit_frame(partitions, i * partitions) for i in range(min(commits, 50))]
    for i in range(commits):
        path.commit(frames[i % len(frames)], 1_700_000_000_000 + i)
    commit_us = {step: seconds / commits * 1e6 for step, seconds in path.seconds.items()}
    commit_us["total"] = sum(commit_us.values())
    frame = fetch_frame(partitions)
    totals = [0.0, 0.0, 0.0]
    for _ in range(commits):
        for i, seconds in enumerate(path.fetch(frame)):
            totals[i] += seconds
    fetch_us = {step: seconds / commits * 1e6 for step, seconds in zip(("decode", "read", "response"), totals)}
    fetch_us["total"] = sum(fetch_us.values())
    return commit_us, fetch_us


def build_txn_batch(pairs, timestamp):
    try:
        return build_key_value_batch(pairs, timestamp, producer_id=PRODUCER_ID, producer_epoch=0,
                                     is_transactional=True)
    except TypeError:  # the fallback above: no transactional batches
        return build_key_value_batch(pairs, timestamp)


def run_txn(partitions: int, commits: int) -> dict[str, float]:
    path = Path()
    del path.seconds["response"]  # answered by the broker's generic encoder: not this path's
    frames = [txn_commit_frame(partitions, i * partitions) for i in range(min(commits, 50))]
    for i in range(commits):
        path.txn_commit(frames[i % len(frames)], 1_700_000_000_000 + i)
    us = {step: seconds / commits * 1e6 for step, seconds in path.seconds.items()}
    us["total"] = sum(us.values())
    return us


def load_rate(records: int, repeats: int) -> dict[str, float]:
    """Records per CPU second of the scan ("") and, beside compiled loops, of the pure reference ("pure")."""
    from tidemark.records import build_batch, iter_batches, iter_key_values
    from tidemark.records.offsets_schema import (
        OffsetCommitKey, OffsetCommitValue, encode_key, encode_offset_commit_value,
    )
    try:
        from tidemark.records import collect_latest
    except ImportError:
        collect_latest = None
    keys = [encode_key(OffsetCommitKey("bench-load", "loaded", p)) for p in range(1_000)]
    data = b"".join(build_batch([(keys[i % 1_000], encode_offset_commit_value(OffsetCommitValue(i, commit_timestamp=1)),
                                  (), 1) for i in range(start, min(records, start + 5_000))], base_offset=start)
                    for start in range(0, records, 5_000))

    def scan(collect) -> None:
        latest: dict = {}
        if collect is not None:
            for position, _ in iter_batches(data, validate=False):
                collect(data, position, latest)
            sorted(latest.items(), key=lambda item: item[1][0])
        else:
            listed = []
            for position, _ in iter_batches(data, validate=False):
                listed.extend(iter_key_values(data, position))
            for offset, key, value in listed:
                if key is not None:
                    latest.pop(key, None)
                    latest[key] = (offset, value)

    scans = {"": collect_latest}
    try:
        from tidemark.records import batch
        if batch.COMPILED:
            scans["pure"] = batch.collect_latest_py
    except (ImportError, AttributeError):  # a tree from before the compiled loops
        pass
    seconds: dict[str, list[float]] = {name: [] for name in scans}
    for _ in range(repeats):
        for name, collect in scans.items():  # alternated, so the machine's load weighs on both alike
            started = time.thread_time()
            scan(collect)
            seconds[name].append(time.thread_time() - started)
    return {name: records / statistics.median(times) for name, times in seconds.items()}


def standby_log(partitions: int, commits: int) -> list[bytes]:
    """The offsets log a leader writes for `commits` OffsetCommits of `partitions` partitions:
    one batch per write, at its log offsets, as a follower's replica holds them."""
    from tidemark.records import set_base_offset
    leader = Path()
    frames = [commit_frame(partitions, i * partitions) for i in range(min(commits, 50))]
    batches = []
    for i in range(commits):
        request = decode_request(frames[i % len(frames)], SUPPORTED)
        now = 1_700_000_000_000 + i
        records = leader.shard.commit_offsets(request.body, request.api_version, 1, now).records
        batch = bytearray(build_key_value_batch([(r.key, r.value) for r in records], now))
        set_base_offset(batch, 0, leader.log_end)
        leader.log_end += len(records)
        batches.append(bytes(batch))
    return batches


def broker_reader():
    """The broker's reader of a batch's (offset, key, value) list (records.key_values, compiled
    where built), or on a tree from before it the pure-Python iter_key_values listed."""
    try:
        from tidemark.records import key_values
        return key_values
    except ImportError:
        from tidemark.records import iter_key_values
        return lambda batch, position: list(iter_key_values(batch, position))


def run_standby(batches: list[bytes], whole: bool, read_batch=None) -> dict[str, float]:
    """CPU seconds of a standby following the log: reading each write back as the broker's
    reader does (`broker_reader`, or `read_batch`) and replaying it, whole (`replay_chunk`) or
    record by record (`replay` of each, the runtime's loop before replay_chunk)."""
    read_batch = read_batch or broker_reader()
    standby = GroupCoordinatorShard(0, CoordinatorConfig(), lambda _t, _p: True)
    clock = time.thread_time
    read = replay = 0.0
    now = 1_700_000_000_000
    for batch in batches:
        t0 = clock()
        chunk = read_batch(batch, 0)
        t1 = clock()
        if whole:
            standby.replay_chunk(chunk, now_ms=now)
        else:
            for offset, key, value in chunk:
                standby.replay(offset, key, value, now_ms=now)
        t2 = clock()
        read += t1 - t0
        replay += t2 - t1
    return {"read": read, "replay": replay}


def load_log(groups: int, topics: int, partitions: int) -> list[tuple[int, bytes, bytes]]:
    """The kept records loading replays, in log order: each group's one commit of `topics` x
    `partitions` offsets (v3 values without metadata, what consumers write)."""
    from tidemark.records.offsets_schema import OffsetCommitKey, OffsetCommitValue, encode_key, encode_offset_commit_value
    ordered = []
    for g in range(groups):
        for t in range(topics):
            for p in range(partitions):
                ordered.append((len(ordered), encode_key(OffsetCommitKey(f"group-{g}", f"topic-{t}", p)),
                                encode_offset_commit_value(OffsetCommitValue(1_000 + p, -1, "", 1_700_000_000_000))))
    return ordered


def load_replay(ordered: list[tuple[int, bytes, bytes]], whole: bool) -> float:
    """CPU seconds of loading's replay of its kept records (each key's last, in log order),
    whole (`replay_chunk`, 10,000 at a time, as the runtime does) or record by record."""
    shard = GroupCoordinatorShard(0, CoordinatorConfig(), lambda _t, _p: True)
    now = 1_700_000_000_000
    started = time.thread_time()
    if whole:
        for start in range(0, len(ordered), 10_000):
            shard.replay_chunk(ordered[start : start + 10_000], now_ms=now)
    else:
        for offset, key, value in ordered:
            shard.replay(offset, key, value, now_ms=now)
    return time.thread_time() - started


def standby(partitions: int, commits: int, repeats: int, profile: str | None) -> None:
    batches = standby_log(partitions, commits)
    modes = {"record by record": False}
    if hasattr(GroupCoordinatorShard, "replay_chunk"):
        modes["whole chunk"] = True
    if profile:
        profiler = cProfile.Profile()
        profiler.runcall(run_standby, batches, "whole chunk" in modes)
        profiler.dump_stats(profile)
        pstats.Stats(profile).sort_stats("tottime").print_stats(15)
    readers = {mode: None for mode in modes}
    try:  # beside the compiled reader, the whole chunk read by its pure-Python reference
        from tidemark.records import batch as records_batch
        if records_batch.COMPILED and "whole chunk" in modes:
            readers["whole, pure read"] = records_batch.key_values_py
            modes["whole, pure read"] = True
    except (ImportError, AttributeError):  # a tree from before the compiled reader
        pass
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for _ in range(repeats):
        for mode, whole in modes.items():  # alternated, so the machine's load weighs on both alike
            runs[mode].append(run_standby(batches, whole, readers[mode]))
    print(f"A standby replaying {commits} OffsetCommit writes of {partitions} partitions read back from their "
          f"batches, CPU us per write over {repeats} repeats (min / median):")
    medians = {}
    for mode, results in runs.items():
        for step in ("read", "replay"):
            per_write = sorted(r[step] / commits * 1e6 for r in results)
            print(f"  {mode:17} {step:7} {per_write[0]:9.1f} / {statistics.median(per_write):9.1f} us/write "
                  f"{statistics.median(per_write) / partitions:7.2f} us/partition")
            medians[mode, step] = statistics.median(per_write)
    if "whole chunk" in modes:
        print(f"  replay, record by record / whole chunk: "
              f"{medians['record by record', 'replay'] / medians['whole chunk', 'replay']:.2f}x")
    if "whole, pure read" in modes:
        print(f"  read, pure reference / the broker's: "
              f"{medians['whole, pure read', 'read'] / medians['whole chunk', 'read']:.2f}x")
    # Loading's replay of its kept records: 500 groups' commits of 2 topics x 50 partitions.
    ordered = load_log(500, 2, 50)
    kept = len(ordered)
    loads: dict[str, list[float]] = {mode: [] for mode in modes if mode != "whole, pure read"}
    for _ in range(repeats):
        for mode in loads:
            whole = modes[mode]
            loads[mode].append(load_replay(ordered, whole))
    print(f"Loading's replay of {kept:,} kept records (one per key, in log order), CPU over {repeats} repeats "
          f"(min / median):")
    for mode, times in loads.items():
        times.sort()
        print(f"  {mode:17} {times[0] * 1e3:8.1f} / {statistics.median(times) * 1e3:8.1f} ms "
              f"{statistics.median(times) / kept * 1e6:6.2f} us/record")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--commits", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", help="write a cProfile of one repeat here (and print its top 25)")
    parser.add_argument("--load", type=int, metavar="RECORDS", help="time loading's scan instead")
    parser.add_argument("--txn", action="store_true", help="TxnOffsetCommit and its marker instead")
    parser.add_argument("--standby", action="store_true",
                        help="a standby replaying --commits writes read back from the log instead")
    args = parser.parse_args()
    if args.standby:
        standby(args.partitions, args.commits, args.repeats, args.profile)
        return
    if args.txn:
        runs = [run_txn(args.partitions, args.commits) for _ in range(args.repeats)]
        print(f"TxnOffsetCommit of {args.partitions} partitions (+ COMMIT marker), median of {args.repeats} x "
              f"{args.commits} requests:")
        for step in runs[0]:
            us = statistics.median(r[step] for r in runs)
            print(f"  {step:16} {us:9.1f} us/request {us / args.partitions:7.2f} us/partition")
        return
    if args.load:
        rates = load_rate(args.load, args.repeats)
        if "pure" in rates:
            print(f"load scan: {rates['']:,.0f} records per CPU second (compiled loops); the pure-Python "
                  f"reference {rates['pure']:,.0f} alternated with it: {rates[''] / rates['pure']:.1f}x")
        else:
            print(f"load scan: {rates['']:,.0f} records per CPU second")
        return
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(run, args.partitions, args.commits)
        profiler.dump_stats(args.profile)
        pstats.Stats(args.profile).sort_stats("tottime").print_stats(25)
    runs = [run(args.partitions, args.commits) for _ in range(args.repeats)]
    for name, index in (("OffsetCommit", 0), ("OffsetFetch", 1)):
        print(f"{name} of {args.partitions} partitions, median of {args.repeats} x {args.commits} requests:")
        for step in runs[0][index]:
            us = statistics.median(r[index][step] for r in runs)
            print(f"  {step:16} {us:9.1f} us/request {us / args.partitions:7.2f} us/partition")
    total = statistics.median(r[0]["total"] for r in runs)
    print(f"OffsetCommit CPU bound: {args.partitions / total * 1e6:,.0f} partition offsets/s on one core")


if __name__ == "__main__":
    main()
