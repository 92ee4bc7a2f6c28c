"""Name patterns from users (``?name=...&use_regex=true``, a trace's ``queue`` filter),
matched in linear time.

RabbitMQ matches them with Erlang's ``re`` (PCRE), caseless. A backtracking engine,
PCRE or Python's ``re``, takes time exponential in the name for patterns such as
``^(a+)+$``: one request from any ``management`` user would hold the broker's loop
for seconds per queue. Here they are compiled by RE2 (``google-re2``), whose matching
is linear in the name and the pattern, and whose compiled program is bounded in
memory (``MAX_MEM``).

Where Leveret differs: RE2 has no backreferences (``(a)\\1``) nor lookaround
(``(?=a)``), the features that need backtracking; such a pattern is refused like one
that does not compile (``PatternError``), where RabbitMQ runs it. Everything else
RabbitMQ's users write (classes, anchors, repetition up to 1000, ``(?i)``, ``\\d``)
reads the same.
"""

from __future__ import annotations

from typing import Protocol

import re2

# What one compiled pattern may take (RE2 refuses bigger ones), in bytes.
MAX_MEM = 8 << 20


class NamePattern(Protocol):
    """A compiled pattern: ``search`` finds it anywhere in a name (unanchored, as ``re:run``)."""

    def search(self, text: str) -> object | None: ...

    @property
    def pattern(self) -> str:
        """The pattern's text, as given."""
        ...


class PatternError(ValueError):
    """The pattern does not compile under RE2: the text says why."""


def compile_pattern(pattern: str, caseless: bool = True) -> NamePattern:
    """``pattern`` compiled for matching names; ``caseless`` as RabbitMQ's list filter."""
    options = re2.Options()
    options.case_sensitive = not caseless
    options.log_errors = False  # a user's bad pattern is answered, not logged by RE2
    options.max_mem = MAX_MEM
    try:
        compiled: NamePattern = re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(str(reason)) from None
    return compiled
