"""`vcproxy serve --workers N`: one proxy instance over N worker processes (proxy/core/handoff.py has the
design and the messages; proxy/net/worker_link.py is a worker's end).

The parent holds what must be one for the instance: the listeners and admission (connection limits and
the creation rate), upstream discovery (which broker ports to bind), and /metrics, /healthz, /readyz,
answered by asking every worker. It binds no port before every worker has replayed the state topic, hands
each admitted socket to the worker with the fewest open connections, relays quota reports and
fetch-session records between workers, forwards SIGHUP, and on SIGTERM stops accepting and lets each
worker drain. A worker that exits before it is up stops the instance with its exit code (a configuration
the workers refuse); one that dies later is logged, its connections released, and another started.
"""

from __future__ import annotations

import array
import logging
import signal
import socket
import sys
from dataclasses import dataclass, field
from typing import Any

import trio
from prometheus_client.core import Metric

from ..config import ProxyConfig
from ..core import handoff
from ..core.admission import ConnectionLimiter
from ..core.endpoints import BrokerEndpoint
from ..errors import InternalFault
from ..observability.merge import merge
from . import upstream as up
from .discovery import BrokerRegistry, discovery_loop
from .listeners import Listeners, listener_layout

log = logging.getLogger(__name__)

ASK_TIMEOUT = 5.0  # a worker that cannot say its metrics or readiness within this is reported as such
RESTART_DELAY = 1.0
QUEUE = 10_000  # control messages waiting for one worker; beyond, relayed records are dropped (logged once)


@dataclass
class Worker:
    index: int
    process: trio.Process | None = None
    handoff: socket.socket | None = None  # the parent's end, non-blocking: sends never wait
    control: trio.SocketStream | None = None
    up: trio.Event = field(default_factory=trio.Event)
    out: trio.MemorySendChannel[bytes] | None = None
    asked: dict[int, tuple[trio.Event, list[Any]]] = field(default_factory=dict)
    dropped: bool = False

    def send(self, message: dict[str, Any]) -> bool:
        if self.out is None:
            return False
        try:
            self.out.send_nowait(handoff.encode(message))
            return True
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            if not self.dropped:
                self.dropped = True
                log.warning("worker %d is not reading its control channel: dropping what is relayed to it", self.index)
            return False


class WorkerFailed(InternalFault):
    def __init__(self, index: int, code: int):
        super().__init__(f"worker {index} exited with code {code} before it was up")
        self.code = code


