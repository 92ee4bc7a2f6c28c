"""Spark bridge (PySpark data source and sink): planned in its own issue; nothing here yet."""
