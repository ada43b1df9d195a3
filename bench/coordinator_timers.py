"""Per-event cost of the coordinator's timers: the old scan of every member vs the keyed heap.

    python -m bench.coordinator_timers [--groups 10000 100000] [--repeats 5]

One GroupCoordinatorShard holds N Stable groups of 3 members (built as loading builds them, with
their session deadlines scheduled). The event is a Heartbeat from a random member, the most
common event a shard sees; after each event the runtime asks for the shard's next deadline to
arm its wake-up. "scan" is what the runtime did before the heap: after every event it walked
every member of every group to find the earliest deadline. "heap" is the keyed CoordinatorTimer:
the heartbeat reschedules its member's key and the next deadline is the top of the heap.
Prints the median per-event time of --repeats runs.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from types import SimpleNamespace

from tidemark.coordinator.group import Group, GroupState, Member
from tidemark.coordinator.rebalance import _session_deadline
from tidemark.coordinator.shard import CoordinatorConfig, GroupCoordinatorShard

MEMBERS = 3
SESSION_MS = 45_000
NOW = 1_700_000_000_000


def build_shard(groups: int) -> tuple[GroupCoordinatorShard, list[tuple[str, str]]]:
    shard = GroupCoordinatorShard(0, CoordinatorConfig(), lambda topic, partition: True)
    members = []
    for g in range(groups):
        group = Group(f"group-{g}", NOW)
        for m in range(MEMBERS):
            member_id = f"member-{g}-{m}"
            group.add(Member(member_id=member_id, group_instance_id=None, client_id="c", client_host="h",
                             rebalance_timeout_ms=SESSION_MS, session_timeout_ms=SESSION_MS, protocol_type="consumer",
                             protocols=(("range", b""),), last_heartbeat_ms=NOW))
            members.append((group.group_id, member_id))
        group.protocol_type, group.protocol, group.leader, group.generation = "consumer", "range", members[-1][1], 1
        group.transition_to(GroupState.PREPARING_REBALANCE, NOW)
        group.transition_to(GroupState.COMPLETING_REBALANCE, NOW)
        group.transition_to(GroupState.STABLE, NOW)
        shard.groups[group.group_id] = group
        shard.membership.reschedule(group.group_id)
    return shard, members


def scan_next_deadline(shard: GroupCoordinatorShard) -> int | None:
    """The runtime's old way: every member of every group, after every event."""
    deadlines: list[int] = []
    for group in shard.groups.values():
        if group.state is GroupState.DEAD:
            continue
        deadlines.extend(group.pending_members.values())
        for member in group.members.values():
            deadline = _session_deadline(member)
            if deadline is not None:
                deadlines.append(deadline)
        if group.state is GroupState.PREPARING_REBALANCE and group.join_deadline_ms is not None:
            deadlines.append(group.join_deadline_ms)
        if group.sync_deadline_ms is not None and group.pending_sync:
            deadlines.append(group.sync_deadline_ms)
    return min(deadlines, default=None)


def per_event_seconds(shard: GroupCoordinatorShard, members: list[tuple[str, str]], events: int, scan: bool,
                      rng: random.Random) -> float:
    next_deadline = (lambda: scan_next_deadline(shard)) if scan else shard.next_deadline
    picks = [rng.choice(members) for _ in range(events)]
    requests = [SimpleNamespace(group_id=g, member_id=m, group_instance_id=None, generation_id=1) for g, m in picks]
    now = NOW + 1000
    started = time.perf_counter()
    for request in requests:
        now += 1
        shard.membership.heartbeat(request, 4, now)
        next_deadline()
    return (time.perf_counter() - started) / events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(7)
    print(f"{'groups x members':>18} {'scan (old)':>12} {'heap (new)':>12} {'speed-up':>9}")
    for groups in args.groups:
        shard, members = build_shard(groups)
        scan_events = max(5, 200_000 // groups)
        scan = statistics.median(per_event_seconds(shard, members, scan_events, True, rng)
                                 for _ in range(args.repeats))
        heap = statistics.median(per_event_seconds(shard, members, 20_000, False, rng)
                                 for _ in range(args.repeats))
        print(f"{groups:>10,} x {MEMBERS:<5} {scan * 1e3:>9.2f} ms {heap * 1e6:>9.1f} us {scan / heap:>8.0f}x")


if __name__ == "__main__":
    main()
