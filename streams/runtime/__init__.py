"""The topology runtime: tasks, threads and the App (see each module's doc)."""

from streams.runtime.app import App, AppState, StreamThreadExceptionResponse
from streams.runtime.collector import RecordCollector
from streams.runtime.config import AT_LEAST_ONCE, EXACTLY_ONCE_V2, StreamsConfig
from streams.runtime.errors import (CommitTimeoutError, CoPartitioningError, InvalidQueryArgumentError,
                                    InvalidTimeoutError, MissingSourceTopicError, MissingValidOffsetError, ProductionError,
                                    RuntimeStateError, TaskMigratedError, ThreadRemovalTimeoutError)
from streams.runtime.lags import LagInfo
from streams.runtime.metadata import TaskMetadata, ThreadMetadata
from streams.runtime.streams_metadata import HostInfo, KeyQueryMetadata, StreamsMetadata
from streams.runtime.queries import ReadOnlyKeyValueView, ReadOnlySessionView, ReadOnlyWindowView
from streams.runtime.standby import StandbyTask
from streams.runtime.task import StreamTask, TaskState
from streams.runtime.task_manager import TaskManager
from streams.runtime.thread import SimulatedCrash, StreamThread, ThreadState

__all__ = ["App", "AppState", "StreamThreadExceptionResponse", "RecordCollector", "StreamsConfig",
           "AT_LEAST_ONCE", "EXACTLY_ONCE_V2", "CommitTimeoutError", "CoPartitioningError", "MissingSourceTopicError",
           "MissingValidOffsetError", "InvalidTimeoutError", "ThreadRemovalTimeoutError", "LagInfo",
           "TaskMetadata", "ThreadMetadata", "HostInfo", "KeyQueryMetadata", "StreamsMetadata",
           "InvalidQueryArgumentError",
           "ProductionError", "RuntimeStateError", "TaskMigratedError", "ReadOnlyKeyValueView", "ReadOnlyWindowView", "ReadOnlySessionView",
           "StandbyTask", "StreamTask", "TaskState", "TaskManager", "SimulatedCrash", "StreamThread",
           "ThreadState"]
