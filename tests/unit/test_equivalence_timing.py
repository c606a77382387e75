"""The equivalence harness's timing rule: a VC side many times and many seconds slower than the direct
side is a difference; load noise is not."""

from __future__ import annotations

import pytest

from tests.integration.equivalence import SLOWDOWN_FACTOR, SLOWDOWN_SLACK, timing_verdict


def test_the_librdkafka_0118_slowdown_fails_with_both_times():
    # 0118_commit_rebalance, KIP-848: 10 s directly, 312 s through a VC answering Metadata with an error.
    message = timing_verdict(10.0, 312.0)
    assert message is not None
    assert "312.0 s" in message and "10.0 s" in message and "31.2x" in message and "+302.0 s" in message


@pytest.mark.parametrize(
    ("direct_s", "vc_s"),
    [
        (10.0, 19.0),  # under 2x: a busy proxy on a loaded machine
        (0.5, 4.0),  # 8x, but only 3.5 s more: the slack keeps a short scenario's missed heartbeat noise
        (3.0, 17.9),  # ~6x and just under the slack: one or two 6 s session timeouts on the VC side
        (30.0, 119.0),  # +89 s, but under 4x of a long scenario
        (20.0, 5.0),  # the VC side faster
        (0.0, 0.0),
    ],
)
def test_noise_passes(direct_s, vc_s):
    assert timing_verdict(direct_s, vc_s) is None


@pytest.mark.parametrize(
    ("direct_s", "vc_s"),
    [
        (10.0, 41.0),  # just over 4x and over the slack
        (3.0, 18.1),  # just over the slack, well over 4x
        (0.0, 15.1),  # an instant direct side
        (2.0, 89.0),  # a wait that nearly ran out its 90 s deadline
    ],
)
def test_a_slowdown_past_both_bounds_fails(direct_s, vc_s):
    message = timing_verdict(direct_s, vc_s)
    assert message is not None and message.startswith("timing: the VC side took")


def test_both_bounds_are_needed():
    small = SLOWDOWN_SLACK / (SLOWDOWN_FACTOR * 2)  # a direct time whose factor bound sits well under the slack
    assert timing_verdict(small, small * SLOWDOWN_FACTOR * 1.5) is None  # over the factor, under the slack
    assert timing_verdict(100.0, 100.0 + SLOWDOWN_SLACK * 2) is None  # over the slack, under the factor
    assert timing_verdict(100.0, 100.0 * SLOWDOWN_FACTOR + 1) is not None  # over both
