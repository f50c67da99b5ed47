"""The SQL the Debezium decoders generate: code-generated functions only, steps apart."""

import pytest

from changeflow.debezium import types as T

CODECS = ["int", "bool", "double", "string", "bytes", "hex", "base64url", "decimal_text",
          "date", "ts_ms", "ts_us", "ts_ns", "zoned", "decimal", "varscale"]


@pytest.mark.parametrize("codec", CODECS)
def test_no_decoder_uses_a_lambda(codec: str) -> None:
    # Spark runs an operator holding a lambda (transform, filter, ...) row by row
    # through interpreted expressions: the whole projection loses generated code.
    sql = T.decode_sql("raw", T.FieldType("NUMBER", codec, scale=2))
    assert "->" not in sql
    assert "transform(" not in sql and "filter(" not in sql


def test_a_decimal_is_decoded_in_steps_that_read_their_input_once() -> None:
    # The capture computes each step as a column (images.with_decimals): the bytes
    # are decoded once per value, however often the later steps use them.
    ft = T.FieldType("NUMBER", "decimal", scale=2)
    assert T.decimal_hex_sql("raw", ft).count("raw") == 1
    assert T.decimal_scale_sql("raw", ft) == "2"
    var = T.FieldType("NUMBER", "varscale")
    assert T.decimal_hex_sql("raw", var).count("get_json_object(raw, '$.value')") == 1
    assert T.decimal_scale_sql("raw", var).count("get_json_object(raw, '$.scale')") == 1
    assert "try_to_binary" not in T.decimal_digits_sql("h")
    assert "try_to_binary" not in T.decimal_value_sql("d", "s")


def test_a_scale_beyond_ten_decimals_refuses_what_it_cannot_keep() -> None:
    sql = T.decimal_value_sql("d", "12")
    assert "endswith(d, '00')" in sql  # only values whose last two digits are 0 fit
    assert T.decimal_value_sql("d", "2") == "try_cast(concat(d, 'E-2') as decimal(38,10))"
