"""Kafka's BOOLEAN config values, parsed by one rule in every layer (eddy.config_values)."""

import pytest

from eddy.config_values import parse_bool
from replication.cluster import LocalCluster
from replication.errors import InvalidConfigurationError
from streams.dsl.naming import ENSURE_EXPLICIT_NAMING, ensure_explicit_naming
from streams.errors import ConfigError


@pytest.mark.parametrize("value,parsed", [
    (True, True), (False, False), ("true", True), ("FALSE", False), (" True\n", True), ("\tfalse ", False),
])
def test_booleans_and_their_strings_in_any_case_with_blanks(value, parsed):
    assert parse_bool(value) is parsed


@pytest.mark.parametrize("value", ["yes", "1", "0", "", "tru", "true false", 1, 0, None, 1.0, b"true"])
def test_anything_else_is_not_a_boolean(value):
    assert parse_bool(value) is None


def test_each_layer_names_the_config_it_refuses(tmp_path):
    assert ensure_explicit_naming({ENSURE_EXPLICIT_NAMING: " TRUE "}) is True
    with pytest.raises(ConfigError, match="ensure.explicit.internal.resource.naming.*'on'"):
        ensure_explicit_naming({ENSURE_EXPLICIT_NAMING: "on"})
    # the cluster's own setting used to be read as false when it was not "true"
    with pytest.raises(InvalidConfigurationError, match="unclean.leader.election.enable.*'yes'") as e:
        LocalCluster(tmp_path / "c", num_brokers=1, config={"unclean.leader.election.enable": "yes"}).start()
    assert e.value.key == "unclean.leader.election.enable"
