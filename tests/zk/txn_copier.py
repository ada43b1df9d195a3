"""A transactional copier, run as its own process by tests/zk/test_txn_chaos.py: a
consume-transform-produce loop that copies an input topic to an output topic, one transaction
per batch, the consumed offsets sent to the transaction (Kafka's TransactionalMessageCopier).

    python -m tests.zk.txn_copier --client confluent|aiokafka --bootstrap B --transactional-id T
        --group G --input IN --output OUT --instance NAME [--abort-percent P] [--seed S]

confluent: a subscribed group member (KIP-447: the offsets carry the group's generation, so
copiers with their own transactional ids share the input). aiokafka sends offsets by group id
only (no generation): it is the input's only copier, its partitions assigned, not subscribed.

Each output value is `input value|instance|transaction number|C or A`: A marks a transaction
the copier aborts on purpose (P percent of them, drawn from the seed), whose records must never
reach a read_committed reader. What it does goes to stdout, one line each, for the driver to
wait on: `ready`, `committed N`, `aborted N`, `holding INSTANCE SEQ`, `fenced CODE`, `error TEXT`.
It reads commands on stdin: `hold` (stop before the next commit, and say so; the next line
lets it go on: the driver's zombie) and `stop` (finish the transaction in hand and exit).

Errors: an abortable one aborts and rewinds to the committed offsets; any other ends the
process (exit 2), which the driver restarts, as a crash.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import queue
import random
import signal
import sys
import threading

BATCH = 5  # records per transaction at most: many transactions, many points to be killed at
WAIT_S = 60.0


def say(line: str) -> None:
    print(line, flush=True)


class Commands:
    """stdin lines, read by a thread: the loop never blocks on them except when holding."""

    def __init__(self) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            self.lines.put(line.strip())
        self.lines.put("stop")  # the driver went away

    def pending(self) -> list[str]:
        found = []
        while True:
            try:
                found.append(self.lines.get_nowait())
            except queue.Empty:
                return found

    def next(self) -> str:
        return self.lines.get()


def value(record: bytes, args, seq: int, aborting: bool) -> bytes:
    return b"|".join([record, args.instance.encode(), str(seq).encode(), b"A" if aborting else b"C"])


def run_confluent(args, commands: Commands, rng: random.Random) -> int:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
                         "transaction.timeout.ms": args.transaction_timeout_ms, "log_level": 0})
    producer.init_transactions(WAIT_S)  # fences an earlier instance and completes its transaction
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group, "log_level": 0,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "max.poll.interval.ms": 30000, "heartbeat.interval.ms": 1000})
    consumer.subscribe([args.input])
    say("ready")

    def rewind() -> None:
        """Back to what the group committed (read_committed: librdkafka asks require_stable)."""
        assigned = consumer.assignment()
        if not assigned:
            return
        for tp in consumer.committed(assigned, WAIT_S):
            consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
            say(f"rewound {tp.partition} {tp.offset}")

    seq = 0
    hold = False
    try:
        while True:
            pending = commands.pending()
            if "stop" in pending:
                return 0
            hold = hold or "hold" in pending
            batch = [m for m in consumer.consume(BATCH, 0.5) if m.error() is None]
            if not batch:
                continue
            seq += 1
            aborting = not hold and rng.randrange(100) < args.abort_percent
            try:
                producer.begin_transaction()
                for m in batch:
                    producer.produce(args.output, value(m.value(), args, seq, aborting), key=m.key(),
                                     partition=m.partition())
                offsets = consumer.position([TopicPartition(m.topic(), m.partition()) for m in batch])
                producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), WAIT_S)
                if hold:  # the zombie: its records written, its offsets sent, then paused by the driver
                    producer.flush(WAIT_S)
                    say(f"holding {args.instance} {seq}")
                    commands.next()
                    try:
                        producer.commit_transaction(WAIT_S)
                    except KafkaException as exc:
                        error = exc.args[0]
                        say(f"fenced {error.name()} fatal={error.fatal()} {error.str()}")
                        return 3
                    say("zombie-committed")
                    return 4
                if aborting:
                    producer.abort_transaction(WAIT_S)
                    say(f"aborted {len(batch)}")
                    rewind()
                else:
                    producer.commit_transaction(WAIT_S)
                    say(f"committed {len(batch)} " + ",".join(f"{tp.partition}:{tp.offset}" for tp in offsets))
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.txn_requires_abort():
                    producer.abort_transaction(WAIT_S)
                    say(f"aborted {len(batch)} on {error.name()}")
                    rewind()
                    continue
                say(f"error {error.name()} {error.str()}")
                return 2
    finally:
        consumer.close()


async def run_aiokafka(args, commands: Commands, rng: random.Random) -> int:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.errors import KafkaError
    from confluent_kafka import Consumer, KafkaException
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap, transactional_id=args.transactional_id,
                                transaction_timeout_ms=args.transaction_timeout_ms, request_timeout_ms=30000)
    await asyncio.wait_for(producer.start(), WAIT_S)  # InitProducerId: the earlier instance's transaction completes
    consumer = AIOKafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group,
                                isolation_level="read_committed", enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await asyncio.wait_for(consumer.start(), WAIT_S)
    partitions = [TopicPartition(args.input, p) for p in sorted(consumer.partitions_for_topic(args.input) or ())]
    if not partitions:
        partitions = [TopicPartition(args.input, p) for p in
                      sorted(await asyncio.wait_for(_partitions(consumer, args.input), WAIT_S))]
    consumer.assign(partitions)

    # The committed offsets are asked through librdkafka: aiokafka's OffsetFetch (v2-v3) ignores the
    # group-level error code, so a coordinator moving away (NOT_COORDINATOR, no partitions, as
    # Kafka answers) reads as "nothing committed" and the copy would start over from offset 0.
    checker = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group, "log_level": 0,
                        "enable.auto.commit": False, "isolation.level": "read_committed"})

    async def rewind() -> None:
        # read_committed: require_stable, so a transaction of ours still completing is waited for
        answered = await asyncio.get_running_loop().run_in_executor(
            None, lambda: checker.committed([KafkaTopicPartition(tp.topic, tp.partition) for tp in partitions],
                                            WAIT_S))
        for tp, found in zip(partitions, answered):
            consumer.seek(tp, found.offset if found.offset >= 0 else 0)
            say(f"rewound {tp.partition} {found.offset}")

    await rewind()
    say("ready")
    seq = 0
    try:
        while True:
            if "stop" in commands.pending():
                return 0
            fetched = await consumer.getmany(timeout_ms=500, max_records=BATCH)
            batch = [m for records in fetched.values() for m in records]
            if not batch:
                continue
            seq += 1
            aborting = rng.randrange(100) < args.abort_percent
            offsets = {tp: records[-1].offset + 1 for tp, records in fetched.items() if records}
            try:
                await producer.begin_transaction()
                sent = [await producer.send(args.output, value(m.value, args, seq, aborting), key=m.key,
                                            partition=m.partition) for m in batch]
                await asyncio.gather(*sent)
                await producer.send_offsets_to_transaction(offsets, args.group)
                if aborting:
                    await producer.abort_transaction()
                    say(f"aborted {len(batch)}")
                    await rewind()
                else:
                    await producer.commit_transaction()
                    say(f"committed {len(batch)} " + ",".join(f"{tp.partition}:{o}" for tp, o in offsets.items()))
            except (KafkaError, KafkaException) as exc:  # crash-only: the restart's InitProducerId settles it
                say(f"error {type(exc).__name__} {exc}")
                return 2
    finally:
        checker.close()
        await consumer.stop()
        await producer.stop()


async def _partitions(consumer, topic: str) -> set[int]:
    while True:
        found = consumer.partitions_for_topic(topic)
        if found:
            return found
        await consumer._client.force_metadata_update()  # noqa: SLF001 - no public metadata refresh


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=("confluent", "aiokafka"), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--instance", required=True)
    parser.add_argument("--abort-percent", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--transaction-timeout-ms", type=int, default=20000)
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)  # the clients' resets and retries, for a failure's story
    faulthandler.register(signal.SIGUSR1)  # the driver asks where a copier that does not stop is stuck
    commands, rng = Commands(), random.Random(f"{args.seed}-{args.instance}")
    try:
        if args.client == "confluent":
            return run_confluent(args, commands, rng)
        return asyncio.run(run_aiokafka(args, commands, rng))
    except Exception as exc:  # noqa: BLE001 - reported to the driver, which restarts the copier
        say(f"error {type(exc).__name__} {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
