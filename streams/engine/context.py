"""The processor context every node of one task shares: forwarding, store access, scheduling."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from state.store import wall_clock_ms
from streams.engine.nodes import ProcessorNode, SinkNode
from streams.errors import StoreAccessError, ProcessingError, UnknownProcessorError
from streams.engine.stages import as_records
from streams.processor import Cancellable, ProcessorContext, PunctuationType, Record, RecordMetadata

if TYPE_CHECKING:
    from streams.engine.task_engine import TaskEngine


#: What a stream task's processor may not call on a global store (only the global thread updates it).
_GLOBAL_STORE_WRITES = frozenset({"put", "put_if_absent", "put_all", "delete", "remove", "update", "update_many",
                                  "init", "flush", "flush_cache", "close", "restore_batch"})


class ReadOnlyGlobalStore:
    """A global store as the processors of stream tasks see it (Kafka's *ReadOnlyDecorator):
    reads go to the store (a timestamped store's `get` gives ValueAndTimestamp), writes raise
    StoreAccessError. Attributes are looked up once per access, so a processor that keeps
    `store.get` from `init` pays nothing per record."""

    __slots__ = ("_store", "name")

    def __init__(self, store: Any) -> None:
        self._store = store
        self.name = store.name

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._store, attr)
        if attr in _GLOBAL_STORE_WRITES:
            name = self.name

            def refused(*args: Any, **kwargs: Any) -> None:
                raise StoreAccessError(f"global state store {name!r} is read-only here: {attr}() is refused; "
                                       "only its global store processor updates it")
            return refused
        return value

    def __repr__(self) -> str:
        return f"ReadOnlyGlobalStore({self.name!r})"


class ProcessorContextImpl(ProcessorContext):
    """The context every processor of one task shares; tracks the current node and record."""

    def __init__(self, engine: "TaskEngine") -> None:
        self._engine = engine
        self.current_node: Optional[ProcessorNode] = None
        # Kafka's ProcessorRecordContext, less the timestamp (the record's own): `metadata` is
        # (topic, partition, offset) of the input record as a plain tuple (cheap per record),
        # None in a punctuation; `headers` are the input record's. A caching store keeps both
        # with each write and sets them again while it writes that entry down and forwards it
        # (Kafka's CachingKeyValueStore); a suppression sets its buffered record's while it
        # emits. Kafka's forward() also sets the forwarded record's headers; here it need not:
        # process() is key-changing, so every store a DSL step below it writes is behind a
        # repartition topic, and a Processor API store has no flush listener to forward with.
        self.metadata: Optional[tuple[str, int, int]] = None
        self.headers: Any = ()
        self.commit_requested = False
        # Kafka's recordContext().timestamp() for store writes that give no timestamp: the record
        # a node with stores is processing, the time of a punctuation; -1 outside both
        self.record_timestamp = -1
        # a global task bootstrapping its stores (GlobalStateUpdateTask.restore): Kafka restores
        # them without their processors, so what only processing does (a WARN) is skipped
        self.bootstrapping = False

    @property
    def application_id(self) -> str:
        return self._engine.application_id

    @property
    def task_id(self) -> Any:
        return self._engine.task_id

    @property
    def app_config(self) -> dict:
        return self._engine.config

    @property
    def dropped_records_sensor(self) -> Any:
        """The task's dropped-records sensor (operators add the records they drop)."""
        return self._engine.dropped_records_sensor

    @property
    def current_stream_time_ms(self) -> int:
        return self._engine.stream_time

    @property
    def current_system_time_ms(self) -> int:
        return self._engine.clock_ms()

    def forward(self, record: Record, child_name: str | None = None) -> None:
        node = self.current_node
        if node is None:
            raise ProcessingError("forward() called outside of process(), a punctuation or a store flush")
        if child_name is None:
            only = node.only_child
            if only is not None:
                self.current_node = only
                only.process(record)
            else:
                for child in node.children:
                    self.current_node = child
                    child.process(record)
        else:
            child = node.children_by_name.get(child_name)
            if child is None:
                raise UnknownProcessorError(
                    f"processor {node.name!r} has no child named {child_name!r}; "
                    f"children are {[c.name for c in node.children]}")
            self.current_node = child
            child.process(record)
        # not restored in a finally: after an exception current_node names the failing node
        self.current_node = node

    def node_forward(self) -> Callable[..., None]:
        """`forward` for the current node, for a processor to keep from init(): with exactly one
        child it calls that child directly while this node is current (the per-record case) and
        falls back to `forward` otherwise, so it behaves exactly like `forward`."""
        node = self.current_node
        generic = self.forward
        only = node.only_child if node is not None else None
        if only is None:
            return generic
        child_process = only.process
        ctx = self
        if isinstance(only, SinkNode):
            # a sink never reads the context: current_node moves to it only if it fails (so
            # errors name it, as with `forward`)
            def forward_to_sink(record: Record, child_name: str | None = None) -> None:
                if child_name is None and ctx.current_node is node:
                    try:
                        child_process(record)
                    except BaseException:
                        ctx.current_node = only
                        raise
                else:
                    generic(record, child_name)
            return forward_to_sink

        chains = self._engine.chains
        if chains.can_start(only):
            # the child and the nodes after it run as one fused chain (streams/engine/fusion.py), built at
            # the first forward: processors are initialised parent first, and a stage may need
            # its processor initialised
            entry: Any = None

            def forward_fused(record: Record, child_name: str | None = None) -> None:
                nonlocal entry
                if child_name is None and ctx.current_node is node:
                    if entry is None:
                        entry = chains.entry(only)
                    ctx.current_node = only
                    entry(record.key, record.value, record.timestamp, record.headers)
                    # not restored in a finally: after an exception current_node names the failing node
                    ctx.current_node = node
                else:
                    generic(record, child_name)
            return forward_fused

        def forward(record: Record, child_name: str | None = None) -> None:
            if child_name is None and ctx.current_node is node:
                ctx.current_node = only
                child_process(record)
                # not restored in a finally: after an exception current_node names the failing node
                ctx.current_node = node
            else:
                generic(record, child_name)
        return forward

    def node_entry(self) -> Optional[Callable[[Any, Any, int, Any], None]]:
        """The fused chain the current node heads (streams/engine/fusion.py), None when it
        cannot head one: a stage operator called as a node takes this as its stage, so that a
        parent's `node_stage` reaching it calls the same stage (one copy of the operator's state
        per task, however its records come)."""
        node = self.current_node
        chains = self._engine.chains
        if node is None or not chains.can_start(node):
            return None
        return chains.entry(node)

    def node_stage(self) -> Callable[[Any, Any, int, Any], None]:
        """`node_forward` as a stage, `stage(key, value, timestamp, headers)`, for a processor to
        keep from init(): where the current node's only child starts a fused chain
        (streams/engine/fusion.py) and this node is current, the chain is called directly, with
        no Record made; otherwise a Record goes through `node_forward`. Either way it behaves
        exactly like `forward`."""
        node = self.current_node
        via_record = as_records(self.node_forward())
        only = node.only_child if node is not None else None
        chains = self._engine.chains
        if only is None or not chains.can_start(only):
            return via_record
        ctx = self
        entry: Any = None

        def to_chain(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            nonlocal entry
            if ctx.current_node is node:
                if entry is None:
                    entry = chains.entry(only)  # at the first use: the chain's processors are initialised
                ctx.current_node = only
                entry(key, value, timestamp, headers)
                # not restored in a finally: after an exception current_node names the failing node
                ctx.current_node = node
            else:
                via_record(key, value, timestamp, headers)
        return to_chain

    def schedule(self, interval_ms: int, punctuation_type: PunctuationType,
                 callback: Callable[[int], None]) -> Cancellable:
        if isinstance(interval_ms, bool) or not isinstance(interval_ms, int) or interval_ms < 1:
            raise ProcessingError(f"punctuation interval must be a positive int of ms, got {interval_ms!r}")
        if not callable(callback):
            raise ProcessingError(f"punctuation callback must be callable, got {callback!r}")
        node = self.current_node
        if node is None:
            raise ProcessingError("schedule() must be called from a processor (init, process or punctuate)")
        return self._engine.schedule(node, interval_ms, punctuation_type, callback)

    def get_state_store(self, name: str) -> Any:
        node = self.current_node
        if node is None:
            raise StoreAccessError(f"get_state_store({name!r}) called outside of a processor")
        global_store = self._engine.global_stores.get(name)
        if global_store is not None:  # any processor may read a global store, never write it (Kafka)
            return ReadOnlyGlobalStore(global_store)
        if name not in node.store_names:
            if name in self._engine.stores:
                raise StoreAccessError(
                    f"processor {node.name!r} has no access to state store {name!r}: the store is not "
                    f"connected to it (add_state_store(builder, {node.name!r}) or "
                    "connect_processor_and_state_stores)")
            raise StoreAccessError(f"processor {node.name!r}: unknown state store {name!r}")
        return self._engine.stores[name]

    def commit(self) -> None:
        self.commit_requested = True

    def processor_metadata_for_key(self, key: str) -> Optional[int]:
        """The task's processor metadata value of `key` (streams/engine/processor_metadata.py), None if unset."""
        return self._engine.processor_metadata.get(key)

    def add_processor_metadata_key_value(self, key: str, value: int) -> None:
        """Set the task's processor metadata value of `key`; the next commit takes it along."""
        self._engine.processor_metadata.put(key, value)

    def write_timestamp(self) -> int:
        """The timestamp of a store write that gives none (every store of the task has this as
        its timestamp supplier): the current record's, a punctuation's time in a punctuation, as
        Kafka's change logging and caching take `context.timestamp()`; the wall clock outside of
        both (a write from init())."""
        t = self.record_timestamp
        return t if t >= 0 else wall_clock_ms()

    def in_record_context(self, process: Callable[[Record], None]) -> Callable[[Record], None]:
        """`process` with the record's timestamp as `record_timestamp` while it runs (a node
        with stores: what it writes without a timestamp is stamped with its record's)."""
        ctx = self

        def process_in_record_context(record: Record) -> None:
            previous = ctx.record_timestamp
            ctx.record_timestamp = record.timestamp
            try:
                process(record)
            finally:
                ctx.record_timestamp = previous
        return process_in_record_context

    def record_metadata(self) -> RecordMetadata | None:
        meta = self.metadata
        return None if meta is None else RecordMetadata._make(meta)

    def scoped(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Wrap `fn` to run as the current node later (used by cache flush listeners)."""
        node = self.current_node
        if node is None:
            raise ProcessingError("scoped() must be called from a processor")
        ctx = self

        def call(*args: Any) -> Any:  # once per flushed cache entry
            # the record context is the flushed entry's: the caching store set it (and puts back
            # the writer's after the flush)
            prev_node = ctx.current_node
            ctx.current_node = node
            try:
                return fn(*args)
            finally:
                ctx.current_node = prev_node
        return call
