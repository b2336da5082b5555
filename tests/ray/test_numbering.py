"""The numbering of a Ray write job's rows (``datamount.ray.numbering``), without Ray: each task's rows the next
free numbers, the same for every attempt of a task, none once the job is closed."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'datamount[ray]')")

from datamount.ray.numbering import Claim, WriteTasks


def test_tasks_get_the_next_numbers_in_the_order_they_ask_and_the_first_task_s_columns() -> None:
    tasks = WriteTasks()
    assert tasks.claim(3, 10, "columns of 3") == (Claim(0, 10), "columns of 3")
    assert tasks.claim(0, 5, "columns of 0") == (Claim(10, 5), "columns of 3")
    assert tasks.claim(1, 0) == (Claim(15, 0), "columns of 3")
    assert tasks.still_running() == [0, 1, 3]
    for task in (0, 1, 3):
        tasks.ended(task)
    assert tasks.still_running() == []
    assert tasks.all_claims() == {3: Claim(0, 10), 0: Claim(10, 5), 1: Claim(15, 0)}


def test_a_task_run_again_gets_its_numbers_again_and_no_others() -> None:
    tasks = WriteTasks()
    tasks.claim(0, 10)
    tasks.claim(1, 7)
    assert tasks.claim(0, 10) == (Claim(0, 10), None)  # its worker was lost: the same rows, the same numbers
    assert tasks.claim(2, 1) == (Claim(17, 1), None)
    with pytest.raises(ValueError, match=r"write task 1 was run again with 8 rows, not the 7 .* materialize"):
        tasks.claim(1, 8)


def test_a_closed_job_takes_no_claim_and_says_which_tasks_still_run() -> None:
    tasks = WriteTasks()
    tasks.claim(0, 4)
    tasks.claim(1, 4)
    tasks.ended(0)
    tasks.close()
    assert tasks.claim(2, 4) is None
    assert tasks.claim(1, 4) is None
    assert tasks.still_running() == [1]
