"""topology.optimization (Kafka's StreamsConfig.TOPOLOGY_OPTIMIZATION_CONFIG): its values and
their parsing, read by StreamsBuilder.build(config) (which applies them) and by the runtime's
config (which says which of those asked for the topology it runs did not apply)."""

from __future__ import annotations

from typing import Any, Mapping

from streams.errors import ConfigError

#: topology.optimization's values (Kafka's StreamsConfig): "none", "all", or a comma-separated
#: list of these names.
NO_OPTIMIZATION, OPTIMIZE = "none", "all"
TOPOLOGY_OPTIMIZATIONS = ("reuse.ktable.source.topics", "merge.repartition.topics", "single.store.self.join")


def topology_optimizations(raw: Mapping[str, Any]) -> frozenset:
    """The optimizations topology.optimization names (Kafka's rules: "none" or "all" alone, else
    known names), or ConfigError naming what is wrong."""
    value = raw.get("topology.optimization", NO_OPTIMIZATION)
    if not isinstance(value, str):
        raise ConfigError(f"config 'topology.optimization' must be a string, got {value!r}")
    names = [name.strip() for name in value.split(",")]
    if names == [NO_OPTIMIZATION]:
        return frozenset()
    if names == [OPTIMIZE]:
        return frozenset(TOPOLOGY_OPTIMIZATIONS)
    unknown = [name for name in names if name not in TOPOLOGY_OPTIMIZATIONS]
    if unknown:
        alone = [name for name in unknown if name in (NO_OPTIMIZATION, OPTIMIZE)]
        detail = (f"{alone[0]!r} cannot be combined with other values" if alone
                  else f"unknown optimization {unknown[0]!r}")
        raise ConfigError(f"config 'topology.optimization': {detail}, got {value!r}; expected "
                          f"{NO_OPTIMIZATION!r}, {OPTIMIZE!r} or a comma-separated list of {TOPOLOGY_OPTIMIZATIONS}")
    return frozenset(names)


#: the optimizations' names, for the code that applies them (StreamsBuilder.build(config))
REUSE_KTABLE_SOURCE_TOPICS, MERGE_REPARTITION_TOPICS, SINGLE_STORE_SELF_JOIN = TOPOLOGY_OPTIMIZATIONS
