"""`tidemark transactions list|describe` against a broker: the columns kafka-transactions.sh
prints, for an Empty transactional id (no start time) and an Ongoing one."""

from __future__ import annotations

from click.testing import CliRunner
from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tests.integration.test_transactions_clients import _init
from tidemark.cli.main import main
from tidemark.wire.api_keys import ApiKey


def test_list_and_describe_transactional_ids(make_broker) -> None:
    broker = make_broker().start()
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("orders", 2).error_code == 0
        idle = _init(client, "idle-app")
        busy = _init(client, "busy-app")
        added = client.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": "busy-app", "v3_and_below_producer_id": busy.producer_id,
            "v3_and_below_producer_epoch": busy.producer_epoch,
            "v3_and_below_topics": [{"name": "orders", "partitions": [1, 0]}]})
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.none

    listed = CliRunner().invoke(main, ["transactions", "list", "--bootstrap-server", broker.bootstrap])
    assert listed.exit_code == 0, listed.output
    lines = [line.split() for line in listed.stdout.splitlines()]
    assert lines[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert sorted(lines[1:]) == [["busy-app", "0", str(busy.producer_id), "Ongoing"],
                                 ["idle-app", "0", str(idle.producer_id), "Empty"]]

    described = CliRunner().invoke(main, ["transactions", "describe", "--transactional-id", "busy-app",
                                          "--bootstrap-server", broker.bootstrap])
    assert described.exit_code == 0, described.output
    header, row = (line.split() for line in described.stdout.splitlines())
    fields = dict(zip(header, row, strict=True))
    assert (fields["ProducerId"], fields["TransactionState"], fields["TopicPartitions"]) == \
        (str(busy.producer_id), "Ongoing", "orders-0,orders-1")
    assert int(fields["TransactionDurationMs"]) >= 0

    empty = CliRunner().invoke(main, ["transactions", "describe", "--transactional-id", "idle-app",
                                      "--bootstrap-server", broker.bootstrap])
    assert empty.exit_code == 0, empty.output
    header, row = (line.split() for line in empty.stdout.splitlines())
    fields = dict(zip(header, row + [""], strict=True))  # no partitions: the last column is empty
    assert (fields["TransactionState"], fields["CurrentTransactionStartTimeMs"]) == ("Empty", "None")

    unknown = CliRunner().invoke(main, ["transactions", "describe", "--transactional-id", "nobody",
                                        "--bootstrap-server", broker.bootstrap])
    assert unknown.exit_code == 1
    assert unknown.stderr.strip() == "Error: describing transactional id 'nobody' failed: TRANSACTIONAL_ID_NOT_FOUND"
