"""Observability: OpenTelemetry request spans (tracing.py, jsonl.py), Prometheus metrics (metrics.py)
and the /metrics, /healthz and /readyz endpoints (http.py). See docs/observability.md."""
