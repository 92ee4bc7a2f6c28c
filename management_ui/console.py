"""The web console: static files served by the management listener at ``/``.

The console is plain ES modules and one vendored chart library (uPlot, in
``static/vendor/`` with its licence), shipped in the wheel as package data:
no build step at install time, nothing fetched from the internet at run
time. Every action it offers is a call to the management API (``/api/...``)
with the user's basic-auth credentials, which the browser keeps for the tab
(``sessionStorage``), so scripts can do anything the console does.

The files are listed once at start-up; a request names one of them or gets
404, so no path from the URL ever reaches the file system. A
Content-Security-Policy of ``'self'`` keeps the page from loading anything
from elsewhere (and from running inline script).
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from aiohttp import web

STATIC = Path(__file__).resolve().parent / "static"
PREFIX = "/console/"
INDEX = "index.html"
FAVICON = "favicon.svg"
CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
# Vendored files never change within a version; the console's own may change on upgrade.
CACHE_VENDOR = "public, max-age=86400"
CACHE_OWN = "no-cache"
TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html",
         ".md": "text/markdown", ".svg": "image/svg+xml"}


def files(root: Path = STATIC) -> dict[str, Path]:
    """Every servable file, by its path under ``/console/``."""
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


class Console:
    """Answers ``/`` (the page) and ``/console/<file>`` (its assets)."""

    def __init__(self, root: Path = STATIC) -> None:
        self.files = files(root)

    def serve(self, request: web.Request) -> web.StreamResponse | None:
        """The response for this path, or None when it is not the console's."""
        path = request.path
        if path == "/":
            name = INDEX
        elif path == "/favicon.ico":  # asked for by browsers and tools that ignore the <link>
            name = FAVICON
        elif path.startswith(PREFIX):
            name = path[len(PREFIX):]
        else:
            return None
        file = self.files.get(name)
        if file is None:
            return None
        suffix = file.suffix.lower()
        content_type = TYPES.get(suffix) or mimetypes.guess_type(file.name)[0] or "text/plain"
        headers = {
            "Cache-Control": CACHE_VENDOR if name.startswith("vendor/") else CACHE_OWN,
            "X-Content-Type-Options": "nosniff",
        }
        if suffix == ".html":
            headers["Content-Security-Policy"] = CSP
            headers["X-Frame-Options"] = "DENY"
        return web.Response(body=file.read_bytes(), content_type=content_type,
                            charset="utf-8" if content_type.startswith("text/") else None,
                            headers=headers)
