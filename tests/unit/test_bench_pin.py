"""bench_peers.py's `--pin KAFKA/PROXY`: the CPU lists it accepts and refuses, and that a running process's threads
(a broker's, started before the bench pins it) all move, not only its first one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks import bench_peers

CPUS = sorted(os.sched_getaffinity(0))


def test_pin_reads_two_cpu_lists():
    first, last = CPUS[0], CPUS[-1]
    assert bench_peers.parse_pin(f"{first}/{last}") == ([first], [last])
    assert bench_peers.parse_pin(f"{first}-{last}/{first},{last}") == (CPUS, sorted({first, last}))
    assert bench_peers.taskset([0, 2]) == ["taskset", "-c", "0,2"]


@pytest.mark.parametrize("text", ["0", "0:1", "a/0", "0/", "0-/0", f"0/{max(CPUS) + 1}"])
def test_pin_refuses_what_taskset_would_not_take_or_the_machine_lacks(text):
    with pytest.raises(bench_peers.BenchError, match="--pin"):
        bench_peers.parse_pin(text)


def test_pin_threads_moves_every_thread_of_a_running_process():
    code = (
        "import threading, sys\n"
        "ev = threading.Event()\n"
        "for _ in range(3): threading.Thread(target=ev.wait, daemon=True).start()\n"
        "print('up', flush=True); sys.stdin.read()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        tids = os.listdir(f"/proc/{proc.pid}/task")
        assert len(tids) == 4
        bench_peers.pin_threads(proc.pid, [CPUS[-1]])
        assert {tid: os.sched_getaffinity(int(tid)) for tid in tids} == {tid: {CPUS[-1]} for tid in tids}
    finally:
        proc.communicate("")
