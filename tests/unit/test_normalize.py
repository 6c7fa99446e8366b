from __future__ import annotations

import hashlib
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_crashpoints import args_hash
from pytest_crashpoints.errors import ArgumentsError
from pytest_crashpoints.ledger import canonical_json, normalize_args

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


def test_canonical_json_sorts_keys_and_has_no_whitespace() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": None, "c": "é"}]}) == (
        '{"a":[1,{"c":"é","d":null}],"b":1}'
    )


def test_hash_is_sha256_of_utf8_canonical_json() -> None:
    expected = hashlib.sha256('{"to":"zoë@example.com"}'.encode()).hexdigest()
    assert args_hash({"to": "zoë@example.com"}) == expected


def test_same_meaning_same_hash() -> None:
    assert args_hash({"a": 1, "b": (1, 2)}) == args_hash({"b": [1, 2], "a": 1.0})


# Up to five arguments, each a JSON tree of up to 20 leaves: most examples still have keys to
# reorder and values nested several levels deep, at about half the cost of dictionaries of any
# size (the cost is all in generating examples, none in the hash).
@given(st.dictionaries(st.text(), json_values, max_size=5))
def test_hash_ignores_key_order(args: dict[str, object]) -> None:
    reordered = dict(reversed(list(args.items())))
    assert args_hash(args) == args_hash(reordered)
    assert normalize_args(normalize_args(args)) == normalize_args(args)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"amount": math.nan}, "args.amount is nan"),
        ({"amount": math.inf}, "args.amount is inf"),
        ({"when": object()}, "args.when is <object"),
        ({"nested": {1: "x"}}, "args.nested has the key 1"),
        ({"items": [1, {2, 3}]}, "args.items[1]"),
    ],
)
def test_bad_arguments_name_the_bad_part(args: dict[str, object], fragment: str) -> None:
    with pytest.raises(ArgumentsError) as info:
        args_hash(args)
    assert fragment in str(info.value)


def test_arguments_must_be_a_mapping() -> None:
    with pytest.raises(ArgumentsError, match="must be a mapping"):
        normalize_args([("a", 1)])  # type: ignore[arg-type]
