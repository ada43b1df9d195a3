"""`tidemark quotas set|list` against a broker, over the wire, as kafka-configs.sh is used."""

from __future__ import annotations

from click.testing import CliRunner

from tidemark.cli.main import main


def _run(*args: str):
    return CliRunner().invoke(main, ["quotas", *args], catch_exceptions=False)


def test_set_and_list_quotas_by_user_and_client(make_broker):
    bootstrap = make_broker().start().bootstrap
    done = _run("set", "--bootstrap-server", bootstrap, "--entity-type", "users", "--entity-name", "alice",
                "--entity-type", "clients", "--entity-default",
                "--add-config", "producer_byte_rate=1024,request_percentage=50")
    assert done.exit_code == 0, done.output
    assert done.output == "Completed updating quotas for user-principal 'alice', the default client-id.\n"
    assert _run("set", "--bootstrap-server", bootstrap, "--entity-type", "clients", "--entity-name", "app",
                "--add-config", "consumer_byte_rate=2048").exit_code == 0

    listed = _run("list", "--bootstrap-server", bootstrap)
    assert listed.exit_code == 0, listed.output
    assert sorted(listed.output.splitlines()) == [
        "Quota configs for client-id 'app' are consumer_byte_rate=2048",
        "Quota configs for user-principal 'alice', the default client-id are producer_byte_rate=1024, "
        "request_percentage=50"]
    one = _run("list", "--bootstrap-server", bootstrap, "--entity-type", "clients", "--entity-name", "app")
    assert one.output == "Quota configs for client-id 'app' are consumer_byte_rate=2048\n"

    assert _run("set", "--bootstrap-server", bootstrap, "--entity-type", "clients", "--entity-name", "app",
                "--delete-config", "consumer_byte_rate").exit_code == 0
    assert _run("list", "--bootstrap-server", bootstrap, "--entity-type", "clients", "--entity-name", "app").output == ""

    refused = _run("set", "--bootstrap-server", bootstrap, "--entity-type", "clients", "--entity-name", "app",
                   "--add-config", "producer_byte_rate=1.5")
    assert refused.exit_code == 1
    assert "INVALID_REQUEST" in refused.output


def test_entity_options_are_checked_before_connecting():
    unnamed = _run("set", "--bootstrap-server", "127.0.0.1:1", "--entity-type", "users", "--add-config", "x=1")
    assert unnamed.exit_code == 2 and "needs --entity-name or --entity-default" in unnamed.output
    wrong = _run("list", "--bootstrap-server", "127.0.0.1:1", "--entity-type", "topics", "--entity-name", "t")
    assert wrong.exit_code == 2 and "users or clients" in wrong.output
