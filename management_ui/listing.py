"""List parameters, as RabbitMQ's ``rabbit_mgmt_util`` applies them to every list.

``name`` + ``use_regex`` filter by name (a regex: caseless and in linear time,
``model/name_pattern.py``, which says where it differs from RabbitMQ's PCRE); ``sort``
(a dotted field path) + ``sort_reverse`` order; ``page``/``page_size`` (default 100, at
most 500) cut a page, and ``pagination=true`` (or any ``page``) wraps it in RabbitMQ's
envelope ``{filtered_count, item_count, page, page_count, page_size, total_count,
items}``; ``columns=a,b.c`` keeps only those fields.

Columns, as RabbitMQ 3.10.8 answers them (``test_management_columns.py``): a
column names a field or a field of a field; deeper parts are ignored
(``message_stats.publish.x`` = ``message_stats.publish``). ``b.c`` where
``b`` exists but ``c`` does not keeps an empty ``b``; a missing ``b`` is left
out. Single objects (a queue, a vhost, ``whoami``) take ``columns`` too
(``respond_one``); ``/api/overview`` keeps whole top-level fields
(``object_totals.queues`` = ``object_totals``). Where Leveret differs: an
empty result is ``{}``, where RabbitMQ's encoder writes an empty ``[]``.

Binding lists (``PAGELESS``): RabbitMQ 3.10.8 neither pages nor filters them
by name. With ``page`` present it checks the paging parameters, then answers
the whole plain list; it answers a bad ``page``/``page_size`` with an empty
500 (a crash), Leveret with the 400 the other lists give.

Cost: filtering, sorting by name and paging happen on the live objects, and
only the page is formatted, so ``/api/queues?page=1&page_size=100`` formats
100 queues however many exist. Sorting by any other field formats them all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from leveret.broker.inventory import truthy
from leveret.management_ui.router import ApiError, bad_request
from leveret.model.name_pattern import PatternError, compile_pattern

log = logging.getLogger(__name__)

MAX_PAGE_SIZE = 500  # RabbitMQ's limit
DEFAULT_PAGE_SIZE = 100
# RabbitMQ 3.10.8's answer (a 400) to a name filter that does not compile.
INVALID_PATTERN = "Pagination parameters are invalid"


def get_path(item: dict[str, Any], path: str) -> Any:
    value: Any = item
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (0, 0)
    if isinstance(value, bool):
        return (1, int(value))
    if isinstance(value, (int, float)):
        return (1, value)
    return (2, str(value))


def project(item: dict[str, Any], columns: list[str]) -> dict[str, Any]:
    """``item`` cut to ``columns`` (RabbitMQ's two levels: see the module's docstring)."""
    out: dict[str, Any] = {}
    for column in columns:
        top, _, rest = column.partition(".")
        if top not in item:
            continue
        value = item[top]
        if not rest:
            out[top] = value
            continue
        sub = rest.split(".", 1)[0]
        if not isinstance(value, dict):
            continue
        target = out.get(top)
        if not isinstance(target, dict):
            target = out[top] = {}
        if sub in value:
            target[sub] = value[sub]
    return out


def columns_of(query: Any) -> list[str]:
    return [c for c in query.get("columns", "").split(",") if c]


def respond_one(query: Any, item: dict[str, Any], top_level: bool = False) -> dict[str, Any]:
    """A single object with ``?columns=`` applied; ``top_level`` (the overview): a column
    keeps its whole top-level field."""
    columns = columns_of(query)
    if not columns:
        return item
    if top_level:
        return {c: item[c] for c in (col.split(".", 1)[0] for col in columns) if c in item}
    return project(item, columns)


def _int_param(query: Any, name: str, default: int) -> int:
    text = query.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ApiError(400, "invalid_pagination_parameters",
                       f"Invalid pagination parameters: {name} {text}") from None


def _page_params(query: Any) -> tuple[int, int]:
    page = _int_param(query, "page", 1)
    page_size = _int_param(query, "page_size", DEFAULT_PAGE_SIZE)
    if page < 1 or page_size < 1 or page_size > MAX_PAGE_SIZE:
        raise ApiError(400, "invalid_pagination_parameters",
                       f"Invalid pagination parameters: page number {page}, "
                       f"page size {page_size}")
    return page, page_size


def respond_list(
    query: Any,
    objects: Sequence[Any],
    fmt: Callable[[Any], dict[str, Any]],
    cheap: dict[str, Callable[[Any], Any]] | None = None,
    pageless: bool = False,
) -> Any:
    """Apply the list parameters to ``objects`` (live objects) formatted with ``fmt``.

    ``cheap`` maps field paths that can be read off the objects without
    formatting (``name``, ``vhost``) to getters: filtering and sorting by them
    does not format anything. ``pageless`` (binding lists): no name filter, no page,
    only the paging parameters' check when ``page`` is given.
    """
    cheap = cheap or {}
    total = len(objects)
    items: list[Any] = list(objects)
    name = "" if pageless else query.get("name", "")
    if name:
        get_name = cheap.get("name") or (lambda o: fmt(o).get("name", ""))
        if truthy(query.get("use_regex", "false")):
            try:
                pattern = compile_pattern(name)
            except PatternError as exc:
                log.info("management API: name filter %r refused: %s", name, exc)
                raise bad_request(INVALID_PATTERN) from None
            search = pattern.search
            items = [o for o in items if search(str(get_name(o))) is not None]
        else:
            lowered = name.lower()
            items = [o for o in items if lowered in str(get_name(o)).lower()]
    formatted: list[dict[str, Any]] | None = None
    sort = query.get("sort", "")
    reverse = truthy(query.get("sort_reverse", "false"))
    if sort:
        getter = cheap.get(sort)
        if getter is not None:
            items.sort(key=lambda o: _sort_key(getter(o)), reverse=reverse)
        else:
            formatted = [fmt(o) for o in items]
            formatted.sort(key=lambda d: _sort_key(get_path(d, sort)), reverse=reverse)
    elif reverse:
        items.reverse()
    paged = "page" in query or truthy(query.get("pagination", "false"))
    page = page_size = page_count = 0
    filtered = len(items)
    if pageless:
        if "page" in query:
            _page_params(query)
        paged = False
    if paged:
        page, page_size = _page_params(query)
        page_count = (filtered + page_size - 1) // page_size
        if page > max(page_count, 1):
            raise ApiError(400, "page_out_of_range",
                           f"Page out of range, page: {page} page size: {page_size}, "
                           f"len: {filtered}")
        start = (page - 1) * page_size
        if formatted is not None:
            formatted = formatted[start:start + page_size]
        else:
            items = items[start:start + page_size]
    out = formatted if formatted is not None else [fmt(o) for o in items]
    columns = columns_of(query)
    if columns:
        out = [project(d, columns) for d in out]
    if not paged:
        return out
    return {"filtered_count": filtered, "item_count": len(out), "items": out, "page": page,
            "page_count": page_count, "page_size": page_size, "total_count": total}
