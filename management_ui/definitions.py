"""``/api/definitions[/{vhost}]``: HTTP over ``broker/definitions.py``.

Export answers the broker model's export (``?download=name`` adds
Content-Disposition, as the UI's download link expects); import takes a JSON
body or the UI's multipart upload, and a file that fails validation is a 400
naming the item, with nothing applied. A valid file is applied in slices with
the loop given back between them (``broker/import_slices.py``), and the answer
comes once it is committed.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from leveret.broker import definitions, import_slices
from leveret.management_ui import read
from leveret.management_ui.router import (
    ApiError,
    Request,
    bad_request,
    json_response,
    parse_json,
)

log = logging.getLogger(__name__)


async def export(req: Request) -> web.Response:
    vhost = read.vhost_of(req) if "vhost" in req.params else None
    body = definitions.export(req.state.broker, vhost)
    headers = {}
    if "download" in req.query:
        headers["Content-Disposition"] = f'attachment; filename="{req.query["download"]}"'
    return json_response(body, headers=headers)


async def import_(req: Request) -> web.Response:
    only = read.vhost_of(req).name if "vhost" in req.params else None
    if req.http.content_type.startswith("multipart/"):
        try:
            form = await req.http.post()  # the UI's upload: a "file" field
        except ValueError:  # no boundary, a broken part
            raise bad_request("not_json") from None
        upload: Any = form.get("file")
        raw = upload.file.read() if hasattr(upload, "file") else str(upload or "").encode()
    else:
        raw = await req.http.read()
    try:
        defs = parse_json(raw) if raw.strip() else {}
    except ApiError:
        defs = None
    if not isinstance(defs, dict):  # RabbitMQ's reason here, for any body but an object
        raise bad_request("failed_to_parse_json")
    try:
        count, skipped = await import_slices.apply_in_slices(req.state.broker, defs, only)
    except definitions.Invalid as exc:
        raise bad_request(f"Validation failed: {exc}; nothing was imported") from None
    log.info("definitions imported: %d operation(s)%s", count,
             f", {skipped} skipped (changed meanwhile)" if skipped else "")
    return web.Response(status=204)
