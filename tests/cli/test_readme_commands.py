"""The README's shell blocks run as written, in order, as a new user runs them; every command the
README and docs/design.md show is at least parsed by the real CLI, so a renamed flag fails here.

The blocks run in a fresh directory holding only a `.venv` link to the venv the tests run in
(its bin first on PATH), against a broker started in the background as `make serve` starts it,
on a port chosen at run time: the README's `127.0.0.1:9092` (and `localhost:9092`) is that
port, and `make serve` is the command `make -n serve` prints for it (checked, so the mapping
cannot drift from the Makefile). Blocks that cannot run here are listed in SKIPPED with why;
their commands are parsed all the same.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from tests.conftest import STARTUP_TIMEOUT_S, free_port
from tidemark.cli.main import main as tidemark_cli

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DESIGN = ROOT / "docs" / "design.md"
VENV = Path(sys.executable).parent.parent
README_ADDRESSES = ("127.0.0.1:9092", "localhost:9092")
BLOCK_TIMEOUT_S = 600  # a hang guard only: each block takes seconds

# Blocks that cannot run in a test, by their first line, with the reason. Their commands are parsed.
SKIPPED = {
    "make install # set up .venv with tidemark and its dependencies (.venv/bin/tidemark)":
        "installs into a venv and runs the whole suite; the test already runs in that venv",
    "make serve": "runs a broker in the foreground until Ctrl-C: the test starts the same command in the "
                  "background (see serve_command)",
    "tidemark users add alice --mechanism SCRAM-SHA-512 --password-file alice.pw --data-dir tidemark-data":
        "needs TLS key material for the SASL_SSL listener",
    "make cluster          # ZooKeeper and brokers 1-3 on 127.0.0.1:9092-9094, data under ./tidemark-cluster; "
    "Ctrl-C stops all": "starts ZooKeeper and three brokers in the foreground for minutes (tests/cli/"
                        "test_cluster_cli.py drives `cluster run`)",
    ".venv/bin/tidemark cluster kill --broker 2      # SIGKILL: a crash; its leaderships move once its session "
    "expires": "needs the running `make cluster`",
    "tidemark serve --listen HOST:9092 --data-dir d1 --set broker.id=1 --set zookeeper.connect=ZKHOST:2181":
        "a template for other machines (HOST, ZKHOST)",
    "tidemark serve --set zookeeper.connect=127.0.0.1:2181 --set offsets.storage=zookeeper \\":
        "needs a ZooKeeper server; runs a broker in the foreground",
    "tidemark zk migrate-offsets --zookeeper 127.0.0.1:2181 --bootstrap-server 127.0.0.1:9092 --dry-run":
        "needs a ZooKeeper server (tests/cli/test_groups_zookeeper_storage.py)",
    "tidemark groups describe G --bootstrap-server 127.0.0.1:9092 --zookeeper 127.0.0.1:2181":
        "needs a ZooKeeper server (tests/cli/test_groups_zookeeper_storage.py)",
    "python -m tidemark.consumer --zookeeper 127.0.0.1:2181 --bootstrap-server 127.0.0.1:9092 \\":
        "needs a ZooKeeper server (tests/consumer/)",
    ". .venv/bin/activate": "starts a Spark standalone master and worker (tests/spark/ runs them)",
    "python -m tidemark.spark.package tidemark.zip      # the tidemark package's sources, importable from a zip":
        "submits to a Spark cluster (tests/spark/)",
    "$SPARK_HOME/sbin/start-connect-server.sh --conf spark.connect.grpc.binding.port=15002 \\":
        "starts a Spark Connect server",
    "tidemark spark offsets-snapshot --bootstrap-server 127.0.0.1:9092      # what OffsetFetch would answer, "
    "per group": "starts Spark, and the cluster lines need a Spark master (tests/cli/test_spark_cli.py)",
    "tidemark acls add --bootstrap-server 127.0.0.1:9092 --allow-principal User:alice \\":
        "needs a broker with an authorizer (tests/cli/test_acls_cli.py)",
    "tidemark spark lag-report --bootstrap-server 127.0.0.1:9093 --command-config client.properties \\":
        "starts Spark against a SASL_SSL listener (tests/spark/test_security.py)",
}

# Commands of other programs, not parsed here (their own tools check them).
EXTERNAL = ("kcat", "echo", "spark-submit", "$SPARK_HOME/", ".", "SPARK_HOME=")


def fenced_blocks(path: Path) -> list[tuple[int, str, str]]:
    """(line number, language, text) of each fenced block."""
    blocks, lines, i = [], path.read_text().splitlines(), 0
    while i < len(lines):
        match = re.match(r"^```(\w*)\s*$", lines[i])
        if match:
            start, body = i + 1, []
            i += 1
            while not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            blocks.append((start, match.group(1), "\n".join(body) + "\n"))
        i += 1
    return blocks


def shell_blocks() -> list[tuple[int, str]]:
    return [(line, text) for line, lang, text in fenced_blocks(README) if lang in ("sh", "bash")]


def commands(block: str) -> list[tuple[list[str], str | None]]:
    """Each command of a shell block as argv, with its heredoc's text (or None)."""
    found = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        while line.endswith("\\"):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        i += 1
        heredoc = None
        marker = re.search(r"<<'?(\w+)'?", line)
        if marker:
            end = lines.index(marker.group(1), i)
            heredoc = "\n".join(lines[i:end]) + "\n"
            i = end + 1
            line = line[:marker.start()]
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        argv: list[str] = []
        for token in [*lexer, ";"]:
            if token in ("|", "||", "&&", ";", "&"):
                if argv:
                    found.append((argv, heredoc))
                argv = []
            else:
                argv.append(token)
    return found


