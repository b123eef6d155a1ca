"""The controller hands partition states to each broker in the order it made them, even when
many threads change states at once (issue 20, item 1a)."""

import random
import sys
import threading
from collections import defaultdict

from replication.controller import Controller
from replication.protocol import TopicPartition


def test_concurrent_changes_reach_every_broker_in_partition_epoch_order(tmp_path):
    controller = Controller(tmp_path, [0, 1, 2])
    seen: dict[tuple[int, TopicPartition], list[int]] = defaultdict(list)
    seen_lock = threading.Lock()

    def listener(broker_id, tp, state, info):
        sum(range(20000))  # a broker applying a state takes a while: widen the delivery window
        with seen_lock:
            seen[(broker_id, tp)].append(state.partition_epoch)

    for b in (0, 1, 2):
        controller.register_listener(b, listener)
        controller.broker_started(b)
    controller.create_topic("t", 4, 3)
    tps = [TopicPartition("t", p) for p in range(4)]

    def isr_changer(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(60):
            tp = rng.choice(tps)
            state = controller.partition_state(tp)
            if state.leader < 0:
                continue
            others = [b for b in state.replicas if b != state.leader and b in controller.live_brokers]
            new_isr = [state.leader] + [b for b in others if rng.random() < 0.5]
            controller.alter_partition(tp, state.leader, state.leader_epoch, state.partition_epoch, new_isr)

    def broker_bouncer() -> None:
        for _ in range(10):
            controller.broker_stopped(2)
            controller.broker_started(2)

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: provoke interleavings
    try:
        threads = [threading.Thread(target=isr_changer, args=(s,)) for s in range(4)]
        threads.append(threading.Thread(target=broker_bouncer))
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(old_interval)
    assert not any(t.is_alive() for t in threads)
    assert sum(len(v) for v in seen.values()) > 150
    for (broker, tp), epochs in seen.items():
        regressions = [(a, b) for a, b in zip(epochs, epochs[1:], strict=False) if b < a]
        assert not regressions, f"broker {broker} got {tp} states out of order: {regressions[:5]}"
    for tp in tps:  # the last state each live replica got is the controller's
        final = controller.partition_state(tp).partition_epoch
        for b in controller.live_brokers:
            assert seen[(b, tp)][-1] == final
