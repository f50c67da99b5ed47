"""The SQL the Debezium decoders generate: each input is decoded once per value."""

from changeflow.debezium import types as T


def test_a_decimal_decodes_its_bytes_once() -> None:
    # Pasting the bytes' decoding into every place the formula uses it made Spark
    # decode each value about 150 times (0.4 ms per event in the Debezium benchmark).
    sql = T.decode_sql("e.after['amount']", T.FieldType("NUMBER", "decimal", scale=2))
    assert sql.count("try_to_binary") == 1
    assert sql.count("e.after['amount']") == 1


def test_a_variable_scale_decimal_reads_its_json_once_per_field() -> None:
    sql = T.decode_sql("raw", T.FieldType("NUMBER", "varscale"))
    assert sql.count("get_json_object(raw, '$.value')") == 1
    assert sql.count("get_json_object(raw, '$.scale')") == 1
