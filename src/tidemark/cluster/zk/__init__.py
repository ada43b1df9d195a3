"""tidemark as a cluster of brokers coordinated by ZooKeeper, with Kafka's znode layout.

zk_data: paths and JSON; session: the broker's kazoo client; registration: /brokers/ids/N;
controller: election, fencing, leader election, topic creation/deletion, controlled shutdown;
topic_admin: what any broker writes for CreateTopics/CreatePartitions/DeleteTopics;
isr: a leader's conditional ISR write; shutdown: a broker's controlled-shutdown request;
metadata_view: the watched, thread-safe snapshot brokers answer Metadata from.
"""
