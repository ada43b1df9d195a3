from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import partition_manager_config
from tidemark.replication.partition_manager import PartitionManager
from tidemark.records import build_batch

NOW = 1_700_000_000_000


def test_expiration_check_covers_every_partition(tmp_path):
    replicas = PartitionManager(partition_manager_config(BrokerConfig({"producer.id.expiration.ms": "1000"})), tmp_path)
    replicas.open()
    try:
        replicas.create_topic("t", 2, {})
        producer_id = replicas.metadata.next_producer_id()
        for index in (0, 1):
            records = build_batch([(None, b"v", (), NOW)], producer_id=producer_id, producer_epoch=0, base_sequence=0)
            replicas.append(replicas.partition("t", index), records, NOW)
        assert replicas.logs.remove_expired_producers(NOW + 999) == 0
        assert replicas.logs.remove_expired_producers(NOW + 1000) == 2
        assert all(not p.log.producer_state.producers for p in replicas.partitions.values())
    finally:
        replicas.logs.close()