class Parent:
    """Implements proxy/net/discovery.py's Discovering: discovery finds the broker ports to bind."""

    def __init__(self, config: ProxyConfig, config_path: str, log_level: str | None, count: int):
        self.config = config
        self.config_path = config_path
        self.log_level = log_level
        self.layout = listener_layout(config)
        self.registry = BrokerRegistry()
        self.bootstrap_addresses = [up.split_host_port(s) for s in config.upstream.bootstrap_servers]
        self.upstream_security = up.UpstreamSecurity.from_config(config.upstream)
        self.telemetry = None
        self.cluster_id: str | None = None
        self.discovered_at: float | None = None
        self.discovery_error: str | None = None
        self.ready = trio.Event()
        self.draining = False
        limits = config.limits
        self.admission = ConnectionLimiter(
            limits.max_connections, limits.max_connections_per_ip, limits.max_connection_creation_rate
        )
        self.listeners = Listeners(config.listeners.host, self.layout, self.admission, self._admit)
        self.listening_nodes = self.listeners.nodes
        self.workers = [Worker(i) for i in range(count)]
        self.roster = handoff.Roster()
        self.exit_code = 0
        self._asks = 0
        self._stopping = False

    # -- lifecycle ------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                if self.config.metrics.enabled:
                    await nursery.start(self._serve_http)
                for worker in self.workers:
                    nursery.start_soon(self._keep, worker)
                for worker in self.workers:  # nothing is bound before every worker has replayed the state
                    await worker.up.wait()
                log.info("%d workers up", len(self.workers))
                with self.listeners.scope:
                    async with trio.open_nursery() as listeners:
                        self.listeners.nursery = listeners
                        await listeners.start(self.listeners.serve_port, self.config.listeners.bootstrap_port, None)
                        listeners.start_soon(discovery_loop, self)
                        await trio.sleep_forever()
        except* WorkerFailed as group:
            failed = group.exceptions[0]
            log.error("%s: stopping", failed)
            assert isinstance(failed, WorkerFailed)
            self.exit_code = failed.code or 1
            self.signal_workers(signal.SIGTERM)

    async def drain(self) -> None:
        """Stop accepting, then let every worker drain (its own limits.drain_timeout_seconds) and exit."""
        log.info("draining: %d connection(s) over %d workers", len(self.roster), len(self.workers))
        self.draining = self._stopping = True
        self.listeners.scope.cancel()
        self.signal_workers(signal.SIGTERM)
        with trio.move_on_after(self.config.limits.drain_timeout_seconds + 10):
            for worker in self.workers:
                if worker.process is not None:
                    await worker.process.wait()
        for worker in self.workers:
            if worker.process is not None and worker.process.returncode is None:
                log.error("worker %d did not exit after draining: killing it", worker.index)
                worker.process.kill()

    def signal_workers(self, signum: int) -> None:
        for worker in self.workers:
            if worker.process is not None and worker.process.returncode is None:
                worker.process.send_signal(signum)

    async def on_brokers(self, seen: list[BrokerEndpoint], full_list: bool) -> None:
        await self.listeners.add_brokers(self.registry.update(seen))

    # -- one worker -----------------------------------------------------------------------------

    async def _keep(self, worker: Worker) -> None:
        """Start the worker, serve its control channel, and start it again when it dies after being up."""
        while not self._stopping:
            code, was_up = await self._run_worker(worker)
            if self._stopping:
                return
            if not was_up:
                raise WorkerFailed(worker.index, code)
            log.error("worker %d exited with code %d: starting another", worker.index, code)
            await trio.sleep(RESTART_DELAY)

    async def _run_worker(self, worker: Worker) -> tuple[int, bool]:
        """Run one worker process to its end: its exit code, and whether it was up."""
        handoff_parent, handoff_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        control_parent, control_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        handoff_parent.setblocking(False)
        argv = [sys.executable, "-m", "proxy", "serve", "--config", self.config_path]
        argv += ["--worker", f"{worker.index}/{len(self.workers)}:{handoff_child.fileno()}:{control_child.fileno()}"]
        if self.log_level:
            argv += ["--log-level", self.log_level]
        try:
            worker.process = await trio.lowlevel.open_process(
                argv, pass_fds=(handoff_child.fileno(), control_child.fileno())
            )
        finally:
            handoff_child.close()
            control_child.close()
        worker.handoff = handoff_parent
        worker.control = trio.SocketStream(trio.socket.from_stdlib_socket(control_parent))
        out, out_rx = trio.open_memory_channel[bytes](QUEUE)
        worker.out, worker.dropped = out, False
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write, worker, out_rx)
                await self._read(worker)
                nursery.cancel_scope.cancel()
            return await worker.process.wait(), worker.up.is_set()
        finally:
            self._gone(worker)
            worker.up = trio.Event()
            handoff_parent.close()
            await trio.aclose_forcefully(worker.control)
            worker.control = worker.out = None

    def _gone(self, worker: Worker) -> None:
        for ip in self.roster.leave(worker.index):
            self.admission.release(ip)
        for event, _ in worker.asked.values():
            event.set()
        worker.asked.clear()

    async def _write(self, worker: Worker, out_rx: trio.MemoryReceiveChannel[bytes]) -> None:
        assert worker.control is not None
        try:
            async for data in out_rx:
                await worker.control.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _read(self, worker: Worker) -> None:
        assert worker.control is not None
        lines = handoff.Lines()
        while True:
            try:
                chunk = await worker.control.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not chunk:
                return
            messages, dropped = lines.feed(chunk)
            for why in dropped:
                log.error("worker %d: dropping a control line: %s", worker.index, why)
            for message in messages:
                self._on(worker, message)

    def _on(self, worker: Worker, message: dict[str, Any]) -> None:
        if "closed" in message:
            number = message["closed"]
            ip = self.roster.closed(worker.index, number) if isinstance(number, int) else None
            if ip is not None:
                self.admission.release(ip)
        elif "session" in message or "regex" in message or "login" in message:
            for other in self.workers:
                if other is not worker:
                    other.send(message)
        elif "quota" in message:
            for each in self.workers:  # the sender's own too: its report coming back is how it knows
                each.send(message)
        elif "id" in message:
            asked = worker.asked.pop(message["id"], None) if isinstance(message["id"], int) else None
            if asked is not None:
                asked[1].append(message)
                asked[0].set()
        elif message.get("up") is True and not worker.up.is_set():
            self.roster.join(worker.index)
            worker.up.set()

    # -- connections ----------------------------------------------------------------------------

    def _admit(self, client: trio.SocketStream, node_id: int | None, ip: str) -> None:
        """Hand an admitted connection to the least busy worker; it is the worker's from then on."""
        sock = client.socket
        full: frozenset[int] = frozenset()
        while True:
            chosen = self.roster.assign(ip, full)
            if chosen is None:
                log.warning("no worker to take a connection from %s: closing it", ip)
                self.admission.release(ip)
                break
            index, number = chosen
            handoff_socket = self.workers[index].handoff
            try:
                if handoff_socket is None:
                    raise OSError("its handoff channel is closed")
                fds = array.array("i", [sock.fileno()])
                header = handoff.handoff_header(number, node_id, ip)
                handoff_socket.sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
                break
            except BlockingIOError:  # its queue is full for now: another worker takes this one
                self.roster.closed(index, number)
                full |= {index}
            except OSError as exc:  # gone: it takes nothing more until it is started again
                log.warning("worker %d cannot take a connection (%s): it takes no more until it is back", index, exc)
                self.roster.closed(index, number)
                self.roster.pause(index)  # what it serves is released as it closes, or when it exits
        sock.close()

    # -- /metrics, /healthz, /readyz --------------------------------------------------------------

    async def ask(self, worker: Worker, what: str) -> Any:
        self._asks += 1
        event, answer = trio.Event(), []
        worker.asked[self._asks] = (event, answer)
        if not worker.send({"ask": what, "id": self._asks}):
            worker.asked.pop(self._asks, None)
            return None
        with trio.move_on_after(ASK_TIMEOUT):
            await event.wait()
        worker.asked.pop(self._asks, None)
        return answer[0].get(what) if answer else None

    async def _ask_all(self, what: str) -> dict[int, Any]:
        answers: dict[int, Any] = {}

        async def one(worker: Worker) -> None:
            answers[worker.index] = await self.ask(worker, what)

        async with trio.open_nursery() as nursery:
            for worker in self.workers:
                if worker.up.is_set():  # one replaying the state topic answers nothing before it is up
                    nursery.start_soon(one, worker)
        return answers

    async def render_metrics(self) -> bytes:
        answers = await self._ask_all("metrics")
        texts = {str(i): text if isinstance(text, str) else "" for i, text in answers.items()}
        handed = Metric(
            "vcproxy_worker_connections", "Client connections each worker serves (the parent's count)", "gauge"
        )
        serving = self.roster.serving()
        for worker in self.workers:
            handed.add_sample("vcproxy_worker_connections", {"worker": str(worker.index)}, serving[worker.index])
        return merge(texts, [handed])

    async def readiness(self) -> tuple[bool, str]:
        """Ready while the parent listens and at least one worker is up and ready: a worker being replaced
        does not stop the others serving (the reason names it)."""
        if self.draining:
            return False, "draining: not accepting connections"
        starting = [str(w.index) for w in self.workers if not w.up.is_set()]
        if not self.ready.is_set() and starting:
            return False, f"workers starting (replaying the state topic, reaching the upstream): {', '.join(starting)}"
        if not self.ready.is_set():
            why = self.discovery_error
            return False, f"upstream not reachable yet: {why}" if why else "upstream discovery in progress"
        answers = await self._ask_all("ready")
        problems = []
        for worker in self.workers:
            answer = answers.get(worker.index)
            if not worker.up.is_set():
                problems.append(f"worker {worker.index}: starting")
            elif not (isinstance(answer, list) and len(answer) == 2 and answer[0] is True):
                why = answer[1] if isinstance(answer, list) and len(answer) == 2 else "no answer"
                problems.append(f"worker {worker.index}: {why}")
        serving = len(self.workers) - len(problems)
        if not problems:
            return True, f"ready ({len(self.workers)} workers)"
        return (
            serving > 0,
            f"{'ready' if serving else 'not ready'} ({serving} of {len(self.workers)} workers; {'; '.join(problems)})",
        )

    async def _serve_http(self, *, task_status: trio.TaskStatus[None]) -> None:
        from ..observability.http import HttpServer

        http = HttpServer(self.config.metrics.host, self.config.metrics.port, self.readiness, self)
        await http.run(task_status=task_status)

    async def render(self) -> bytes:  # HttpServer's metrics
        return await self.render_metrics()


async def serve_workers(config: ProxyConfig, config_path: str, log_level: str | None, count: int) -> int:
    """Run until SIGINT/SIGTERM, then drain; SIGHUP goes to every worker (each reloads its configuration).
    Returns the exit code."""
    parent = Parent(config, config_path, log_level, count)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                await parent.run()
                nursery.cancel_scope.cancel()  # a worker failed to start: nothing to serve

            nursery.start_soon(run)
            async for signum in signals:
                if signum == signal.SIGHUP:
                    log.info("received SIGHUP: passing it to the workers")
                    parent.signal_workers(signal.SIGHUP)
                    continue
                log.info("received %s", signal.Signals(signum).name)
                await parent.drain()
                nursery.cancel_scope.cancel()
                break
    return parent.exit_code
