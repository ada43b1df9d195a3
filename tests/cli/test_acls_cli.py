"""`tidemark acls add|remove|list` against a broker with the authorizer on, over the wire
(CreateAcls, DescribeAcls, DeleteAcls), in kafka-acls.sh's terms and output."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from tests.conftest import BrokerProcess, free_port
from tidemark.cli.main import main

SETTINGS = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:ANONYMOUS"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("acls-cli") / "data", SETTINGS).start()
    yield process
    process.kill()


def _run(*args: str):
    return CliRunner().invoke(main, ["acls", *args], catch_exceptions=False)


def test_add_list_remove(secured):
    bootstrap = ["--bootstrap-server", secured.bootstrap]
    added = _run("add", *bootstrap, "--allow-principal", "User:alice", "--operation", "Read", "--operation",
                 "Describe", "--topic", "orders", "--group", "app")
    assert added.exit_code == 0, added.output
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`" \
        in added.output
    denied = _run("add", *bootstrap, "--deny-principal", "User:bob", "--allow-host", "10.0.0.1", "--operation",
                  "Write", "--topic", "ord", "--resource-pattern-type", "prefixed")
    assert denied.exit_code == 0, denied.output

    listed = _run("list", *bootstrap)
    assert listed.exit_code == 0, listed.output
    lines = [line.strip() for line in listed.output.splitlines() if line.strip()]
    assert lines == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=ord, patternType=PREFIXED)`:",
        "(principal=User:bob, host=*, operation=WRITE, permissionType=DENY)",
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:",
        "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)",
        "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=app, patternType=LITERAL)`:",
        "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)",
        "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
    ]
    matching = _run("list", *bootstrap, "--topic", "orders-eu", "--resource-pattern-type", "match")
    assert "name=ord, patternType=PREFIXED" in matching.output and "name=orders," not in matching.output

    removed = _run("remove", *bootstrap, "--allow-principal", "User:alice", "--operation", "Read", "--topic",
                   "orders", "--force")
    assert removed.exit_code == 0, removed.output
    assert removed.output.count("Removed ") == 1
    everything = _run("remove", *bootstrap, "--group", "app")
    assert everything.output.count("Removed ") == 2
    left = _run("list", *bootstrap, "--principal", "User:alice")
    assert [line.strip() for line in left.output.splitlines() if line.strip()] == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:",
        "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)"]


def test_errors_are_one_line(secured):
    unknown = _run("add", "--bootstrap-server", secured.bootstrap, "--allow-principal", "User:a", "--operation",
                   "Fly", "--topic", "t")
    assert unknown.exit_code == 1 and unknown.output.startswith("Error: unknown operation 'Fly'")
    unsupported = _run("add", "--bootstrap-server", secured.bootstrap, "--allow-principal", "User:a", "--operation",
                       "Write", "--group", "g")
    assert unsupported.exit_code == 1 and unsupported.output == "Error: GROUP does not support operation(s) WRITE\n"
    nowhere = _run("list", "--bootstrap-server", f"127.0.0.1:{free_port()}", "--timeout", "2000")
    assert nowhere.exit_code == 1 and nowhere.output.startswith("Error: cannot reach bootstrap server")


def test_refused_by_a_broker_without_an_authorizer(tmp_path):
    plain = BrokerProcess(tmp_path / "data").start()
    try:
        result = _run("add", "--bootstrap-server", plain.bootstrap, "--allow-principal", "User:a", "--topic", "t")
        assert result.exit_code == 1
        assert "SECURITY_DISABLED" in result.output
    finally:
        plain.kill()
