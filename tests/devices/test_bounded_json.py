"""devices.bounded_json: JSON that would make Python's decoder raise RecursionError or its integer limit's
ValueError, or that is too big to read, is refused with a message naming where and what, before decoding."""

from __future__ import annotations

import json

import pytest

from devices import bounded_json
from devices.bounded_json import MAX_DEPTH, MAX_NUMBER_CHARS, check_json, loads_bounded, read_bounded


def test_plain_json_loads_as_json_loads_does():
    text = json.dumps([{"img": "a.png", "bbox": [1, 2.5, -3e4, 1E+5], "s": "[[[[ 99999 , \\\" ]]"}, None, True])
    assert loads_bounded(text) == json.loads(text)
    assert loads_bounded("[" * MAX_DEPTH + "]" * MAX_DEPTH) == json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert loads_bounded("1" * MAX_NUMBER_CHARS) == int("1" * MAX_NUMBER_CHARS)
    with pytest.raises(json.JSONDecodeError):  # grammar errors stay what they were
        loads_bounded('{"a": [1, 2')


@pytest.mark.parametrize("text, where, what", [
    ("[" * 100_000 + "]" * 100_000, "record 0 (line 1)", "nested more than 64 levels deep (MAX_DEPTH)"),
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "record 0 (line 1)", "nested more than 64"),
    ('[{"a": 1},\n {"b": {"c": ' + "[" * 100 + "]" * 100 + "}}]", "record 1 (line 2)", "nested more than 64"),
    ('{"a": [' + "9" * 5000 + "]}", "line 1", "a number of 5000 characters"),
    ("[1,\n2,\n" + "1." + "0" * 5000 + "]", "record 2 (line 3)", "a number of 5002 characters"),
    ("[1, -" + "1" * 4000 + "]", "record 1 (line 1)", "a number of 4001 characters"),  # under CPython's 4300
])
def test_beyond_the_limits_is_a_value_error_naming_where(text, where, what):
    with pytest.raises(ValueError) as info:
        loads_bounded(text)
    assert not isinstance(info.value, json.JSONDecodeError)
    assert str(info.value).startswith(f"{where} ") and what in str(info.value), str(info.value)
    assert check_json(text) == str(info.value)


def test_strings_hide_nothing_and_rows_count_from_their_line():
    assert check_json(json.dumps({"s": "[" * 1000 + "9" * 1000})) is None  # brackets and digits inside a string
    assert check_json('["unterminated [[[[') is None  # left to the decoder to report
    assert check_json("[" * 70, first_line=40, records=False).startswith("line 40 is nested")


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text("[" + "1, " * 100 + "1]")
    assert read_bounded(path) == path.read_text()
    monkeypatch.setattr(bounded_json, "MAX_FILE_BYTES", 50)
    monkeypatch.setattr(type(path), "read_text", lambda *a, **k: pytest.fail("read a file over the limit"))
    with pytest.raises(ValueError, match=r"big.json is 303 bytes, more than 50 \(MAX_FILE_BYTES\); split it"):
        read_bounded(path)
