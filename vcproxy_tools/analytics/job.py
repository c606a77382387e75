"""The script spark-submit runs: `spark-submit vcproxy_tools/analytics/job.py --input DIR --output DIR`, the same
job as `vcproxy traces aggregate` (docs/observability.md)."""

import importlib.util
import sys
from pathlib import Path

if __name__ == "__main__":
    if importlib.util.find_spec("vcproxy_tools") is None:  # neither installed nor shipped with --py-files: a checkout
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from vcproxy_tools.analytics.cli import main

    sys.exit(main())
