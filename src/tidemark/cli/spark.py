"""`tidemark spark`: batch jobs over the offsets log on Spark (tidemark.spark.jobs).

    tidemark spark offsets-snapshot (--bootstrap-server HOST:PORT | --data-dir DIR) [--output PATH]
    tidemark spark lag-report (--bootstrap-server HOST:PORT | --data-dir DIR) [--output PATH] [--chart lag.png]
    tidemark spark expiry-report (--bootstrap-server HOST:PORT | --data-dir DIR) --at TIME [--retention-minutes N]

With --bootstrap-server, --command-config FILE and -X KEY=VALUE give the client security
settings as the groups and topics commands take them; the jobs hand them to the source as kafka.*
options (as Spark's Kafka connector takes client settings).

Each runs on a new local session (`--master`, default local[*]); started by spark-submit
(`spark-submit .../tidemark/cli/__main__.py spark lag-report ...`) it runs on spark-submit's
session and master unchanged. Results print as tables on stdout (the first `--show` rows) and,
with `--output`, are written as Parquet or CSV.
"""

from __future__ import annotations

import datetime
import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click

from tidemark.cli.options import client_settings, security_options

DEFAULT_SHOW = 50
REACH_TIMEOUT_S = 10.0


def parse_time(value: str) -> int:
    """Epoch milliseconds, or an ISO-8601 date-time (naive means UTC), to epoch milliseconds."""
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"expected epoch milliseconds or an ISO-8601 date-time like 2026-11-22T10:00:00Z, "
                                 f"got {value!r}", param_hint="--at") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return round(moment.timestamp() * 1000)


def _source_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--bootstrap-server", "bootstrap", default=None,
                     help="Read __consumer_offsets from this cluster (tidemark or Apache Kafka)."),
        click.option("--data-dir", type=click.Path(exists=True, file_okay=False), default=None,
                     help="Read __consumer_offsets from this tidemark data directory's segment files."),
        *security_options(),
        click.option("--master", default="local[*]", show_default=True,
                     help="Spark master of a new session (ignored under spark-submit)."),
        click.option("--output", default=None, help="Write the result here (a directory, as Spark writes)."),
        click.option("--overwrite", is_flag=True, help="Replace what --output holds (refused otherwise)."),
        click.option("--format", "fmt", type=click.Choice(["parquet", "csv"]), default="parquet", show_default=True),
        click.option("--show", type=click.IntRange(min=0), default=DEFAULT_SHOW, show_default=True,
                     help="Rows of the result to print."),
    ]
    for option in reversed(options):
        func = option(func)

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        if (kwargs["bootstrap"] is None) == (kwargs["data_dir"] is None):
            raise click.UsageError("give one of --bootstrap-server and --data-dir")
        kwargs["client_config"] = client_settings(kwargs["client_config"], kwargs.pop("command_config"))
        if kwargs["client_config"] and kwargs["data_dir"] is not None:
            raise click.UsageError("--command-config and -X are client settings: they go with --bootstrap-server")
        # Everything checkable without Spark is checked before its ~40 s start.
        _check_output(kwargs["output"], kwargs.pop("overwrite"))
        if kwargs["data_dir"] is not None:
            from tidemark.cli.offsets import require_offsets_partitions

            require_offsets_partitions(kwargs["data_dir"])
        else:
            from tidemark.client.reach import unreachable

            why = unreachable(kwargs["bootstrap"], REACH_TIMEOUT_S)
            if why is not None:
                raise click.ClickException(f"cannot reach bootstrap server {kwargs['bootstrap']}: {why}")
            _require_offsets_topic(kwargs["bootstrap"], kwargs["client_config"])
        return func(**kwargs)

    return wrapper


