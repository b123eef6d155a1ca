"""The DSL's operators, one module per operator family: stateless.py (record-at-a-time
operators), aggregate.py (grouped-stream aggregations), table.py (table operators; table_count.py
holds a grouped table's count in bulk), windowed.py, suppress.py, cogroup.py and the joins."""
