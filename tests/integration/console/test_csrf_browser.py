"""Cross-site request forgery against the management API, in a real headless Chromium.

A page on another origin (a plain ``http.server`` on another port) auto-submits a
form to ``/api/definitions`` while the browser holds Basic credentials for the API
(it visited an ``/api/`` URL with them, as a user answering the 401 prompt does).
HTML forms can send ``text/plain``, ``application/x-www-form-urlencoded`` and
``multipart/form-data`` across origins without a preflight; ``text/plain`` and
``multipart`` can carry a definitions file that makes an administrator. The broker
refuses both: the ``Origin`` is not the listener's own (403), and a body that is not
JSON is a 415 (``management_ui/guard.py``). The user must not exist afterwards.
"""

from __future__ import annotations

import html
import http.server
import json
import threading
import uuid
from collections.abc import Iterator

import pytest
import requests

from tests.conftest import BrokerProcess

from .browser import Console

pytestmark = pytest.mark.timeout(300)

GUEST = ("guest", "guest")


def _form(action: str, enctype: str, user: str) -> str:
    """A page that posts a definitions file creating ``user`` (an administrator) on load."""
    definitions = {"users": [{"name": user, "password": "pw", "tags": "administrator"}],
                   "permissions": [{"user": user, "vhost": "/", "configure": ".*",
                                    "write": ".*", "read": ".*"}]}
    text = json.dumps(definitions)
    if enctype == "text/plain":
        # Sent as "name=value": the JSON is split so that the "=" lands inside a string.
        name, value = text[:-3] + ', "x": "', '"}]}'
        field = f'<input type="hidden" name="{html.escape(name)}" value="{html.escape(value)}">'
    else:  # multipart: the field the UI's upload form names "file"
        field = f'<input type="hidden" name="file" value="{html.escape(text)}">'
    return (f'<!doctype html><html><body><form id="f" method="POST" action="{action}" '
            f'enctype="{enctype}">{field}</form>'
            '<script>document.getElementById("f").submit()</script></body></html>')


def _exists(api: str, user: str) -> bool:
    return requests.get(f"{api}/api/users/{user}", auth=GUEST).status_code == 200


@pytest.fixture
def other_origin() -> Iterator[dict[str, str]]:
    """An HTTP server on another port that serves the pages put in the returned dict."""
    pages: dict[str, str] = {}

    class Pages(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    pages["__base__"] = f"http://127.0.0.1:{server.server_address[1]}"
    yield pages
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("enctype", ["text/plain", "multipart/form-data"])
def test_a_form_on_another_origin_cannot_import_definitions(
        ui: Console, broker: BrokerProcess, other_origin: dict[str, str], enctype: str) -> None:
    user = f"csrf-{uuid.uuid4().hex[:8]}"
    api = broker.api_url
    # The browser caches Basic credentials for the API, as after answering its 401 prompt.
    ui.driver.get(api.replace("http://", "http://guest:guest@") + "/api/whoami")
    ui.wait(lambda d: '"name":"guest"' in d.page_source, "the API answered with credentials")
    other_origin["/attack.html"] = _form(f"{api}/api/definitions", enctype, user)
    ui.driver.get(other_origin["__base__"] + "/attack.html")
    # A refusal navigates the page to the API's answer; an import answers 204, which
    # leaves the page where it is, so the user's arrival ends the wait too.
    ui.wait(lambda d: _exists(api, user) or (
        d.current_url.startswith(f"{api}/api/definitions")
        and d.execute_script("return document.readyState") == "complete"),
        "the forged request answered")
    assert not _exists(api, user)
    ui.js_errors()  # the refusal's "Failed to load resource" is this test's expectation