def _expand(argv: list[str]) -> list[list[str]]:
    """A synopsis' `a|b` alternatives as separate commands."""
    for index, word in enumerate(argv):
        if "|" in word and not word.startswith("-"):
            return [variant for choice in word.split("|")
                    for variant in _expand([*argv[:index], choice, *argv[index + 1:]])]
    return [argv]


def parse_command(argv: list[str], heredoc: str | None, cwd: Path, naming: bool = False) -> None:
    """Parse one command as its program would, without running it; raise on any error."""
    program = argv[0]
    if program.endswith("tidemark"):
        here = os.getcwd()
        os.chdir(cwd)  # paths the command checks are the user's
        try:
            parse_tidemark(argv[1:], naming)
        finally:
            os.chdir(here)
    elif program == "make":
        targets = [a for a in argv[1:] if "=" not in a]
        variables = [a for a in argv[1:] if "=" in a]
        result = make_dry_run([*targets, *variables], cwd)
        assert result.returncode == 0, f"make {' '.join(argv[1:])}: {result.stderr}"
    elif program.endswith("python") and argv[1:2] == ["-"]:
        compile(heredoc or "", "<heredoc>", "exec")
    elif program.endswith("python") and argv[1] == "-m":
        parse_python_module(argv[2], argv[3:], cwd)
    elif program.startswith(EXTERNAL):
        return
    else:
        raise AssertionError(f"no parser for {argv!r}: add one, or list the program in EXTERNAL")


def parse_tidemark(args: list[str], naming: bool = False) -> None:
    """Parse `tidemark ARGS` with the real click command tree, invoking nothing. With `naming`
    (prose naming a command or an option of it), the command and option names must exist but
    what the command still needs may be left out."""
    original = click.Command.invoke
    click.Command.invoke = lambda self, ctx: None  # type: ignore[method-assign]
    try:
        tidemark_cli.main(args, prog_name="tidemark", standalone_mode=False)
    except (click.exceptions.NoArgsIsHelpError, click.MissingParameter, click.BadOptionUsage) as e:
        if not naming:  # prose names a command or one of its options without the rest
            raise AssertionError(f"tidemark {shlex.join(args)}: {e.format_message()}") from e
    except click.ClickException as e:
        raise AssertionError(f"tidemark {shlex.join(args)}: {e.format_message()}") from e
    finally:
        click.Command.invoke = original  # type: ignore[method-assign]


def parse_python_module(module: str, args: list[str], cwd: Path) -> None:
    """Parse `python -m MODULE ARGS` with the module's own argparse parser, then stop."""
    script = ("import argparse, runpy, sys\n"
              "parse = argparse.ArgumentParser.parse_args\n"
              "def parsed(self, *a, **k):\n"
              "    parse(self, *a, **k)\n"
              "    sys.exit(0)\n"
              "argparse.ArgumentParser.parse_args = parsed\n"
              f"sys.argv = [{module!r}, *{args!r}]\n"
              f"runpy.run_module({module!r}, run_name='__main__')\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"})
    assert result.returncode == 0, f"python -m {module} {shlex.join(args)}: {result.stderr[-2000:]}"


