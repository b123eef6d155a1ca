"""Every record a store logs carries a time taken from the records processed (Kafka's change
logging stamps a write with context.timestamp(): the record's, or a punctuation's), never the
wall clock. Eddy's driver only, over the random scenarios of the differential harness
(vocabulary.py): their input timestamps are small, the wall clock is not, so a write logged
without its record's time shows at once.

The one exception is Kafka's too: a suppression buffer logs at commit with no timestamp
(InMemoryTimeOrderedKeyValueChangeBuffer.logValue/logTombstone send null, so the producer stamps
the wall clock); the vocabulary's suppress steps are unnamed, so their buffers are
KTABLE-SUPPRESS-STATE-STORE-*."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import vocabulary  # noqa: E402

SEEDS = range(0, 250)  # about 40% of them joins


@pytest.mark.parametrize("seed", SEEDS)
def test_changelog_records_carry_processed_records_time(seed: int, tmp_path: Path) -> None:
    scenario = vocabulary.generate(seed)
    history: list = []
    vocabulary.run_eddy(scenario, str(tmp_path), history=history)
    latest = max(record[2] for record in scenario["records"])
    logged = [(r.topic, r.timestamp) for r in history
              if r.topic.endswith("-changelog") and "-KTABLE-SUPPRESS-STATE-STORE-" not in r.topic]
    wrong = [(topic, ts) for topic, ts in logged if not 0 <= ts <= latest]
    assert not wrong, (f"seed {seed} ({scenario['family']}): changelog records stamped past the latest "
                       f"input time {latest}: {wrong[:5]}\n ops {scenario['ops']}")