def _require_offsets_topic(bootstrap: str, client_config: dict[str, str]) -> None:
    """A cluster no group has committed to has no __consumer_offsets: say so instead of an empty
    report after Spark's start. All topics are listed (naming the offsets topic in a Metadata
    request could have the cluster create it). Refused credentials are said here too."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from tidemark.records.offsets_schema import OFFSETS_TOPIC
    from tidemark.spark.clients import AuthenticationError, check_authentication, quiet

    config = {"bootstrap.servers": bootstrap, **client_config}
    try:
        admin = AdminClient(quiet(config))
    except KafkaException as exc:
        raise click.ClickException(f"invalid client configuration: {exc.args[0].str()}") from None
    try:
        check_authentication(config, REACH_TIMEOUT_S)
    except AuthenticationError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        topics = admin.list_topics(timeout=REACH_TIMEOUT_S).topics
    except KafkaException as exc:
        raise click.ClickException(f"cannot list the topics of {bootstrap}: {exc.args[0].str()}") from None
    if OFFSETS_TOPIC not in topics:
        raise click.ClickException(f"no __consumer_offsets topic on {bootstrap}: no consumer group has committed "
                                   f"offsets to it yet")


def _check_output(output: str | None, overwrite: bool) -> None:
    """Spark writes with mode overwrite, deleting whatever the path holds: `--output tidemark-data`
    would wipe a broker's data. Only an absent path or an empty directory is taken unasked."""
    if output is None or overwrite or not os.path.lexists(output):
        return
    if os.path.isdir(output) and not os.listdir(output):
        return
    raise click.UsageError(f"--output {output} exists and is not empty; its contents would be deleted. "
                           f"Give another path, or --overwrite to replace it.")


def _console():
    from rich.console import Console

    # Piped output gets wide tables rather than 80 columns of wrapped cells.
    return Console(width=None if sys.stdout.isatty() else 160)


class _Interrupted(Exception):
    """Ctrl-C during a job."""


def _on_interrupt(_signum: int, _frame: Any) -> None:
    # Instead of PySpark's handler, which asks the JVM to cancel its jobs: the terminal sent the
    # same Ctrl-C to the JVM, which is going away, and the call would fail with a traceback.
    raise _Interrupted


def _interruptible(func: Callable[..., Any]) -> Callable[..., Any]:
    """Ctrl-C ends a job with one line and exit code 130, not pages of py4j tracebacks about the
    JVM that went with it."""

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        try:
            return func(**kwargs)
        except (KeyboardInterrupt, _Interrupted):
            pass
        except Exception:  # noqa: BLE001 - a py4j error of the JVM stopped by the same Ctrl-C
            if signal.getsignal(signal.SIGINT) is not _on_interrupt:
                raise
            import py4j.protocol

            if not _py4j_failed(sys.exc_info()[1], py4j.protocol.Py4JError):
                raise
        logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)
        click.echo("interrupted", err=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)  # Spark's exit hooks would talk to the JVM that is gone

    return wrapper


def _py4j_failed(exc: BaseException | None, kind: type) -> bool:
    while exc is not None:
        if isinstance(exc, kind):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _session(console, app_name: str, master: str):
    from tidemark.spark.jobs.common import spark_session

    with _status(console, "starting Spark"):
        session = spark_session(app_name, master)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_interrupt)
    # py4j logs every call the JVM did not answer (a Ctrl-C, a JVM that died) with a traceback;
    # the failure reaches the command as an exception anyway.
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    context = session.sparkContext
    console.print(f"Spark {session.version}, master {context.master}, application {context.appName}", style="dim",
                  highlight=False)
    return session


@contextmanager
def _status(console, message: str) -> Iterator[None]:
    """Say what is going on, on stderr: a spinner on a terminal, otherwise one line per step (stdout
    keeps only the results)."""
    from rich.console import Console

    progress = Console(stderr=True)
    if progress.is_terminal:
        with progress.status(message, spinner="dots"):
            yield
    else:
        click.echo(f"{message} ...", err=True)
        yield


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def print_table(console, title: str, df, columns: Sequence[str], limit: int) -> None:
    """The first `limit` rows of df as a rich table, with a note when there are more."""
    from rich.table import Table

    rows = df.select(*columns).limit(limit + 1).collect() if limit else []
    table = Table(title=title, title_justify="left")
    for name in columns:
        numeric = name in ("partition", "committed_offset", "log_end_offset", "lag", "lag_seconds", "leader_epoch", "offsets",
                           "expiring", "pre_kip211_expiring", "partitions", "total_lag")
        table.add_column(name, justify="right" if numeric else "left", overflow="fold")
    for row in rows[:limit]:
        table.add_row(*(_cell(row[name]) for name in columns))
    console.print(table)
    if len(rows) > limit:
        console.print(f"(first {limit} rows shown; --show N for more, --output PATH for all)")


@click.group()
def spark() -> None:
    """Batch jobs over the __consumer_offsets log on Spark."""


