"""Where standby tasks go: `num.standby.replicas` copies of each stateful task, on instances
other than the one running it, chosen the same way by every instance.

Kafka Streams decides this in its group assignor. confluent-kafka cannot plug an assignor, so
each instance reads the group's membership (DescribeConsumerGroups: every member's client id
and assigned partitions), finds which instance runs each task, and ranks the other instances
per task by a hash of (task, process id) - rendezvous hashing: every instance computes the same
ranking without talking to the others, and an instance joining or leaving moves only the
standbys it gains or loses. Members are grouped into instances by the process id the runtime
puts in each stream thread's consumer client id (`consumer_client_id`).
"""

from __future__ import annotations

import zlib
from typing import Iterable, Mapping, Optional

from state.task_id import TaskId

_THREAD_MARK = "-StreamThread-"


def consumer_client_id(application_id: str, process_id: str, thread_index: int) -> str:
    """The main consumer's client id, as Kafka Streams names it: `<app>-<process>-StreamThread-<n>-consumer`."""
    return f"{application_id}-{process_id}{_THREAD_MARK}{thread_index}-consumer"


def admin_client_id(application_id: str) -> str:
    """The instance's admin client's id (Kafka Streams': `<client id>-admin`)."""
    return f"{application_id}-admin"


def process_of_client(application_id: str, client_id: str) -> Optional[str]:
    """The process id in a stream thread's consumer client id; None for any other client."""
    prefix = f"{application_id}-"
    if not client_id.startswith(prefix) or _THREAD_MARK not in client_id:
        return None
    process = client_id[len(prefix):client_id.rindex(_THREAD_MARK)]
    return process or None


def owners_from_members(application_id: str, members: Iterable, task_of_partition: Mapping[tuple[str, int], TaskId]
                        ) -> tuple[set[str], dict[TaskId, str]]:
    """(every instance's process id, the process running each task) from the members of a
    consumer group description (objects with `client_id` and `assignment.topic_partitions`)."""
    processes: set[str] = set()
    owners: dict[TaskId, str] = {}
    for member in members:
        process = process_of_client(application_id, member.client_id)
        if process is None:
            continue
        processes.add(process)
        for tp in member.assignment.topic_partitions:
            task = task_of_partition.get((tp.topic, tp.partition))
            if task is not None:
                owners[task] = process
    return processes, owners


def standbys_from_members(application_id: str, members: Iterable, task_of_partition: Mapping[tuple[str, int], TaskId],
                          replicas: int) -> tuple[set[str], dict[str, set[TaskId]]]:
    """(every instance's process id, the standby tasks of each) from a consumer group
    description's members: who runs each stateful task (`task_of_partition`: their input
    partitions), then `place_standbys` of every one of them."""
    processes, owners = owners_from_members(application_id, members, task_of_partition)
    stateful = sorted(set(task_of_partition.values()), key=str)
    return processes, place_standbys(stateful, processes, owners, replicas)


def _rank(task: TaskId, process: str) -> int:
    return zlib.crc32(f"{task}|{process}".encode())


def place_standbys(stateful_tasks: Iterable[TaskId], processes: set[str], owners: Mapping[TaskId, str],
                   replicas: int) -> dict[str, set[TaskId]]:
    """The standby tasks of each process: for every task, the `replicas` best-ranked processes
    other than its owner (fewer when there are not enough instances)."""
    placement: dict[str, set[TaskId]] = {p: set() for p in processes}
    for task in stateful_tasks:
        owner = owners.get(task)
        candidates = sorted((p for p in processes if p != owner), key=lambda p: (_rank(task, p), p))
        for process in candidates[:replicas]:
            placement[process].add(task)
    return placement
