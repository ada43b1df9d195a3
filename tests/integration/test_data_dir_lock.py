"""One broker per data directory: a second `tidemark serve` on it refuses to start."""

from __future__ import annotations

import pytest

from tests.integration.clients import consume_assigned, create_topic, produce_all


def test_second_broker_on_the_same_data_directory_refuses_to_start(make_broker):
    first = make_broker().start()
    create_topic(first.bootstrap, "locked", 1)
    assert produce_all(first.bootstrap, "locked", [(0, b"k", b"before")], acks="all") == 1

    second = make_broker(data_dir=first.data_dir)
    second.log_path = first.data_dir.parent / "second-broker.log"
    with pytest.raises(RuntimeError, match="broker exited with 1"):
        second.start()
    output = second.log_text()
    assert output.strip().splitlines() == [
        f"Error: data directory {first.data_dir} is in use by another process (it holds .lock)"]

    # the first broker goes on untouched, and after it stops the directory is free again
    assert produce_all(first.bootstrap, "locked", [(0, b"k", b"after")], acks="all") == 1
    assert first.stop() == 0
    third = make_broker(data_dir=first.data_dir).start()
    got = consume_assigned(third.bootstrap, "locked", 1, expected=2)
    assert [value for _, _, value in got[0]] == [b"before", b"after"]
    assert third.stop() == 0
