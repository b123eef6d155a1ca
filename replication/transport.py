"""In-process request/response transport between the brokers of a LocalCluster.

A broker registers a handler ``handle(source_id, body, respond)``. Handlers never block: a
request that must wait (a long-poll fetch, an acks=all produce) keeps ``respond`` and calls it
later from whichever thread completes it. Delivery is a direct call on the sender's thread,
which is what makes the embedded cluster cheap; faults (delay, drop, reorder) are injected per
link for tests through `FaultPlan`.

When a broker goes away (stop or crash) every request in flight to it fails with
`TransportError`, as a closed connection would, so callers never wait out a timeout for a
broker that is known to be gone.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from replication.errors import TransportError

log = logging.getLogger(__name__)

Handler = Callable[[int, object, Callable[[object], None]], None]
Callback = Callable[[object, "TransportError | None"], None]


class NotDeliveredError(TransportError):
    """The request never reached the destination's handler (the broker was not registered):
    the sender knows it had no effect, unlike a lost answer or a timeout."""


@dataclass
class LinkFaults:
    """Faults applied to requests from one broker to another (or any, with -1)."""

    delay_ms: float = 0.0
    drop_probability: float = 0.0
    reorder_probability: float = 0.0
    # The request is handled but its response is lost (a "sent, not acknowledged" request).
    drop_response_probability: float = 0.0
    # Only requests whose body type name is listed are affected (empty: all).
    request_types: frozenset[str] = frozenset()

    def applies_to(self, body: object) -> bool:
        return not self.request_types or type(body).__name__ in self.request_types


@dataclass
class FaultPlan:
    """Fault injection for tests; deterministic given its seed."""

    seed: int = 0
    links: dict[tuple[int, int], LinkFaults] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._lock = threading.Lock()

    def set(self, source: int, destination: int, faults: LinkFaults) -> None:
        """Set faults for a link; -1 as source or destination matches any broker."""
        self.links[(source, destination)] = faults

    def clear(self) -> None:
        self.links.clear()

    def for_link(self, source: int, destination: int) -> LinkFaults | None:
        for key in ((source, destination), (source, -1), (-1, destination), (-1, -1)):
            faults = self.links.get(key)
            if faults is not None:
                return faults
        return None

    def roll(self, probability: float) -> bool:
        if probability <= 0:
            return False
        with self._lock:
            return self._random.random() < probability


class _Scheduler:
    """One daemon thread delivering delayed requests in deadline order."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> None:
        with self._cond:
            if self._closed:
                return
            heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._seq), fn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="transport-delays", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                if self._closed:
                    return
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception:  # a handler bug must not kill delivery of other requests
                log.exception("delayed delivery failed")

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify_all()


class _InFlight:
    __slots__ = ("source", "destination", "callback", "done")

    def __init__(self, source: int, destination: int, callback: Callback) -> None:
        self.source = source
        self.destination = destination
        self.callback = callback
        self.done = False


