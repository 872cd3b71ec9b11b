"""The wire target of ``bench.fuzz`` on a few hundred mutated fleet messages: through the decoder and the learner's
inbox, every one is accepted or refused with the documented ``TransportError`` (a counted refusal in the inbox),
none is delivered with a number that is not finite or an image that is a path, and memory stays within one
message's pixel budget. ``python -m bench.fuzz`` runs 20,000."""

from __future__ import annotations

import random

from bench.fuzz.wire import mutate, valid_messages, wire_fuzz, within_budget
from train.wire import decode_message


def test_the_valid_messages_decode_and_the_mutator_changes_them():
    rng = random.Random(3)
    for kind, data in valid_messages():
        decode_message(data)
        assert sum(mutate(data, rng) != data for _ in range(20)) >= 15, kind


def test_a_few_hundred_mutated_fleet_messages_raise_nothing_but_the_documented_error():
    result = wire_fuzz(600, seed=7)
    assert result["messages"] == 600 and result["refused"] > 300 and result["accepted"] > 20, result
    assert result["errors"] == 0, result["error_kinds"]
    assert result["bad_accepted"] == 0, result["bad_accepted_kinds"]
    assert within_budget(result), result["rss_mib"]
    assert sum(result["inbox_counts"].values()) > 300  # the inbox counted its refusals
