"""Management HTTP API and Prometheus metrics: planned in its own issue; nothing here yet."""
