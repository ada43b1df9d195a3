"""`groups delete-offsets` of a group that does not exist, naming only topics that do not exist
either: Kafka's tool still asks the coordinator, and reports the group."""

from __future__ import annotations

from click.testing import CliRunner

from tidemark.cli.main import main


def test_delete_offsets_of_an_unknown_group_and_topic_reports_the_group(make_broker) -> None:
    broker = make_broker().start()
    result = CliRunner().invoke(main, ["groups", "delete-offsets", "nosuch", "--topic", "clicks",
                                       "--bootstrap-server", broker.bootstrap])
    assert result.exit_code == 1
    assert result.stderr.strip() == "Consumer group 'nosuch' does not exist."
    assert result.stdout == ""
