"""RabbitMQ's names for field-table value types, as its error texts print them.

Pure and import-free so that queue-argument validation (``leveret.queues``) and
the protocol core can both use it without importing each other.
"""

from __future__ import annotations


def amqp_type_name(value: object) -> str:
    """RabbitMQ's name for a field-table value's type, for inequivalent-arg texts."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        # Clients (pika, pamqp) encode an int in the smallest type that holds it; the
        # decoded value no longer says which, so infer it the same way.
        if -(2**7) <= value < 2**7:
            return "byte"
        if -(2**15) <= value < 2**15:
            return "short"
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, (str, bytes)):
        return "longstr"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return type(value).__name__
