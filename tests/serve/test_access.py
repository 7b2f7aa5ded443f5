"""--token-limit's ledger on its own: a moving minute of reservations, each changed in place from what it
reserved to what it used (the server-level behaviour is in test_token_limit)."""

from __future__ import annotations

import pytest

from llmcli.serve.config import ServeConfig
from llmcli.serve.errors import ApiError
from llmcli.serve.gate import WINDOW_S, Gate, Need, TokenLedger


def test_a_reservation_counts_for_one_minute_from_its_admission():
    ledger = TokenLedger(50)
    ledger.reserve("k", 30, now=0.0)
    ledger.reserve("k", 15, now=10.0)
    assert ledger.free("k", now=59.9) == 5
    assert ledger.free("k", now=WINDOW_S) == 35  # the first one left the window
    assert ledger.free("k", now=10.0 + WINDOW_S) == 50
    assert ledger.free("other", now=0.0) == 50  # per key


def test_retry_after_is_when_enough_of_the_oldest_reservations_have_left():
    ledger = TokenLedger(50)
    ledger.reserve("k", 30, now=0.0)
    ledger.reserve("k", 15, now=10.0)
    assert ledger.wait_s("k", 20, now=20.0) == 40  # the first reservation's 30 suffice: it leaves at 60
    assert ledger.wait_s("k", 40, now=20.0) == 50  # both must leave: the second at 70


def test_a_refund_stays_in_the_minute_of_its_reservation():
    ledger = TokenLedger(50)
    reservation = ledger.reserve("k", 40, now=0.0)
    reservation.tokens = 12  # what it used, settled at 30 s
    assert ledger.free("k", now=30.0) == 38
    assert ledger.free("k", now=WINDOW_S) == 50  # and it leaves when it would have


def gate(limit: int = 50) -> Gate:
    return Gate(ServeConfig(model_name="", token_limit=limit, parallel=8))


def need(prompt: int, reply: int, exact: bool = False) -> Need:
    return Need(prompt, reply, asked=True, exact=exact)


def test_admission_reserves_and_refuses_what_does_not_fit_with_retry_after():
    g = gate()
    g.admit("k", need(10, 20))
    with pytest.raises(ApiError) as refused:
        g.admit("k", need(1, 20))
    assert refused.value.status == 429 and refused.value.retry_after is not None
    assert (
        "over 50 tokens a minute for this key" in refused.value.message
        and "20 are left" in refused.value.message
    )


def test_a_request_over_the_whole_limit_is_told_the_largest_max_tokens_without_retry_after():
    """From the exact prompt only: an estimate's hint was refused again once the template's tokens
    were counted, so admission leaves it to the exact count (the reservation holds the limit)."""
    g = gate()
    reservation = g.admit("k", need(8, 60))
    assert reservation is not None and reservation.tokens == 50
    refused = g.resize(reservation, need(9, 60, exact=True))
    assert refused is not None and refused.status == 429 and refused.retry_after is None
    assert refused.message.endswith("send max_tokens of at most 41") and refused.param == "max_tokens"
    assert reservation.tokens == 0  # it costs nothing
    assert g.resize(g.admit("k", need(8, 41)), need(9, 41, exact=True)) is None  # the hint fits


def test_the_exact_prompt_resizes_the_reservation_or_voids_it_with_a_429():
    g = gate()
    first = g.admit("k", need(2, 20))
    second = g.admit("k", need(2, 20))
    assert g.resize(first, need(8, 20, exact=True)) is None  # 28 + 22 = 50: fits
    refused = g.resize(second, need(8, 20, exact=True))  # 28 + 28: does not
    assert refused is not None and refused.status == 429 and "its prompt (8)" in refused.message
    assert second is not None and second.tokens == 0 and second.final  # void: it costs nothing
    g.settle(second, 28)  # the cancelled sequence's Outcome comes later: the void stands
    assert second.tokens == 0


def test_a_request_pays_what_it_used_once():
    g = gate()
    reservation = g.admit("k", need(10, 30))
    g.settle(reservation, 14)
    g.settle(reservation, 40)
    assert reservation is not None and reservation.tokens == 14 and reservation.final


def test_one_dropped_before_tokenizing_is_released_and_an_outcome_that_follows_still_pays():
    g = gate()
    reservation = g.admit("k", need(10, 30))
    g.release(reservation)  # closed before the engine said Started: nothing used so far
    assert reservation is not None and reservation.tokens == 0 and not reservation.final
    g.settle(reservation, 13)  # the engine had taken it after all: its cancelled Outcome
    assert reservation.tokens == 13 and reservation.final
