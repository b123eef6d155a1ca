"""The exactly-once DSL campaign's output check (`campaign._compare_dsl_output`): what a crash
may change by Kafka's restart rule (a replay counting records the run without a crash dropped
as late) passes, anything else is named."""

from __future__ import annotations

import collections

from campaign import _compare_dsl_output, _dsl_app
from streams import Window, Windowed, serdes

dsl_app = _dsl_app()
START = dsl_app.START_MS
I64 = serdes.INT64
WINDOWED = serdes.time_windowed(dsl_app.S, dsl_app.WINDOW_MS)
SESSIONED = serdes.session_windowed(dsl_app.S)

# u1: three records in window [START, START + 1000), the last one too late without a crash;
# one session of two records, the late record outside it
EVENTS = [(1, b"u1", b"p", START + 10), (1, b"u1", b"p", START + 20), (1, b"u1", b"p", START + 3_000),
          (1, b"u1", b"p", START + 500)]
WINDOW = WINDOWED.serialize(Windowed("u1", Window(START, START + dsl_app.WINDOW_MS)))
LATER = WINDOWED.serialize(Windowed("u1", Window(START + 3_000, START + 3_000 + dsl_app.WINDOW_MS)))
SESSION = SESSIONED.serialize(Windowed("u1", Window(START + 10, START + 20)))
LAST_SESSION = SESSIONED.serialize(Windowed("u1", Window(START + 3_000, START + 3_000)))
LATE_SESSION = SESSIONED.serialize(Windowed("u1", Window(START + 500, START + 500)))
FINALS = collections.Counter({(WINDOW, I64.serialize(2)): 1, (LATER, I64.serialize(1)): 1})
SESSIONS = {SESSION: I64.serialize(2), LAST_SESSION: I64.serialize(1)}
GROUPS = {b"g1": I64.serialize(3)}


def check(finals: list[tuple[bytes, int]], sessions: list[tuple[bytes, int | None]]) -> list[str]:
    out = {dsl_app.FINALS: [(1, k, I64.serialize(v)) for k, v in finals],
           dsl_app.SESSIONS: [(1, k, None if v is None else I64.serialize(v)) for k, v in sessions],
           dsl_app.GROUP_COUNTS: [(0, b"g1", I64.serialize(3))]}
    return _compare_dsl_output(out, FINALS, SESSIONS, GROUPS, EVENTS)


AS_WITHOUT_A_CRASH = [(SESSION, 2), (LAST_SESSION, 1)]


def test_the_output_of_a_run_without_a_crash_passes():
    assert check([(WINDOW, 2), (LATER, 1)], AS_WITHOUT_A_CRASH) == []


def test_a_further_final_counting_a_late_record_again_passes():
    assert check([(WINDOW, 2), (WINDOW, 3), (LATER, 1)], AS_WITHOUT_A_CRASH) == []
    assert check([(WINDOW, 3), (LATER, 1)], AS_WITHOUT_A_CRASH) == []


def test_a_repeated_final_is_a_duplicate():
    found = check([(WINDOW, 2), (WINDOW, 2), (LATER, 1)], AS_WITHOUT_A_CRASH)
    assert len(found) == 1 and found[0].startswith("duplicate-final: 1 windows")


def test_a_final_above_the_windows_records_or_below_the_expected_is_wrong():
    assert check([(WINDOW, 4), (LATER, 1)], AS_WITHOUT_A_CRASH)[0].startswith("wrong-finals: 1 expected results missing")
    assert check([(WINDOW, 1), (LATER, 1)], AS_WITHOUT_A_CRASH)[0].startswith("wrong-finals")
    found = check([(WINDOW, 3), (WINDOW, 2), (LATER, 1)], AS_WITHOUT_A_CRASH)  # a final going back
    assert [f.split(":")[0] for f in found] == ["duplicate-final", "wrong-finals"]
    assert check([(LATER, 1)], AS_WITHOUT_A_CRASH)[0].startswith("wrong-finals: 1 expected results missing")


def test_sessions_holding_a_late_record_counted_again_pass():
    assert check([(WINDOW, 2), (LATER, 1)], AS_WITHOUT_A_CRASH + [(LATE_SESSION, 1)]) == []


def test_sessions_that_differ_with_no_more_records_are_wrong():
    found = check([(WINDOW, 2), (LATER, 1)], [(SESSION, 1), (LAST_SESSION, 1)])
    assert len(found) == 1 and found[0].startswith("wrong-sessions: 1 keys end differently")
    # more records in the user's sessions than the user has
    found = check([(WINDOW, 2), (LATER, 1)], AS_WITHOUT_A_CRASH + [(LATE_SESSION, 2)])
    assert len(found) == 1 and found[0].startswith("wrong-sessions: 1 keys end differently")
