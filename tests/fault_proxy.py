"""A fault-injecting TCP proxy for tests: network faults between brokers, not only signals.

One asyncio loop in a thread of the test process serves every proxied address. `front(target,
upstream_port)` listens on 127.0.0.1 on a port chosen at run time and forwards each connection
to 127.0.0.1:upstream_port. A broker advertising the front's address (advertised.listeners) is
reached through it by the other brokers and by clients alike.

Faults are set per link and per direction. A link is (source, target): the target is the name
given to `front`; the source is the front's fixed `source` when it has one (a ZooKeeper front per
broker), else read from the connection's first Kafka request: client id `replica-N` (a
follower's fetcher) is broker N, anything else is CLIENTS. REQUESTS flow from the connecting side
to the target, RESPONSES back. A fault acts on every connection of its link, open or new:

- Delay(s): each chunk is forwarded s seconds after it arrived, in order;
- DROP: the connection is closed when a chunk would go that way (requests: before the target
  sees it; responses: after it acted on the request, as a lost answer);
- BLACKHOLE: nothing goes that way and nothing more is read (TCP's back-pressure holds the
  sender), as a partitioned network; on heal what was held is delivered, as TCP retransmits;
- None: heal.

Nothing leaves 127.0.0.1. `close()` ends every connection and the loop's thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import threading
from collections import Counter

REQUESTS = "requests"
RESPONSES = "responses"
CLIENTS = "clients"  # the source of a connection that is not a follower's fetcher
DROP = "drop"
BLACKHOLE = "blackhole"
CHUNK = 65536
QUEUED_CHUNKS = 16  # per direction: beyond it the proxy stops reading (back-pressure)


@dataclasses.dataclass(frozen=True)
class Delay:
    seconds: float


Fault = Delay | str | None
Link = tuple[object, object]  # (source, target)


def source_of_first_request(frame: bytes) -> object:
    """The source a Kafka request's header names: `replica-N` -> N, else CLIENTS. The frame
    is the request without its size prefix: api key, version, correlation id, client id."""
    if len(frame) < 10:
        return CLIENTS
    (length,) = struct.unpack_from(">h", frame, 8)
    client_id = frame[10:10 + length].decode("utf-8", "replace") if length > 0 else ""
    prefix, _, number = client_id.partition("replica-")
    return int(number) if not prefix and number.isdigit() else CLIENTS


class FaultProxy:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        self._faults: dict[tuple[Link, str], Fault] = {}
        self._changed: asyncio.Condition | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.connections: Counter[Link] = Counter()  # connections accepted per link
        self.dropped: Counter[Link] = Counter()  # connections closed by DROP per link
        self._call(self._init())

    def _call(self, coroutine, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    async def _init(self) -> None:
        self._changed = asyncio.Condition()

    # -- the test's side ------------------------------------------------------------------------

    def front(self, target: object, upstream_port: int, source: object = None) -> int:
        """Listen for `target` (forwarding to 127.0.0.1:upstream_port); the port listened on."""
        return self._call(self._front(target, upstream_port, source))

    def set(self, source: object, target: object, direction: str, fault: Fault) -> None:
        assert direction in (REQUESTS, RESPONSES), direction
        self._call(self._set({((source, target), direction): fault}))

    def set_both(self, source: object, target: object, fault: Fault) -> None:
        self._call(self._set({((source, target), REQUESTS): fault, ((source, target), RESPONSES): fault}))

    def heal(self) -> None:
        """Every link back to normal (what blackholes held is delivered now)."""
        self._call(self._set(None))

    def faults(self) -> dict[tuple[Link, str], Fault]:
        return dict(self._faults)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._call(self._close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self._loop.close()

    # -- the loop's side ------------------------------------------------------------------------

    async def _set(self, faults: dict[tuple[Link, str], Fault] | None) -> None:
        assert self._changed is not None
        async with self._changed:
            if faults is None:
                self._faults.clear()
            else:
                for key, fault in faults.items():
                    if fault is None:
                        self._faults.pop(key, None)
                    else:
                        self._faults[key] = fault
            self._changed.notify_all()

    async def _front(self, target: object, upstream_port: int, source: object) -> int:
        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            self._tasks.add(task)
            try:
                await self._serve(reader, writer, target, upstream_port, source)
            except asyncio.CancelledError:  # close(): asyncio's stream callback must not see it
                pass
            finally:
                self._tasks.discard(task)

        server = await asyncio.start_server(accepted, "127.0.0.1", 0)
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: object,
                     upstream_port: int, source: object) -> None:
        self._writers.add(writer)
        upstream_writer = None
        try:
            first = b""
            if source is None:  # a Kafka front: the first request names who connects
                try:
                    size = await reader.readexactly(4)
                    first = size + await reader.readexactly(struct.unpack(">i", size)[0])
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                source = source_of_first_request(first[4:])
            link = (source, target)
            self.connections[link] += 1
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
            except OSError:
                return  # the target is down: so is the connection
            self._writers.add(upstream_writer)
            closed = asyncio.Event()
            pumps = [asyncio.create_task(self._pump(reader, upstream_writer, link, REQUESTS, first, closed)),
                     asyncio.create_task(self._pump(upstream_reader, writer, link, RESPONSES, b"", closed))]
            try:
                await closed.wait()
            finally:
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            for w in (writer, upstream_writer):
                if w is not None:
                    self._writers.discard(w)
                    w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: Link, direction: str,
                    first: bytes, closed: asyncio.Event) -> None:
        """Read one direction into a bounded queue; a second task delivers it under the faults."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUED_CHUNKS)
        deliver = asyncio.create_task(self._deliver(queue, writer, link, direction, closed))
        loop = asyncio.get_running_loop()
        try:
            if first:
                await queue.put((loop.time(), first))
            while not closed.is_set():
                try:
                    data = await reader.read(CHUNK)
                except ConnectionError:
                    data = b""
                await queue.put((loop.time(), data))  # b"": the end, after what came before it
                if not data:
                    break
            await deliver
        finally:
            deliver.cancel()

    async def _deliver(self, queue: asyncio.Queue, writer: asyncio.StreamWriter, link: Link, direction: str,
                       closed: asyncio.Event) -> None:
        assert self._changed is not None
        try:
            while True:
                arrived, data = await queue.get()
                while True:
                    fault = self._faults.get((link, direction))
                    if fault == BLACKHOLE:
                        async with self._changed:
                            await self._changed.wait_for(lambda: self._faults.get((link, direction)) != BLACKHOLE)
                        continue
                    if fault == DROP:
                        self.dropped[link] += 1
                        return
                    if isinstance(fault, Delay):
                        wait = arrived + fault.seconds - asyncio.get_running_loop().time()
                        if wait > 0:  # asked again after it: the fault may change meanwhile
                            await asyncio.sleep(min(wait, 0.05))
                            continue
                    break
                if not data:
                    return
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            closed.set()

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