def _first_line(block: str) -> str:
    return block.splitlines()[0]


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    """A new user's directory: the venv, and the files the skipped examples name."""
    (tmp_path / ".venv").symlink_to(VENV)
    for name in ("alice.pw", "tls.properties", "client.properties", "pipeline.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "tidemark-data").mkdir()
    return tmp_path


def test_every_skipped_block_is_in_the_readme():
    firsts = {_first_line(text) for _, text in shell_blocks()}
    assert set(SKIPPED) <= firsts, set(SKIPPED) - firsts


def test_every_readme_command_parses(user_dir: Path):
    """Each command of every shell block, run or skipped, parses as its program would parse it."""
    for line, text in shell_blocks():
        for argv, heredoc in commands(text):
            for variant in _expand(argv):
                try:
                    parse_command(variant, heredoc, user_dir)
                except AssertionError as e:
                    raise AssertionError(f"README.md line {line}: {e}") from e


INLINE = re.compile(r"`((?:\.venv/bin/)?tidemark (?:[a-z-]+)(?: [^`]*)?|make [a-z-]+(?: [^`]*)?|python -m [\w.]+[^`]*)`")


def inline_commands(path: Path) -> list[tuple[int, list[str]]]:
    """Commands quoted in the prose: `tidemark SUBCOMMAND ...`, `make TARGET ...`, `python -m ...`.
    A placeholder in capitals (N, G, NAME) stands for a value: 1 parses as any of them."""
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for match in INLINE.finditer(line):
            words = shlex.split(match.group(1).replace("...", ""))
            if words[0].endswith("tidemark") and words[1] not in tidemark_cli.commands:
                continue  # a name like tidemark.spark, not a command
            args = [re.sub(r"^[A-Z][A-Z_]*$", "1", w) for w in words if not re.fullmatch(r"\[.*\]", w)]
            found.extend((number, variant) for variant in _expand(args))
    return found


@pytest.mark.parametrize("path", [README, DESIGN], ids=["README", "design"])
def test_every_command_quoted_in_the_prose_parses(path: Path, user_dir: Path):
    quoted = inline_commands(path)
    assert quoted
    for number, argv in quoted:
        try:
            parse_command(argv, None, user_dir, naming=True)
        except AssertionError as e:
            raise AssertionError(f"{path.name} line {number}: {e}") from e


def test_a_renamed_flag_fails_the_parse():
    parse_tidemark(["groups", "describe", "g", "--bootstrap-server", "127.0.0.1:1"])
    with pytest.raises(AssertionError, match="No such option"):
        parse_tidemark(["groups", "describe", "g", "--bootstrap-servers", "127.0.0.1:1"])


def make_dry_run(arguments: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`make -n` as a user's shell runs it: under `make test` the inherited MAKELEVEL and MAKEFLAGS would
    make it a sub-make, which prints "Entering/Leaving directory" lines around the commands."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    return subprocess.run(["make", "-n", "--no-print-directory", "-f", str(ROOT / "Makefile"),
                           "-o", ".venv/.installed", *arguments], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def serve_command(port: int, cwd: Path) -> list[str]:
    """What `make serve` runs, for the broker address the test chose (LISTEN=...)."""
    result = make_dry_run(["serve", f"LISTEN=127.0.0.1:{port}", "VENV=.venv"], cwd)
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip().splitlines()[-1]
    assert line == f".venv/bin/tidemark serve --listen 127.0.0.1:{port} --data-dir tidemark-data", line
    return shlex.split(line)


def _wait_listening(process: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the broker exited with {process.returncode}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"the broker did not listen within {STARTUP_TIMEOUT_S} s")


@pytest.mark.timeout(2400)  # a hang guard: some 25 CLI starts, each seconds on a busy machine
def test_the_readme_shell_blocks_run_as_written(user_dir: Path):
    port = free_port()
    env = {**os.environ, "PATH": f"{VENV / 'bin'}:{os.environ['PATH']}",
           "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    shutil.rmtree(user_dir / "tidemark-data")  # a fresh start, as `make serve` makes it
    log = open(user_dir / "broker.log", "wb")
    broker = subprocess.Popen(serve_command(port, user_dir), cwd=user_dir, env=env, stdout=log, stderr=log)
    try:
        _wait_listening(broker, port)
        ran = 0
        for line, text in shell_blocks():
            if _first_line(text) in SKIPPED:
                continue
            if shutil.which("kcat") is None and text.lstrip().startswith("kcat"):
                continue  # `make system-deps` installs it; without it the block cannot run
            for address in README_ADDRESSES:
                text = text.replace(address, f"127.0.0.1:{port}")
            result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text], cwd=user_dir, env=env,
                                    capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
            assert result.returncode == 0, (f"README.md block at line {line} failed ({result.returncode}):\n{text}\n"
                                            f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}")
            ran += 1
        assert ran >= 6
    finally:
        broker.send_signal(signal.SIGTERM)  # Ctrl-C's clean shutdown
        try:
            assert broker.wait(timeout=60) == 0
        finally:
            if broker.poll() is None:
                broker.kill()
            log.close()
