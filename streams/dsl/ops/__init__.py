"""The DSL's operators, one module per operator family: stateless.py (record-at-a-time
operators), aggregate.py (grouped-stream aggregations), table.py (table operators)."""
