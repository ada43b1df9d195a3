"""`tidemark serve`: run one broker until SIGINT or SIGTERM, then shut down cleanly."""

from __future__ import annotations

import asyncio
import errno
import faulthandler
import os
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path

import click
import structlog

from tidemark import logging as tidemark_logging
from tidemark.broker.config import BrokerConfig, ConfigError
from tidemark.broker.security import listeners as security_listeners
from tidemark.broker.security import tls
from tidemark.cli.server_properties import read_server_properties
from tidemark.log.errors import DataDirLockedError


# A stop signal ends the process within controlled.shutdown.timeout.ms + 5 s: the clean stop
# (Broker.stop) fits well inside this; a stuck one is cut here.
STOP_DEADLINE_BEYOND_S = 4.0
LOOP_CLOSE_S = 0.5  # for tasks left after the broker stopped to end once cancelled


def _parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"{value!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


@click.command()
@click.option("--listen", default="127.0.0.1:9092", show_default=True,
              help="HOST:PORT of one PLAINTEXT listener (port 0: any free port); the `listeners` setting replaces it.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("tidemark-data"), show_default=True)
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="A server.properties file (Kafka's; log.dirs and listeners give the data directory and the listener; "
                   "settings tidemark does not implement are listed at start).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override one setting; repeatable.")
@click.option("--metrics-port", type=int, default=None, help="Serve Prometheus metrics on this port (off by default).")
@click.option("--log-level", default="INFO", show_default=True)
@click.option("--log-format", type=click.Choice(["auto", "json", "console"]), default="auto", show_default=True)
@click.pass_context
def serve(ctx: click.Context, listen: str, data_dir: Path, config_file: Path | None, sets: tuple[str, ...], metrics_port: int | None,
          log_level: str, log_format: str) -> None:
    """Run a tidemark broker on the embedded single-node metadata."""
    tidemark_logging.configure(log_level, log_format)
    from_file = None
    try:
        if config_file is not None:
            from_file = read_server_properties(config_file)
            # --data-dir given on the command line wins over the file's log.dirs.
            if from_file.data_dir is not None and \
                    ctx.get_parameter_source("data_dir") != click.core.ParameterSource.COMMANDLINE:
                data_dir = from_file.data_dir
        config = BrokerConfig.load(None, [*(f"{k}={v}" for k, v in (from_file.settings if from_file else {}).items()),
                                          *sets])
        host, port = _parse_listen(listen)
        bound = security_listeners.resolve(config, host, port)
        for listener in bound:
            if listener.tls:
                tls.server_context(config, listener.name)  # unreadable key or truststore: one line, at once
    except (ConfigError, ValueError) as exc:
        raise click.UsageError(f"{config_file}: {exc}" if from_file is None and config_file else str(exc)) from None
    if config["listeners"] and ctx.get_parameter_source("listen") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("give either --listen or the listeners setting, not both")
    if from_file is not None and from_file.not_implemented:
        structlog.get_logger("tidemark.cli").warning("settings_not_implemented", file=str(config_file),
                                                     settings=from_file.not_implemented)
    # Before any log is opened (recovery can take a while): a port in use is the commonest
    # mistake (`make serve` twice) and deserves one line, not a traceback.
    for listener in bound:
        if listener.port:
            _check_port_free(listener.host, listener.port, "--listen" if not config["listeners"] else "listeners")
    if metrics_port is not None:
        from prometheus_client import start_http_server

        try:
            start_http_server(metrics_port, addr=host)
        except OSError as exc:
            raise click.ClickException(_bind_error(host, metrics_port, "--metrics-port", exc)) from None
    # The log cleaner and the flusher run in threads beside the event loop. CPython hands the GIL
    # from a busy thread to a waiting one only every switch interval (5 ms by default), and every
    # request crosses threads a few times (fsync hand-offs), so a short interval keeps commit
    # latency low while the cleaner copies segments.
    sys.setswitchinterval(0.0005)
    faulthandler.register(signal.SIGUSR2, all_threads=True)  # `kill -USR2`: every thread's stack on stderr
    # Not asyncio.run: it joins the default executor's threads at the end, and one blocked on a
    # ZooKeeper that does not answer would keep the process alive for ever.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    code = 0
    try:
        loop.run_until_complete(_serve(config, data_dir, host, port, metrics_port is not None))
    except DataDirLockedError as exc:
        click.ClickException(str(exc)).show()
        code = 1
    except BaseException:  # noqa: BLE001 - shown, then the same exit as every other path
        traceback.print_exc()
        code = 1
    finally:
        _close_loop(loop)
    # Everything is flushed and closed (broker_stopped is logged). A ZooKeeper client call still
    # blocked in a helper thread (kazoo retries against a closed session) must not keep the
    # process alive, so leave without waiting for such threads.
    _exit(code)


