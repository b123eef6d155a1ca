"""Operator-independent join logic of the DSL, one module per join family (Kafka's KStreamKStreamJoin,
KStreamKTableJoinProcessor, KTableKTable*Join, foreign-key join processors). Each module's docstring
says what the operator must call; the operators only wire these to records and stores."""
