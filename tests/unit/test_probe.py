"""`vcproxy probe` refuses what does not answer, with one line and its exit code."""

import socket
import threading

from vcproxy_tools.cli import main


def test_nothing_listening_is_exit_1(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        assert main(["probe", f"127.0.0.1:{port}", "--timeout", "5"]) == 1
    assert f"vcproxy probe: 127.0.0.1:{port}:" in capsys.readouterr().err


def test_not_kafka_is_exit_1(capsys):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(64)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        threading.Thread(target=answer, daemon=True).start()
        assert main(["probe", f"127.0.0.1:{server.getsockname()[1]}", "--timeout", "5"]) == 1
    assert "not a Kafka response" in capsys.readouterr().err


def test_bad_target_is_exit_2(capsys):
    assert main(["probe", "no-port-here"]) == 2
    assert "neither HOST:PORT nor an http(s) URL" in capsys.readouterr().err
