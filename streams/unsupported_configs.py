"""Kafka Streams settings Eddy does not implement, in one place: the backends keep them from the
clients (streams.backends.STREAMS_CONFIG_KEYS), StreamsConfig.parse checks them here."""

from __future__ import annotations

import logging
from typing import Any, Mapping

from streams.errors import ConfigError

log = logging.getLogger(__name__)

#: Settings whose other values would change what the app does, with the values that ask for
#: Kafka's default behaviour (which Eddy has; strings compared case-insensitively): any other
#: value is a ConfigError rather than an app quietly running without what it counts on.
CHANGING = {
    "processor.wrapper.class": {"org.apache.kafka.streams.processor.internals.noopprocessorwrapper"},
    "default.client.supplier": {"org.apache.kafka.streams.processor.internals.defaultkafkaclientsupplier"},
    "group.protocol": {"classic"},
    "task.assignor.class": set(),
}
#: Settings that only tune what Eddy does not have (Kafka's task assignor, rack awareness, metrics
#: recording, rolling upgrades): accepted, with a warning that they have no effect.
NO_EFFECT = (
    "acceptable.recovery.lag", "max.warmup.replicas", "probing.rebalance.interval.ms",
    "rack.aware.assignment.strategy", "rack.aware.assignment.tags", "rack.aware.assignment.traffic_cost",
    "rack.aware.assignment.non_overlap_cost", "upgrade.from", "built.in.metrics.version", "metrics.recording.level",
    "metrics.num.samples", "metrics.sample.window.ms", "log.summary.interval.ms", "window.size.ms",
)
KEYS = frozenset(CHANGING) | frozenset(NO_EFFECT)


def unsupported_configs(raw: Mapping[str, Any]) -> None:
    """ConfigError for a setting of CHANGING set to ask for something other than Kafka's default;
    a warning for each setting of NO_EFFECT that is set."""
    for key, accepted in CHANGING.items():
        value = raw.get(key)
        if value is None:
            continue
        if (value.strip().lower() if isinstance(value, str) else value) not in accepted:
            default = " or ".join(sorted(map(str, accepted))) or "unset"
            raise ConfigError(f"config {key!r} = {value!r} is not supported by Eddy (it implements Kafka's default: "
                              f"{default}); remove it or set the default")
    for key in NO_EFFECT:
        if key in raw:
            log.warning("config %r is a Kafka Streams setting Eddy does not implement: it has no effect", key)
