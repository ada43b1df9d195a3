"""Groups of Kafka's ZooKeeper consumers as the CLI sees them: members, offsets and owners, read
from /consumers/[group] (ids, offsets, owners)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from tidemark.client.reach import unreachable
from tidemark.logging import quiet_kazoo_chroot_warning
from tidemark.zk.offset_store import ZookeeperOffsetManager, ZookeeperUnavailable

# kazoo logs every failed connect and a missing chroot itself; the command says what failed in one
# line (ZookeeperUnavailable), and a command has nobody to read kazoo's retries.
logging.getLogger("kazoo").addHandler(logging.NullHandler())
logging.getLogger("kazoo").propagate = False
quiet_kazoo_chroot_warning()


@dataclass
class ZookeeperGroup:
    name: str
    members: list[str]
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    owners: dict[tuple[str, int], str] = field(default_factory=dict)


async def read_zookeeper(connect: str, groups: tuple[str, ...] | list[str], timeout_s: float) -> list[ZookeeperGroup]:
    """Every wanted group's live members, stored offsets and partition owners (all groups under
    /consumers when none is named; a named group ZooKeeper knows nothing of is left out)."""
    hosts = connect.split("/", 1)[0]
    why = unreachable(hosts, timeout_s)  # nobody listening: say so at once, not after kazoo's retries
    if why is not None:
        raise ZookeeperUnavailable(f"cannot connect to {hosts}: {why}")
    store = ZookeeperOffsetManager(connect, session_timeout_ms=max(int(timeout_s * 1000), 4000))
    store.start()
    try:
        names = list(groups) or await store.groups(timeout_s)
        found = []
        for name in names:
            members = await store.live_members(name, timeout_s)
            offsets = await store.fetch(name, None, timeout_s)
            owners = await store.owners(name, timeout_s)
            if members or offsets or owners:
                found.append(ZookeeperGroup(name, members, {tp: o for tp, o in offsets.items() if o >= 0}, owners))
        return found
    finally:
        await asyncio.to_thread(store.close)
