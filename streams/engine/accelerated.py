"""The accelerated record route: a run of consumed messages of one partition through C passes
(eddy/_messages.c) that read the messages' fields directly, with the same effects as the Python
route (`TaskEngine.process_batch` over `message_rows`), which every record these passes do not
take goes through, alone and in order.

Two shapes of the source's only child are accelerated:
- a stage offering the bulk capability `key_bytes_run = (key_serde, run)` or `(key_serde, run,
  takes)`: `run(keys, timestamps, clock, messages)` does for a run of serialized non-None keys
  what the stage does for each, messages[i] the i-th key's consumed message (its record
  context). The values play no part, or with `takes` only where `takes(the source's value
  serde)` accepts it (a table count reads each Change's flag byte); C `keyed_run` collects the
  keys, no row is built;
- any fused chain: C `dispatch_run` is the per-record loop for the common record (no headers, a
  timestamp, a key and value the source's C deserializers take).

`AcceleratedRoute.processor` answers None when neither applies (or the accelerator is not
built): the caller then takes the Python route.

A task reading several partitions whose sources all take the dispatch shape can hand the
choice between them to C as well (`AcceleratedRoute.merged`, C `merge_dispatch`): the record
by record choice of streams/runtime/partition_group.py's `PartitionGroup.runs` (a parity test
holds the two together) with dispatch_run's per-record work, so that the short runs a join's
interleaved inputs make cost no Python loop per run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from confluent_kafka import Message

from eddy.messages import message_function, message_rows
from streams import serdes as _serdes
from streams.engine.nodes import ProcessorNode, SourceNode
from streams.engine.stages import KeyRun
from streams.errors import InvalidTimestampError, RecordDeserializationError

if TYPE_CHECKING:
    from streams.engine.task_engine import TaskEngine

# None without the accelerator or the verified Message layout (eddy/messages.py).
_keyed_run = message_function("keyed_run")
_dispatch_run = message_function("dispatch_run")
_merge_dispatch = message_function("merge_dispatch")
_OFFSET = Message.offset
UNKNOWN_TIME = -1


class AcceleratedRoute:
    """The accelerated route of one task engine (see the module doc)."""

    def __init__(self, engine: "TaskEngine") -> None:
        self.engine = engine
        # per source node: what `_route` found (a task's runs are often a record or two long)
        self._routes: dict[SourceNode, tuple] = {}

    def processor(self, source: SourceNode, topic: str, partition: int) -> Optional[Callable[[list], int]]:
        """The function processing `messages` of one partition (offset order) on this route,
        returning how many were processed; None when this route does not apply."""
        route = self._routes.get(source)
        if route is None:
            route = self._routes[source] = self._route(source)
        fused, run = route
        if fused is None:
            return None
        if run is not None:
            first = source.children[0]
            return lambda messages: self._keyed(source, topic, partition, messages, run, first)
        return self._dispatcher(source, topic, partition, fused)

    def merged(self, partitions: list[tuple[str, int]]) -> Optional["MergedDispatch"]:
        """The C choice and dispatch across `partitions` (a partition group's, in its order), or
        None where it does not apply: a source that is not on the dispatch shape (or whose
        chain takes bulk key runs), or no accelerator."""
        if _merge_dispatch is None or len(partitions) < 2:
            return None
        engine = self.engine
        sources, routes = [], []
        for topic, partition in partitions:
            source = engine.sources_by_topic.get(topic)
            if source is None:
                return None
            route = self._routes.get(source)
            if route is None:
                route = self._routes[source] = self._route(source)
            fused, run = route
            if fused is None or run is not None:
                return None
            sources.append(source)
            routes.append((source.key_deserialize_unchecked, source.value_deserialize_unchecked, fused,
                           source.children[0], topic, partition))
        return MergedDispatch(engine, partitions, sources, routes)

    def _route(self, source: SourceNode) -> tuple:
        """(the fused chain, its bulk key run or None), or (None, None) where this route does
        not apply."""
        if (_dispatch_run is None or len(source.children) != 1 or source.timestamp_extractor is not None
                or source.key_deserialize_unchecked is None or source.value_deserialize_unchecked is None):
            return None, None
        fused = self.engine.chains.entry(source.children[0])
        if fused is None:
            return None, None
        run = self._key_run(source, fused)
        return fused, run if _keyed_run is not None else None

    @staticmethod
    def _key_run(source: SourceNode, fused: Any) -> Optional[KeyRun]:
        """The stage's run over serialized keys, when its key serde is the source's and its bytes
        round-trip (so checking a key by deserializing it is all the serde does); else None."""
        bulk = getattr(fused, "key_bytes_run", None)
        if bulk is None or bulk[0] is not source.key_serde or not _serdes.round_trips(bulk[0]):
            return None
        if len(bulk) > 2 and not bulk[2](source.value_serde):  # the run reads the values too
            return None
        return bulk[1]

    def _one(self, source: SourceNode, topic: str, partition: int, messages: list) -> int:
        """The Python route for messages this route does not take."""
        return self.engine.process_rows(source, topic, partition, message_rows(messages))

    def _dispatcher(self, source: SourceNode, topic: str, partition: int, fused: Any) -> Callable[[list], int]:
        """The common record through C `dispatch_run`, any other through the Python route alone;
        what it reads bound once (a task's runs are often a record or two long)."""
        engine = self.engine
        tp = (topic, partition)
        partition_times = engine.partition_times
        ctx = engine.context
        first = source.children[0]
        key_check = source.key_deserialize_unchecked
        value_check = source.value_deserialize_unchecked
        one = self._one
        raise_process_error = engine.raise_process_error

        def dispatched(messages: list) -> int:
            times = [partition_times.get(tp, UNKNOWN_TIME)]
            start_time = times[0]
            n = len(messages)
            start = 0
            done = 0
            ctx.headers = ()  # dispatch_run takes records without headers only
            try:
                while start < n:
                    try:
                        stop = _dispatch_run(messages, start, key_check, value_check, fused, ctx, first, engine,
                                             topic, partition, times)
                    except (RecordDeserializationError, InvalidTimestampError):
                        raise
                    except Exception as exc:
                        metadata = ctx.metadata  # set by dispatch_run before it calls the chain
                        raise_process_error(exc, source, topic, partition, metadata[2] if metadata else -1)
                    if stop is None:  # the layout went away: the Python route
                        return done + one(source, topic, partition, messages[start:])
                    done += stop - start
                    if stop >= n:
                        break
                    # the Python route reads the partition time from the engine: hand it over
                    if times[0] != start_time:
                        partition_times[tp] = start_time = times[0]
                    done += one(source, topic, partition, messages[stop:stop + 1])
                    times[0] = start_time = partition_times.get(tp, UNKNOWN_TIME)
                    start = stop + 1
            finally:
                ctx.current_node = None
                ctx.metadata = None
                if times[0] != start_time:
                    partition_times[tp] = times[0]
            return done
        return dispatched

    def _keyed(self, source: SourceNode, topic: str, partition: int, messages: list, run: KeyRun,
               first: ProcessorNode) -> int:
        """The keys of each stretch of messages the bulk run takes come straight from the messages
        (C `keyed_run`); a message it does not take goes through the Python route alone, in order."""
        key_check = source.key_deserialize_unchecked
        value_check = source.value_deserialize_unchecked
        ctx = self.engine.context
        n = len(messages)
        start = 0
        done = 0
        try:
            while start < n:
                taken = _keyed_run(messages, start, key_check, value_check)
                if taken is None:  # the layout went away: the Python route
                    return done + self._one(source, topic, partition, messages[start:])
                keys, timestamps, stop = taken
                if keys:
                    done += self._run_keys(run, first, source, topic, partition, keys, timestamps,
                                           messages[start:stop])
                if stop >= n:
                    break
                done += self._one(source, topic, partition, messages[stop:stop + 1])
                start = stop + 1
        finally:
            ctx.current_node = None
            ctx.metadata = None
        return done

    def _run_keys(self, run: KeyRun, first: ProcessorNode, source: SourceNode, topic: str, partition: int,
                  keys: list, timestamps: list, messages: list) -> int:
        """`run` over checked keys, `messages[i]` the i-th key's message (its record context, which
        a cache keeps with the write it makes); an error names the offset of the record being
        handled. The run raises the stream time record by record (it gets the engine as its
        clock); the partition time is raised to the run's newest here."""
        engine = self.engine
        ctx = engine.context
        ctx.current_node = first
        ctx.metadata = None
        try:
            run(keys, timestamps, engine, messages)
        except (RecordDeserializationError, InvalidTimestampError):
            raise
        except Exception as exc:
            engine.raise_process_error(exc, source, topic, partition,
                                       _OFFSET(messages[getattr(exc, "updates_done", 0)]))
        finally:
            newest = max(timestamps)
            tp = (topic, partition)
            if newest > engine.partition_times.get(tp, UNKNOWN_TIME):
                engine.partition_times[tp] = newest
        return len(keys)


class MergedDispatch:
    """One task's partitions through C `merge_dispatch` (see the module doc): records taken in
    Kafka's order across the partitions' queues, the common record by C, any other by its
    partition's processor alone, in order."""

    def __init__(self, engine: "TaskEngine", partitions: list[tuple[str, int]], sources: list[SourceNode],
                 routes: list[tuple]) -> None:
        self.engine = engine
        self.partitions = partitions
        self.sources = sources
        self.routes = routes

    def __call__(self, group: Any, max_records: int, stop_when_empty: bool,
                 consumed: dict[tuple[str, int], int]) -> tuple[int, int, bool]:
        """Process up to `max_records` records of `group` (a runtime PartitionGroup: its
        `queues` and `buffered`; PartitionGroup.runs' arguments):
        (records taken, of which processed, whether the choice is done; False: the C pass gave
        up, the caller's Python loop goes on). `consumed[tp]` is the last offset processed of
        each partition; `group.buffered` counts the records taken off."""
        queues = [group.queues[tp] for tp in self.partitions]
        engine = self.engine
        ctx = engine.context
        partition_times = engine.partition_times
        partitions, routes = self.partitions, self.routes
        sensor = engine.process_sensor
        k = len(partitions)
        taken = processed = 0
        ctx.headers = ()  # merge_dispatch takes records without headers only
        while taken < max_records:
            times = [[partition_times.get(tp, UNKNOWN_TIME)] for tp in partitions]
            counts, lasts, current = [0] * k, [None] * k, [-1]
            failed = True
            try:
                stop = _merge_dispatch(queues, [route + (t,) for route, t in zip(routes, times)], ctx, engine,
                                       max_records - taken, stop_when_empty, counts, lasts, current)
                failed = False
            except (RecordDeserializationError, InvalidTimestampError):
                raise
            except Exception as exc:
                i = current[0]
                if i < 0:  # no record in hand: not a record's failure
                    raise
                metadata = ctx.metadata  # set by merge_dispatch before it calls the chain
                engine.raise_process_error(exc, self.sources[i], partitions[i][0], partitions[i][1],
                                           metadata[2] if metadata else -1)
            finally:
                ctx.current_node = None
                ctx.metadata = None
                popped = sum(counts)
                group.buffered -= popped
                ok = popped - (failed and current[0] >= 0)  # the record in hand when it failed went nowhere
                taken += popped
                processed += ok
                sensor.count += ok
                for i, tp in enumerate(partitions):
                    if lasts[i] is not None:
                        consumed[tp] = _OFFSET(lasts[i])
                    if times[i][0] != partition_times.get(tp, UNKNOWN_TIME):
                        partition_times[tp] = times[i][0]
            if stop is None:
                return taken, processed, False
            if stop < 0:
                return taken, processed, True
            # the head of queue `stop` is not the common record: its partition's processor alone
            live = sum(1 for q in queues if q)
            q = queues[stop]
            message = q.popleft()
            group.buffered -= 1
            tp = partitions[stop]
            taken += 1
            processed += engine.partition_processors[tp]([message])
            consumed[tp] = _OFFSET(message)
            if stop_when_empty and live > 1 and not q:
                break
        return taken, processed, True