class Transport:
    """Routes requests between registered brokers, with optional fault injection."""

    def __init__(self, faults: FaultPlan | None = None) -> None:
        self.faults = faults or FaultPlan()
        self._handlers: dict[int, Handler] = {}
        self._in_flight: dict[int, set[_InFlight]] = {}
        self._held: dict[tuple[int, int], Callable[[], None]] = {}  # reorder: one held per link
        self._lock = threading.Lock()
        self._scheduler = _Scheduler()

    # -- membership ----------------------------------------------------------------------------

    def register(self, broker_id: int, handler: Handler) -> None:
        with self._lock:
            self._handlers[broker_id] = handler
            self._in_flight.setdefault(broker_id, set())

    def unregister(self, broker_id: int) -> None:
        """Remove a broker and fail every request in flight to it or from it."""
        with self._lock:
            self._handlers.pop(broker_id, None)
            pending = list(self._in_flight.pop(broker_id, ()))
            for flights in self._in_flight.values():
                for f in list(flights):
                    if f.source == broker_id:
                        flights.discard(f)
                        pending.append(f)
            for key in [k for k in self._held if broker_id in k]:
                del self._held[key]
        for f in pending:
            self._complete(f, None, TransportError(f"broker {broker_id} disconnected"))

    def is_registered(self, broker_id: int) -> bool:
        return broker_id in self._handlers

    def close(self) -> None:
        for broker_id in list(self._handlers):
            self.unregister(broker_id)
        self._scheduler.close()

    # -- sending -------------------------------------------------------------------------------

    def send_async(self, source: int, destination: int, body: object, callback: Callback) -> None:
        """Deliver `body`; `callback(response, error)` runs exactly once."""
        flight = _InFlight(source, destination, callback)
        with self._lock:
            handler = self._handlers.get(destination)
            if handler is not None:
                self._in_flight[destination].add(flight)
        if handler is None:
            callback(None, NotDeliveredError(f"broker {destination} is not available"))
            return
        faults = self.faults.for_link(source, destination) if self.faults.links else None
        if faults is None or not faults.applies_to(body):
            self._deliver(flight, handler, body)
            return
        if self.faults.roll(faults.drop_probability):
            log.debug("dropping %s from %d to %d", type(body).__name__, source, destination)
            with self._lock:
                self._in_flight.get(destination, set()).discard(flight)
            return  # never answered: the sender's timeout (or the broker leaving) ends it
        if self.faults.roll(faults.drop_response_probability):
            log.debug("dropping the response to %s from %d to %d", type(body).__name__, source, destination)
            flight.done = True  # whatever the handler answers is lost; the sender times out
            with self._lock:
                self._in_flight.get(destination, set()).discard(flight)
            handler = self._handlers.get(destination)
            if handler is not None:
                try:
                    handler(source, body, lambda response: None)
                except Exception:
                    log.exception("handler of broker %d failed on %s", destination, type(body).__name__)
            return
        deliver = lambda: self._deliver(flight, self._handlers.get(destination), body)  # noqa: E731
        if self.faults.roll(faults.reorder_probability):
            key = (source, destination)
            with self._lock:
                previous = self._held.pop(key, None)
                if previous is None:
                    self._held[key] = deliver
                    deliver = None
            if deliver is None:
                return  # held until the next request on this link overtakes it
            released = previous
            self._schedule(faults, deliver)
            self._schedule(faults, released)
            return
        self._schedule(faults, deliver)

    def _schedule(self, faults: LinkFaults, fn: Callable[[], None]) -> None:
        if faults.delay_ms > 0:
            self._scheduler.call_later(faults.delay_ms / 1000.0, fn)
        else:
            fn()

    def flush_held(self) -> None:
        """Deliver requests held back for reordering (tests call this at the end of a run)."""
        with self._lock:
            held = list(self._held.values())
            self._held.clear()
        for fn in held:
            fn()

    def _deliver(self, flight: _InFlight, handler: Handler | None, body: object) -> None:
        if handler is None or flight.done:
            self._complete(flight, None, NotDeliveredError(f"broker {flight.destination} is not available"))
            return
        try:
            handler(flight.source, body, lambda response: self._complete(flight, response, None))
        except Exception as e:  # a failing handler answers with an error instead of hanging the sender
            log.exception("handler of broker %d failed on %s", flight.destination, type(body).__name__)
            self._complete(flight, None, TransportError(f"broker {flight.destination} failed: {e!r}"))

    def _complete(self, flight: _InFlight, response: object, error: TransportError | None) -> None:
        with self._lock:
            if flight.done:
                return
            flight.done = True
            flights = self._in_flight.get(flight.destination)
            if flights is not None:
                flights.discard(flight)
        flight.callback(response, error)

    def request(self, source: int, destination: int, body: object, timeout_s: float) -> object:
        """Send and wait for the response; raises TransportError on failure or timeout."""
        done = threading.Event()
        result: list = [None, None]

        def callback(response: object, error: TransportError | None) -> None:
            result[0] = response
            result[1] = error
            done.set()

        self.send_async(source, destination, body, callback)
        if not done.wait(timeout_s):
            raise TransportError(
                f"{type(body).__name__} from broker {source} to broker {destination} "
                f"timed out after {timeout_s:.3f}s"
            )
        if result[1] is not None:
            raise result[1]
        return result[0]
