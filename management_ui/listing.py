"""List parameters, as RabbitMQ's ``rabbit_mgmt_util`` applies them to every list.

``name`` + ``use_regex`` filter by name; ``sort`` (a dotted field path) +
``sort_reverse`` order; ``page``/``page_size`` (default 100, at most 500) cut a
page, and ``pagination=true`` (or any ``page``) wraps it in RabbitMQ's
envelope ``{filtered_count, item_count, page, page_count, page_size,
total_count, items}``; ``columns=a,b.c`` keeps only those fields.

Cost: filtering, sorting by name and paging happen on the live objects, and
only the page is formatted, so ``/api/queues?page=1&page_size=100`` formats
100 queues however many exist. Sorting by any other field formats them all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from leveret.broker.inventory import truthy
from leveret.management_ui.router import ApiError, bad_request

MAX_PAGE_SIZE = 500  # RabbitMQ's limit
DEFAULT_PAGE_SIZE = 100


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
    out: dict[str, Any] = {}
    for column in columns:
        value = get_path(item, column)
        if value is None and not _has_path(item, column):
            continue
        target = out
        parts = column.split(".")
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return out


def _has_path(item: dict[str, Any], path: str) -> bool:
    value: Any = item
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    return True


def _int_param(query: Any, name: str, default: int) -> int:
    text = query.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ApiError(400, "invalid_pagination_parameters",
                       f"Invalid pagination parameters: {name} {text}") from None


def respond_list(
    query: Any,
    objects: Sequence[Any],
    fmt: Callable[[Any], dict[str, Any]],
    cheap: dict[str, Callable[[Any], Any]] | None = None,
) -> Any:
    """Apply the list parameters to ``objects`` (live objects) formatted with ``fmt``.

    ``cheap`` maps field paths that can be read off the objects without
    formatting (``name``, ``vhost``) to getters: filtering and sorting by them
    does not format anything.
    """
    cheap = cheap or {}
    total = len(objects)
    items: list[Any] = list(objects)
    name = query.get("name", "")
    if name:
        get_name = cheap.get("name") or (lambda o: fmt(o).get("name", ""))
        if truthy(query.get("use_regex", "false")):
            try:
                pattern = re.compile(name)
            except re.error as exc:
                raise bad_request(f"invalid regex {name!r}: {exc}") from None
            items = [o for o in items if pattern.search(str(get_name(o)))]
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
    if paged:
        page = _int_param(query, "page", 1)
        page_size = _int_param(query, "page_size", DEFAULT_PAGE_SIZE)
        if page < 1 or page_size < 1 or page_size > MAX_PAGE_SIZE:
            raise ApiError(400, "invalid_pagination_parameters",
                           f"Invalid pagination parameters: page number {page}, "
                           f"page size {page_size}")
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
    columns = [c for c in query.get("columns", "").split(",") if c]
    if columns:
        out = [project(d, columns) for d in out]
    if not paged:
        return out
    return {"filtered_count": filtered, "item_count": len(out), "items": out, "page": page,
            "page_count": page_count, "page_size": page_size, "total_count": total}
