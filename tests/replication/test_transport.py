"""The in-process transport: delivery, deferred responses, disconnects and injected faults."""

import threading

import pytest

from replication.errors import TransportError
from replication.transport import FaultPlan, LinkFaults, Transport


def echo(source, body, respond):
    respond(("echo", source, body))


def test_request_is_answered_by_the_destination_handler():
    t = Transport()
    t.register(1, echo)
    assert t.request(0, 1, "hi", timeout_s=1) == ("echo", 0, "hi")


def test_unknown_destination_fails_at_once():
    t = Transport()
    with pytest.raises(TransportError, match="broker 7 is not available"):
        t.request(0, 7, "x", timeout_s=5)


def test_parked_request_fails_when_destination_leaves():
    t = Transport()
    parked = []
    t.register(1, lambda source, body, respond: parked.append(respond))
    errors = []
    done = threading.Event()
    t.send_async(0, 1, "fetch", lambda r, e: (errors.append(e), done.set()))
    assert parked and not done.is_set()
    t.unregister(1)
    assert done.wait(1)
    assert isinstance(errors[0], TransportError)
    parked[0]("late answer")  # a late response after disconnect is ignored
    assert len(errors) == 1


def test_deferred_response_from_another_thread():
    t = Transport()
    t.register(1, lambda source, body, respond: threading.Timer(0.01, respond, ["later"]).start())
    assert t.request(0, 1, "x", timeout_s=2) == "later"


def test_dropped_request_times_out():
    plan = FaultPlan(seed=1)
    plan.set(0, 1, LinkFaults(drop_probability=1.0))
    t = Transport(plan)
    t.register(1, echo)
    with pytest.raises(TransportError, match="timed out"):
        t.request(0, 1, "x", timeout_s=0.05)
    assert t.request(2, 1, "y", timeout_s=1) == ("echo", 2, "y")  # other links unaffected


def test_delayed_requests_arrive_and_reorder_swaps_order():
    plan = FaultPlan(seed=3)
    plan.set(0, 1, LinkFaults(delay_ms=5))
    t = Transport(plan)
    t.register(1, echo)
    assert t.request(0, 1, "d", timeout_s=2) == ("echo", 0, "d")

    seen = []
    t.register(2, lambda source, body, respond: (seen.append(body), respond(body)))
    plan.set(0, 2, LinkFaults(reorder_probability=1.0))
    results = []
    t.send_async(0, 2, "first", lambda r, e: results.append(r))
    assert seen == []  # held back
    t.send_async(0, 2, "second", lambda r, e: results.append(r))
    assert seen == ["second", "first"]
    assert results == ["second", "first"]


def test_handler_exception_becomes_transport_error():
    t = Transport()

    def broken(source, body, respond):
        raise RuntimeError("boom")

    t.register(1, broken)
    with pytest.raises(TransportError, match="boom"):
        t.request(0, 1, "x", timeout_s=1)
