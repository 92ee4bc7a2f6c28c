"""Configuration values: how each kind is read from text or TOML, and how it is checked.

``config.py`` declares the fields; this module knows the value kinds (int, float,
str, path, list of strings, bool) and the checks (ranges, choices, names). A
reader raises ``Invalid`` and a check returns a problem description, so the
loader can add the key and the source the value came from to one message.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

Kind = Literal["int", "float", "str", "path", "strs", "bool"]
INT_RE = re.compile(r"[+-]?[0-9]+")


class Invalid(Exception):
    """A problem with a value; the caller adds the key and the source."""


BOOLS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


def from_text(kind: Kind, text: str) -> Any:
    """Read a value from a flag or an environment variable."""
    if kind == "bool":
        if text.strip().lower() not in BOOLS:
            raise Invalid(f"expected true or false, got {text!r}")
        return BOOLS[text.strip().lower()]
    if kind == "int":
        if not INT_RE.fullmatch(text.strip()):
            raise Invalid(f"expected an integer, got {text!r}")
        return int(text)
    if kind == "float":
        try:
            value = float(text)
        except ValueError:
            raise Invalid(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise Invalid(f"expected a finite number, got {text!r}")
        return value
    if kind == "path":
        if not text.strip():
            raise Invalid("expected a path, got an empty string")
        return Path(text).expanduser()
    if kind == "strs":
        # Comma-separated; "" is the empty list (for host: every interface).
        return tuple(part.strip() for part in text.split(",") if part.strip())
    return text


def from_toml(kind: Kind, value: Any) -> Any:
    """Check a typed TOML (or already-typed flag) value; no silent coercion."""
    if kind == "bool":
        if not isinstance(value, bool):
            raise Invalid(f"expected true or false, got {describe(value)}")
        return value
    # bool is an int subclass in Python; `port = true` is still a mistake.
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(f"expected an integer, got {describe(value)}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Invalid(f"expected a number, got {describe(value)}")
        if not math.isfinite(value):
            raise Invalid(f"expected a finite number, got {value!r}")
        return float(value)
    if kind == "path":
        if isinstance(value, Path):
            return value.expanduser()
        if not isinstance(value, str):
            raise Invalid(f"expected a path string, got {describe(value)}")
        return from_text(kind, value)
    if kind == "strs":
        if isinstance(value, str):  # `host = "::1"` reads as a one-element list
            return from_text(kind, value)
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise Invalid(f"expected a list of strings, got {describe(value)}")
        return tuple(v.strip() for v in value)
    if not isinstance(value, str):
        raise Invalid(f"expected a string, got {describe(value)}")
    return value


def describe(value: Any) -> str:
    names = {
        bool: "a boolean",
        str: "a string",
        int: "an integer",
        float: "a number",
        list: "a list",
        dict: "a table",
    }
    return f"{names.get(type(value), type(value).__name__)} ({value!r})"


# --- checks: return a problem description, or None --------------------------

Check = Callable[[Any], "str | None"]


def int_range(low: int, high: int, why: str = "") -> Check:
    def check(value: Any) -> str | None:
        if not low <= value <= high:
            return f"must be between {low} and {high}{why}, got {value}"
        return None

    return check


def positive_float(value: Any) -> str | None:
    return None if value > 0 else f"must be greater than 0, got {value}"


def non_negative_float(value: Any) -> str | None:
    return None if value >= 0 else f"must be 0 or greater, got {value}"


def non_empty(value: Any) -> str | None:
    return None if value else "must not be empty"


def names(what: str) -> Check:
    def check(value: Any) -> str | None:
        for item in value:
            if not item or any(c.isspace() for c in item):
                return f"each {what} must be non-empty without spaces, got {item!r}"
        return None

    return check


def names_one(what: str) -> Check:
    """A single name, checked as ``names`` checks each of a list ("" is allowed: default)."""
    inner = names(what)

    def check(value: Any) -> str | None:
        return inner((value,)) if value else None

    return check


def choice(*choices: str) -> Check:
    def check(value: Any) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}, got {value!r}"
    return check


def no_check(value: Any) -> str | None:
    return None
