"""End to end: `vcproxy bench` (direct vs proxied, Kafka's perf tools) with the proxy's tracing and
metrics sections set, since the bench itself always runs the proxy with the default config.

    .venv/bin/python benchmarks/bench_tracing.py off      [bench options...]
    .venv/bin/python benchmarks/bench_tracing.py metrics  [bench options...]
    .venv/bin/python benchmarks/bench_tracing.py 1.0      [bench options...]   # tracing, sample ratio 1.0

Tracing writes JSON Lines into <bench dir>/traces. Compare the proxy/direct ratios of two runs: the
direct figures of each run absorb what the machine was doing at the time.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    mode, rest = sys.argv[1], sys.argv[2:]
    sections: dict[str, Any] = {}
    if mode != "off":
        sections["metrics"] = {"enabled": True, "port": 29990}
    if mode not in ("off", "metrics"):
        bench_dir = rest[rest.index("--dir") + 1] if "--dir" in rest[:-1] else ".vcproxy/bench"
        traces = (Path(bench_dir) / "traces").resolve()
        sections["tracing"] = {"enabled": True, "sample_ratio": float(mode), "jsonl_dir": str(traces)}

    import proxy.process
    from proxy.cli import main as cli_main

    original = proxy.process.proxy_config

    def with_sections(*args: Any, **kwargs: Any) -> dict[str, Any]:
        config = original(*args, **kwargs)
        config.update(sections)
        return config

    proxy.process.proxy_config = with_sections  # type: ignore[assignment]  # read by proxy.bench at run time
    print(f"proxy sections: {sections or 'defaults (tracing and metrics off)'}", flush=True)
    return cli_main(["bench", *rest])


if __name__ == "__main__":
    sys.exit(main())
