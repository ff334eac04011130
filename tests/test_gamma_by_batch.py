"""The draft-length-by-batch-size table (cos/vllm_backend/gamma_by_batch.py): checked before vLLM starts,
and built from measured speeds. Pure functions: no vLLM needed (tests/vllm runs the table in vLLM)."""

from __future__ import annotations

import pytest

from cos.vllm_backend.gamma_by_batch import best_gamma_table, check_table


def test_a_good_table_passes_as_vllm_takes_it():
    assert check_table([[1, 1, 3], (2, 4, 1), (5, 7, 0), (8, 256, 2)], gamma=3) == \
        [(1, 1, 3), (2, 4, 1), (5, 7, 0), (8, 256, 2)]


@pytest.mark.parametrize("table,why", [
    ([], "empty"), ([(2, 8, 3)], "start at 1"), ([(1, 4, 3), (3, 8, 1)], "overlap"),
    ([(1, 4, 3), (9, 8, 1)], "first <= last"), ([(1, 8, -1)], "γ >= 0"), ([(1, 8)], r"\(first, last, γ\)"),
    ([(1, 8, 2.5)], "integers"), ([(1, 8, 6)], "raise num_speculative_tokens")])
def test_a_bad_table_names_its_problem(table, why):
    with pytest.raises(ValueError, match=why):
        check_table(table, gamma=5)


def test_each_measured_batch_size_gets_its_fastest_gamma():
    rates = {1: {0: 5.0, 3: 9.0, 5: 8.0}, 8: {0: 20.0, 3: 21.0, 5: 19.0}, 32: {0: 40.0, 3: 30.0, 5: 25.0}}
    assert best_gamma_table(rates) == [(1, 31, 3), (32, 4096, 0)]  # batch 1 and 8 agree: one row


def test_ties_keep_the_shorter_draft_and_rows_cover_every_batch_size():
    table = best_gamma_table({4: {0: 10.0, 2: 10.0}, 1: {0: 5.0, 2: 7.0}})
    assert table == [(1, 3, 2), (4, 4096, 0)]
    assert check_table(table, gamma=2) == table