def _exit(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left, give it a moment to end, and close the loop without joining the
    executor's threads (close() shuts it down with wait=False)."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=LOOP_CLOSE_S))
    loop.close()


def _arm_deadline(seconds: float) -> None:
    """After a stop signal: end the process in `seconds` whatever it is doing (a thread stuck on
    ZooKeeper or a disk, a step that hangs). A daemon thread, so a stuck event loop cannot stop it."""
    def expire() -> None:
        print(f"tidemark: shutdown did not finish within {seconds:.1f}s of the stop signal; exiting",
              file=sys.stderr, flush=True)
        _exit(1)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


def _bind_error(host: str, port: int, option: str, exc: OSError) -> str:
    text = f"cannot listen on {host}:{port} ({option}): {exc.strerror or exc}"
    if exc.errno == errno.EADDRINUSE:
        text += " (is another broker already running there?)"
    return text


def _check_port_free(host: str, port: int, option: str) -> None:
    """Bind and release the port, with SO_REUSEADDR as asyncio's server binds it."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise click.ClickException(_bind_error(host, port, option, exc)) from None
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise click.ClickException(_bind_error(host, port, option, exc)) from None


async def _serve(config: BrokerConfig, data_dir: Path, host: str, port: int, metrics: bool) -> None:
    from tidemark.broker import heap, lag_metrics
    from tidemark.broker.server import Broker

    heap.observe_gc_pauses()
    broker = Broker(config, data_dir, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    signalled_once = False

    def stop_signalled(signum: int, frame: object) -> None:
        # A plain signal handler, not loop.add_signal_handler: it runs between two bytecodes
        # even while the loop is busy in synchronous work (loading logs), so the deadline is
        # armed at the signal, whatever the loop is doing.
        nonlocal signalled_once
        if not signalled_once:
            signalled_once = True
            # The bound a stop signal promises, counted from the signal (Broker.stop fits in it).
            _arm_deadline(config["controlled.shutdown.timeout.ms"] / 1000 + STOP_DEADLINE_BEYOND_S)
            loop.call_soon_threadsafe(stop.set)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop_signalled)
    # A stop signal during the start is acted on at once: the start is cancelled where it
    # waits, and the broker stops with what it has (its logs, if open, closed cleanly).
    starting = loop.create_task(broker.start(), name="broker-start")
    signalled = loop.create_task(stop.wait(), name="stop-signal")
    await asyncio.wait({starting, signalled}, return_when=asyncio.FIRST_COMPLETED)
    lag_collector = None
    if starting.done():
        starting.result()  # a failed start raises here, as it always did
        lag_collector = lag_metrics.install(broker) if metrics else None
        frozen = heap.freeze_startup_heap()
        structlog.get_logger("tidemark.cli").info("startup_heap_frozen", objects=frozen)
        # A line tests and scripts can wait for, with the real port when 0 was asked for.
        print(f"tidemark listening on {broker.host}:{broker.port}", file=sys.stderr, flush=True)
        for listener, (bound_host, bound_port) in list(broker.bound.items())[1:]:
            print(f"tidemark listening on {bound_host}:{bound_port} ({listener})", file=sys.stderr, flush=True)
        await signalled
    else:
        starting.cancel()
        try:
            await starting
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - it failed as it was cancelled: stop what it opened
            structlog.get_logger("tidemark.cli").exception("broker_start_failed_while_stopping")
        structlog.get_logger("tidemark.cli").info("broker_start_cancelled")
    lag_metrics.uninstall(lag_collector)
    await broker.stop()