@spark.command("offsets-snapshot")
@_source_options
@_interruptible
def offsets_snapshot_command(bootstrap: str | None, data_dir: str | None, client_config: dict[str, str], master: str,
                             output: str | None, fmt: str, show: int) -> None:
    """The committed offsets as the coordinator would load them (last record per key, tombstones applied)."""
    from tidemark.spark.jobs import offsets_snapshot

    console = _console()
    session = _session(console, "tidemark offsets-snapshot", master)
    with _status(console, "reading the offsets log"):
        snapshot = offsets_snapshot.main(session, bootstrap_servers=bootstrap, data_dir=data_dir, output=output,
                                         fmt=fmt, client_config=client_config)
        print_table(console, "committed offsets", snapshot,
                    ("group", "topic", "partition", "committed_offset", "leader_epoch", "metadata",
                     "commit_timestamp", "expire_timestamp"), show)
    if output:
        console.print(f"written as {fmt} to {output}")


def _chart_path(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Checked before Spark starts: a chart that cannot be written would fail the job at its end."""
    if value is None:
        return None
    directory = os.path.dirname(value) or "."
    if not os.path.isdir(directory):
        raise click.BadParameter(f"{value}: no directory {directory}")
    if not os.access(directory, os.W_OK):
        raise click.BadParameter(f"{value}: {directory} is not writable")
    if os.path.isdir(value):
        raise click.BadParameter(f"{value} is a directory; give a file name such as lag.png")
    return value


@spark.command("lag-report")
@_source_options
@_interruptible
@click.option("--chart", default=None, callback=_chart_path,
              help="Draw a PNG here: total lag of the groups with most lag, and their lag over time (after each "
                   "commit in the offsets log).")
def lag_report_command(bootstrap: str | None, data_dir: str | None, client_config: dict[str, str], master: str,
                       output: str | None, fmt: str, show: int, chart: str | None) -> None:
    """Committed offset against log-end offset per group, topic and partition, with the lag in
    seconds and Burrow's status (from the commit history in the offsets log)."""
    from tidemark.spark.jobs import lag_report

    console = _console()
    session = _session(console, "tidemark lag-report", master)
    with _status(console, "reading the offsets log and the log-end offsets"):
        report, per_group = lag_report.main(session, bootstrap_servers=bootstrap, data_dir=data_dir, output=output,
                                            fmt=fmt, chart=chart, client_config=client_config)
        print_table(console, "lag per partition", report, lag_report.REPORT_COLUMNS, show)
        print_table(console, "lag per group", per_group, lag_report.PER_GROUP_COLUMNS, show)
    if not per_group.take(1):
        click.echo("no committed offsets in __consumer_offsets: no group has committed yet", err=True)
    if output:
        console.print(f"written as {fmt} to {output}")
    if chart:
        console.print(f"chart written to {chart}")


@spark.command("expiry-report")
@_source_options
@_interruptible
@click.option("--at", "at_ms", required=True, callback=lambda _ctx, _param, value: parse_time(value),
              help="When: epoch milliseconds or an ISO-8601 date-time (UTC if naive).")
@click.option("--retention-minutes", type=click.IntRange(min=1), default=10080, show_default=True,
              help="offsets.retention.minutes")
def expiry_report_command(bootstrap: str | None, data_dir: str | None, client_config: dict[str, str], master: str,
                          output: str | None, fmt: str, show: int, at_ms: int, retention_minutes: int) -> None:
    """Which committed offsets expire at --at under KIP-211, and which the pre-KIP-211 rules would delete."""
    from tidemark.spark.jobs import expiry_report

    console = _console()
    session = _session(console, "tidemark expiry-report", master)
    with _status(console, "reading the offsets log"):
        report, summary = expiry_report.main(session, at_ms=at_ms, retention_minutes=retention_minutes,
                                             bootstrap_servers=bootstrap, data_dir=data_dir, output=output, fmt=fmt,
                                             client_config=client_config)
        moment = _cell(datetime.datetime.fromtimestamp(at_ms / 1000, datetime.UTC))
        print_table(console, f"offsets at {moment}, offsets.retention.minutes={retention_minutes}", report,
                    ("group", "topic", "partition", "committed_offset", "group_state", "expires_at", "expires",
                     "pre_kip211_expires_at", "pre_kip211_expires"), show)
        print_table(console, "per group", summary, expiry_report.SUMMARY_COLUMNS, show)
    if output:
        console.print(f"written as {fmt} to {output}")


__all__ = ["parse_time", "print_table", "spark"]
