"""The Spark sources, the sink and the `tidemark spark` jobs over SASL_SSL with SCRAM-SHA-512, on a
real local session: client settings go as kafka.* options (as Spark's Kafka connector takes
them) and, for the jobs, as --command-config and -X. Refused credentials fail at once with the
cluster's reason instead of waiting out every timeout."""

from __future__ import annotations

import signal

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.security.conftest import PASSWORD, ListenersBroker, add_user, make_certificates, stop
from tidemark.cli.main import main as cli

HANG_GUARD_S = 60.0  # a hang guard only
# A hang guard too: the session's start and a few Spark jobs, on a machine that may be busy.
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory):
    certificates = make_certificates(tmp_path_factory.mktemp("spark-tls"))
    data_dir = tmp_path_factory.mktemp("spark-sasl") / "data"
    add_user(data_dir, "alice", PASSWORD, "SCRAM-SHA-512")
    settings = {"ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": certificates["broker.pem"].read_text(),
                "ssl.keystore.key": certificates["broker.key"].read_text(),
                "sasl.enabled.mechanisms": "SCRAM-SHA-512", "offsets.topic.num.partitions": "1"}
    broker = ListenersBroker(data_dir, {"PLAINTEXT": "PLAINTEXT", "SASL_SSL": "SASL_SSL"}, settings).start()
    client = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
              "sasl.password": PASSWORD, "ssl.ca.location": str(certificates["ca.pem"])}
    yield broker.address("SASL_SSL"), client
    stop(broker)


def _kafka_options(client: dict[str, str]) -> dict[str, str]:
    return {f"kafka.{key}": value for key, value in client.items()}


def test_source_offsets_source_sink_and_a_job_over_sasl_ssl(spark, secured, tmp_path):
    bootstrap, client = secured
    conf = {"bootstrap.servers": bootstrap, **client}
    admin = AdminClient(conf)
    admin.create_topics([NewTopic("secured", num_partitions=2, replication_factor=1)],
                        request_timeout=30)["secured"].result(timeout=HANG_GUARD_S)
    options = {"bootstrap.servers": bootstrap, **_kafka_options(client)}

    # The sink, then the source reading back exactly what it wrote.
    rows = [(f"k{i}", f"v{i}".encode(), i % 2) for i in range(10)]
    (spark.createDataFrame(rows, "key string, value binary, partition int").write.format("tidemark")
     .options(**options).option("topic", "secured").mode("append").save())
    back = spark.read.format("tidemark").options(**options).option("subscribe", "secured").load().collect()
    assert sorted((r.partition, r.key.decode(), r.value) for r in back) == sorted((p, k, v) for k, v, p in rows)
    for partition in (0, 1):  # the order within a partition is the tasks' order; the offsets are dense
        assert sorted(r.offset for r in back if r.partition == partition) == list(range(5))

    consumer = Consumer({**conf, "group.id": "secured-app", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("secured", 0, 2), TopicPartition("secured", 1, 5)], asynchronous=False)
    consumer.close()

    # A job over the offsets source, as the CLI runs it: --command-config for the settings, -X
    # for one of them (it wins over the file).
    properties = tmp_path / "client.properties"
    properties.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                          'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                          'username="alice" password="not-this";\n'
                          f"ssl.ca.location={client['ssl.ca.location']}\n")
    output = tmp_path / "lag"
    handler = signal.getsignal(signal.SIGINT)
    try:
        result = CliRunner().invoke(cli, ["spark", "lag-report", "--bootstrap-server", bootstrap, "--command-config",
                                          str(properties), "-X", f"sasl.password={PASSWORD}", "--output", str(output),
                                          "--format", "csv", "--show", "0"])
    finally:
        signal.signal(signal.SIGINT, handler)  # the job installs its Ctrl-C handler in this process
    assert result.exit_code == 0, result.output
    written = spark.read.option("header", True).option("inferSchema", True).csv(str(output))
    assert sorted((r.group, r.topic, r.partition, r.committed_offset, r.log_end_offset, r.lag)
                  for r in written.collect()) == [("secured-app", "secured", 0, 2, 5, 3),
                                                  ("secured-app", "secured", 1, 5, 5, 0)]


def test_refused_credentials_fail_at_once_with_the_reason(spark, secured, tmp_path):
    from tidemark.spark.jobs.common import read_offsets_log

    bootstrap, client = secured
    wrong = {**client, "sasl.password": "wrong"}
    options = {"bootstrap.servers": bootstrap, **_kafka_options(wrong)}
    reason = "SASL authentication error: Authentication failed"
    with pytest.raises(Exception, match=reason):
        spark.read.format("tidemark").options(**options).option("subscribe", "secured").load().collect()
    with pytest.raises(Exception, match=reason):
        read_offsets_log(spark, bootstrap_servers=bootstrap, client_config=wrong).collect()
    with pytest.raises(Exception, match=reason):
        (spark.createDataFrame([(b"x",)], "value binary").write.format("tidemark").options(**options)
         .option("topic", "secured").mode("append").save())
    result = CliRunner().invoke(cli, ["spark", "offsets-snapshot", "--bootstrap-server", bootstrap,
                                      *(arg for key, value in wrong.items() for arg in ("-X", f"{key}={value}"))])
    assert result.exit_code == 1 and reason in result.output, result.output
