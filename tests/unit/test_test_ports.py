"""The suite's free ports (tests/integration/ports.py): each pytest-xdist worker chooses in a slice of its own,
so that a block one worker has chosen but not yet bound is never chosen by another."""

from __future__ import annotations

from tests.integration.ports import _slice


def test_without_workers_the_whole_range():
    assert _slice(20000, 29000, {}) == (20000, 29000)
    assert _slice(20000, 29000, {"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "1"}) == (20000, 29000)


def test_workers_take_disjoint_slices_inside_the_range():
    slices = [
        _slice(20000, 29000, {"PYTEST_XDIST_WORKER": f"gw{n}", "PYTEST_XDIST_WORKER_COUNT": "3"}) for n in range(3)
    ]
    assert slices == [(20000, 23000), (23000, 26000), (26000, 29000)]
