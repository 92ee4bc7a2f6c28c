"""Field values printed as RabbitMQ's error texts print them (Erlang's ``~w`` and ``~p``).

Several of RabbitMQ's 406 texts show a field value the way Erlang prints the term its
decoder (``rabbit_binary_parser``) made of it: ``Invalid x-match field type signedint
(value 1)``, ``received '[{<<"a">>,long,1}]' but current is '10'``. Clients compare these
texts, so Leveret rebuilds the same term and prints it the same way:

* :func:`field_term` is the decoded term: integers of every width and timestamps are
  plain integers, ``f``/``d`` floats, strings and byte arrays binaries, booleans and void
  the atoms ``true``/``false``/``undefined``, a decimal ``{Scale, Unsigned}``, an array a
  list of ``{Type, Value}`` and a table a list of ``{Key, Type, Value}`` in wire order;
* :func:`write` prints it on one line (``~w``), floats in Erlang's shortest form
  (``1.0e20``, ``100.0``, ``1.2e-4``);
* :func:`pretty` is ``~p`` at a given column: one line when it fits in 80 columns, else
  one element of a list or tuple a line, aligned after its bracket, except that atoms,
  numbers and binaries fill a line while they fit (what ``io_lib_pretty`` does);

Texts this long are cut to 255 bytes where they go on the wire
(:attr:`~leveret.model.errors.AMQPError.wire_text`).
"""

from __future__ import annotations

import datetime
import decimal
import struct

from leveret.model.field_table import Float, Timestamp, TypedInt, type_name

LINE_LENGTH = 80  # io_lib_pretty's default line length


class Atom(str):
    """An Erlang atom: printed bare."""

    __slots__ = ()


Term = int | float | bytes | Atom | tuple["Term", ...] | list["Term"]

_F32 = struct.Struct(">f")
TRUE, FALSE, UNDEFINED = Atom("true"), Atom("false"), Atom("undefined")


def field_type(value: object) -> str:
    """RabbitMQ's type name for a field value: the wire type it came in, and for an integer
    that never had one (JSON: the HTTP API, definitions) long, as RabbitMQ reads JSON."""
    return "long" if type(value) is int else type_name(value)


def field_term(value: object) -> Term:
    """The term RabbitMQ's decoder holds for a field value (see the module docstring)."""
    if isinstance(value, bool):
        return TRUE if value else FALSE
    if isinstance(value, (TypedInt, Timestamp, int)):
        return int(value)
    if isinstance(value, Float):
        wide: float = _F32.unpack(_F32.pack(value))[0]  # the 32 bits on the wire, as a double
        return wide
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if value is None:
        return UNDEFINED
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp())
    if isinstance(value, decimal.Decimal):
        return _decimal_term(value)
    if isinstance(value, (list, tuple)):
        return [(Atom(field_type(v)), field_term(v)) for v in value]
    if isinstance(value, dict):
        return [(str(k).encode("utf-8"), Atom(field_type(v)), field_term(v))
                for k, v in value.items()]
    return Atom(repr(value))


def _decimal_term(value: decimal.Decimal) -> Term:
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int):  # NaN, infinity: no wire form
        return Atom(str(value).lower())
    scale = max(0, -exponent)
    # The wire's value is 32 bits that RabbitMQ reads unsigned: -3 is {0,4294967293}.
    return (scale, int(value.scaleb(scale)) & 0xFFFFFFFF)


def write(term: Term) -> str:
    """``~w``: the term on one line."""
    if isinstance(term, Atom):
        return str(term)
    if isinstance(term, bool):  # not produced by field_term; kept exact anyway
        return "true" if term else "false"
    if isinstance(term, int):
        return str(term)
    if isinstance(term, float):
        return float_text(term)
    if isinstance(term, bytes):
        return binary_text(term)
    if isinstance(term, tuple):
        return "{" + ",".join(write(t) for t in term) + "}"
    return "[" + ",".join(write(t) for t in term) + "]"


def float_text(value: float) -> str:
    """Erlang's shortest float: the fewest digits that read back, in fixed or scientific
    notation, whichever is shorter (fixed on a tie): ``100.0``, ``1.0e5``, ``1.2e-4``."""
    if value != value or value in (float("inf"), float("-inf")):
        return repr(value)
    sign = "-" if str(value).startswith("-") else ""
    digits_tuple = decimal.Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, digits_tuple.digits)) or "0"
    exponent = int(digits_tuple.exponent)
    if digits == "0":
        return sign + "0.0"
    point = len(digits) + exponent  # where the decimal point goes in ``digits``
    if point <= 0:
        fixed = "0." + "0" * -point + digits
    elif point >= len(digits):
        fixed = digits + "0" * (point - len(digits)) + ".0"
    else:
        fixed = digits[:point] + "." + digits[point:]
    scientific = f"{digits[0]}.{digits[1:] or '0'}e{point - 1}"
    if abs(value) >= _EXACT_INTEGERS:
        return sign + scientific  # past 2**53 a fixed form would show digits that are not there
    return sign + (fixed if len(fixed) <= len(scientific) else scientific)


_EXACT_INTEGERS = float(2**53)

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
            "\b": "\\b", "\f": "\\f", "\x1b": "\\e"}


def binary_text(raw: bytes) -> str:
    """``<<"text">>`` when the bytes are printable UTF-8, else ``<<1,2,3>>``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and all(c in _ESCAPES or (c >= " " and not "\x7f" <= c <= "\x9f")
                                for c in text):
        return '<<"' + "".join(_ESCAPES.get(c, c) for c in text) + '">>'
    return "<<" + ",".join(str(b) for b in raw) + ">>"


def pretty(term: Term, column: int) -> str:
    """``~p`` for a term printed from ``column`` on (see the module docstring)."""
    return _pp(term, column, 0)


_INFINITY = 1 << 30


def _pp(term: Term, column: int, closing: int) -> str:
    """``closing``: how many brackets follow the term on its last line."""
    flat = write(term)
    if len(flat) < LINE_LENGTH - column - closing or not isinstance(term, (list, tuple)):
        return flat
    if not term:
        return flat
    inner = column + 1
    newline = "\n" + " " * inner
    parts: list[str] = []
    at = inner
    for i, element in enumerate(term):
        last_closing = closing + 1 if i == len(term) - 1 else 0
        text = write(element)
        atomic = not isinstance(element, (list, tuple))
        if i:
            width = len(text) + 1
            fits = (width + 1 < LINE_LENGTH - at if not last_closing
                    else width < LINE_LENGTH - at - last_closing)
            if atomic and fits:
                parts.append("," + text)
                at += width
                continue
            parts.append("," + newline)
        if atomic and len(text) < LINE_LENGTH - inner - last_closing:
            parts.append(text)
            at = inner + len(text)
        else:
            parts.append(_pp(element, inner, last_closing))
            at = _INFINITY  # nothing follows a nested term on its line
    brackets = "[]" if isinstance(term, list) else "{}"
    return brackets[0] + "".join(parts) + brackets[1]

