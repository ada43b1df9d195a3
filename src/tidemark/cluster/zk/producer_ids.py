"""Producer id blocks from ZooKeeper (Kafka's ProducerIdManager on /latest_producer_id_block):
each broker takes the next block of 1000 ids with a write conditional on the znode's version,
so no two brokers ever hand out the same producer id."""

from __future__ import annotations

import json

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
BLOCK_SIZE = 1000


def encode_block(broker_id: int, block_start: int, block_end: int) -> bytes:
    return json.dumps({"version": 1, "broker": broker_id, "block_start": str(block_start),
                       "block_end": str(block_end)}, separators=(",", ":")).encode()


def allocate_block(client: KazooClient, broker_id: int, size: int = BLOCK_SIZE) -> tuple[int, int]:
    """The next block [start, end] (inclusive, as Kafka writes it) for this broker."""
    while True:
        try:
            data, stat = client.get(LATEST_PRODUCER_ID_BLOCK)
        except NoNodeError:
            try:
                client.create(LATEST_PRODUCER_ID_BLOCK, encode_block(broker_id, 0, size - 1), makepath=True)
                return 0, size - 1
            except NodeExistsError:
                continue
        start = int(json.loads(data)["block_end"]) + 1 if data else 0
        try:
            client.set(LATEST_PRODUCER_ID_BLOCK, encode_block(broker_id, start, start + size - 1),
                       version=stat.version)
            return start, start + size - 1
        except BadVersionError:
            continue  # another broker took a block meanwhile
