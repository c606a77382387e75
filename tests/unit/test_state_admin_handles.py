"""The state store's admin clients are destroyed on a caller's thread, never on their own (librdkafka aborts)."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import textwrap

import pytest
from confluent_kafka.admin import AdminClient

from proxy.state.admin_handles import AdminHandles

NOWHERE = {"bootstrap.servers": "127.0.0.1:1", "log_level": 0}  # nothing listens on port 1


def test_a_client_is_let_go_once_nothing_else_refers_to_it():
    handles = AdminHandles(lambda: AdminClient(NOWHERE))
    first, second = handles.new(), handles.new()
    assert handles.sweep() == 2
    del first
    assert handles.sweep() == 1

    class Frame:  # a reference cycle, as a traceback and its frames make one
        pass

    cycle = Frame()
    cycle.itself, cycle.client = cycle, second
    del cycle, second
    assert handles.sweep() == 1  # garbage, but only the collector knows: still held
    gc.collect()
    assert handles.sweep() == 0


def test_the_kept_client_is_one_for_every_periodic_call_and_let_go_only_at_release():
    made = []
    handles = AdminHandles(lambda: made.append(AdminClient(NOWHERE)) or made[-1])
    first = handles.kept()
    assert handles.kept() is first and len(made) == 1  # the second check makes no client
    del first
    made.clear()
    assert handles.sweep() == 0  # a sweep (after every store call) leaves the kept client alone
    assert handles.kept() is not None and not made
    in_use = handles.kept()
    assert handles.release() == 1  # a call still has it: held, not destroyed under it
    del in_use
    assert handles.sweep() == 0
    assert handles.kept() is not None and len(made) == 1  # after a release, a new one


# A call that timed out leaves its admin client in a reference cycle; the request's late answer runs Python
# on the client's background thread, and the collector runs there. `held` chooses the store's way.
_CHILD = textwrap.dedent(
    """
    import gc, sys, threading
    from confluent_kafka.admin import AdminClient
    from proxy.state.admin_handles import AdminHandles

    handles = AdminHandles(lambda: AdminClient({"bootstrap.servers": "127.0.0.1:1", "log_level": 0}))
    answered = threading.Event()

    class Frame:
        pass

    def a_call_that_timed_out(held):
        frame = Frame()
        frame.itself = frame
        frame.client = handles.new() if held else AdminClient({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})

        def on_answer(_):
            gc.collect()  # any allocation may start it, on whichever thread holds the GIL
            answered.set()

        frame.client.describe_cluster(request_timeout=1).add_done_callback(on_answer)

    gc.disable()
    a_call_that_timed_out(sys.argv[1] == "held")
    assert answered.wait(30)
    assert handles.sweep() == 0  # let go here, on the main thread
    print("alive")
    """
)


@pytest.mark.parametrize("held", [True, False], ids=["held", "not held"])
def test_a_client_collected_on_its_own_thread_aborts_unless_held(held):
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, "held" if held else "free"], capture_output=True, text=True, timeout=60
    )
    if held:
        assert (child.returncode, child.stdout.strip()) == (0, "alive"), child.stderr
    else:  # what the holder prevents: librdkafka's own abort
        assert child.returncode == -signal.SIGABRT, (child.returncode, child.stderr)
        assert "librdkafka owned thread is prohibited" in child.stderr
