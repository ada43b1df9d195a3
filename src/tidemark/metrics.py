"""Prometheus metrics of the broker, named after Kafka's JMX metrics where one exists."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("tidemark_requests_total", "Requests handled, by API", ["api"])
REQUEST_ERRORS = Counter(
    "tidemark_request_errors_total", "Per-partition or request errors returned, by API and code", ["api", "error"]
)
REQUEST_SECONDS = Histogram(
    "tidemark_request_seconds",
    "Time from a request's arrival to its response being queued, by API",
    ["api"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
BYTES_IN = Counter("tidemark_bytes_in_total", "Record bytes appended by producers")
# Kafka's RequestsPerSec for request=FetchConsumer and request=FetchFollower: with fetch from
# follower (KIP-392) a consumer's fetches go to a replica in its rack.
FETCH_REQUESTS = Counter("tidemark_fetch_requests_total", "Fetch requests received, by kind (consumer, follower)",
                         ["kind"])
BYTES_OUT = Counter("tidemark_bytes_out_total", "Record bytes returned to fetchers")
MESSAGES_IN = Counter("tidemark_messages_in_total", "Records appended by producers")
CONNECTIONS = Gauge("tidemark_connections", "Open client connections")
PROTOCOL_ERRORS = Counter(
    "tidemark_protocol_errors_total", "Connections closed for malformed or oversized frames", ["reason"]
)
FLUSH_SECONDS = Histogram(
    "tidemark_log_flush_seconds",
    "Duration of one group-commit flush round",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
)
GC_PAUSE_SECONDS = Histogram(
    "tidemark_gc_pause_seconds",
    "Duration of one garbage collection by generation: the event loop stands still meanwhile",
    ["generation"],
    buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
)
PARTITIONS = Gauge("tidemark_partitions", "Partitions hosted by this broker")
CONNECTIONS_REFUSED = Counter(
    "tidemark_connections_refused_total", "Connections closed at once for exceeding a limit, by setting", ["limit"]
)
SASL_AUTHENTICATIONS = Counter(
    "tidemark_sasl_authentications_total", "SASL authentications by outcome (success, failed, unsupported_mechanism)",
    ["outcome"],
)
CONNECTIONS_READ_PAUSED = Gauge(
    "tidemark_connections_read_paused", "Connections not read while their unanswered requests are at a bound"
)

# Replication (a ZooKeeper cluster), after Kafka's ReplicaManager metrics.
FETCH_SESSIONS = Gauge("tidemark_fetch_sessions", "Incremental fetch sessions (KIP-227) this broker holds for its followers")
UNDER_REPLICATED_PARTITIONS = Gauge(
    "tidemark_under_replicated_partitions", "Partitions this broker leads with fewer in-sync replicas than replicas")
ISR_SHRINKS = Counter("tidemark_isr_shrinks_total", "ISR shrinks written by this broker as leader")
ISR_EXPANDS = Counter("tidemark_isr_expands_total", "ISR expansions written by this broker as leader")
LEADER_ELECTIONS = Counter("tidemark_leader_elections_total", "Times this broker became a partition's leader")
REPLICA_FAILED_PARTITIONS = Gauge(
    "tidemark_replica_failed_partitions",
    "Followed partitions not fetched after an append or truncation error, until their next leadership")
REPLICA_MAX_LAG = Gauge(
    "tidemark_replica_max_lag", "The largest lag in records of a follower behind this broker as leader")

# Client quotas, after Kafka's throttle-time metrics per quota type (Produce, Fetch, Request).
QUOTA_THROTTLE_SECONDS = Counter(
    "tidemark_quota_throttle_seconds_total", "Throttle time given to clients over their quotas, by quota type",
    ["quota_type"])
QUOTA_THROTTLED = Counter("tidemark_quota_throttled_total", "Responses throttled for a quota, by quota type",
                          ["quota_type"])
