"""tests/jsonl.py: the integration tests read the proxy's span files while it writes them, so a line still being
written (no newline after it yet) must wait for the next read, not fail the test (as it did once in CI)."""

from __future__ import annotations

import json

from tests.jsonl import complete_records


def test_only_whole_lines_are_read_and_a_line_being_written_waits(tmp_path):
    whole = json.dumps({"resourceSpans": [{"n": 1}]})
    (tmp_path / "traces.jsonl").write_text(whole + "\n" + whole[:20])
    (tmp_path / "traces.jsonl.1").write_text(whole + "\n\n")
    (tmp_path / "other.txt").write_text("not json\n")
    assert list(complete_records(tmp_path)) == [{"resourceSpans": [{"n": 1}]}] * 2
    with (tmp_path / "traces.jsonl").open("a") as f:
        f.write(whole[20:] + "\n")
    assert list(complete_records(tmp_path, "traces.jsonl")) == [{"resourceSpans": [{"n": 1}]}] * 2
