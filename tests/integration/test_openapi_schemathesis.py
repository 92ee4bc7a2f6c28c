"""schemathesis against /api/openapi.json on a live broker: for every route, generated
paths, queries and bodies never get a 5xx, and every answer (errors included, which must be
RabbitMQ's ``{"error", "reason"}`` JSON) matches the document's status codes, content types
and schemas.

The broker is this module's own (generated requests delete and change things), seeded
with a queue, an exchange, a binding, a policy and a user so that lookups also hit existing
objects. Examples per route are bounded (``MAX_EXAMPLES``) to keep the run near half a
minute.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import checks

from leveret.management_ui.api import openapi_document
from tests.conftest import BrokerProcess
from tests.integration.conftest import HttpApi

MAX_EXAMPLES = 6
CHECKS = [checks.not_a_server_error, checks.status_code_conformance,
          checks.content_type_conformance, checks.response_schema_conformance]

schema = schemathesis.openapi.from_dict(openapi_document())


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("fuzzed")
    b = BrokerProcess(base / "data", base / "broker.log").start()
    api = HttpApi(b.api_url + "/api")
    assert api.put("/queues/%2F/q", {"durable": True})[0] == 201
    assert api.put("/exchanges/%2F/x", {"type": "topic"})[0] == 201
    assert api.post("/bindings/%2F/e/x/q/q", {"routing_key": "a.#"})[0] == 201
    assert api.put("/policies/%2F/p", {"pattern": "^q", "definition": {"max-length": 9}})[0] == 201
    assert api.put("/users/u", {"password": "p", "tags": "management"})[0] == 201
    assert api.put("/queues/%2F/other", {})[0] == 201
    for text in ("one", "two", "three"):
        assert api.post("/exchanges/%2F/x/publish", {
            "routing_key": "a.b", "payload": text, "payload_encoding": "string",
            "properties": {}})[2] == {"routed": True}
    yield b
    code = b.stop()
    log = b.log_text()
    assert code == 0 and "Traceback" not in log, log[-4000:]


def test_the_served_document_is_the_one_tested(fuzzed: BrokerProcess) -> None:
    with urllib.request.urlopen(fuzzed.api_url + "/api/openapi.json", timeout=10) as resp:
        assert json.loads(resp.read()) == json.loads(json.dumps(openapi_document()))


# One test per operation, parametrized by pytest itself: schemathesis's own
# ``schema.parametrize()`` collapses to a single item under pytest-xdist that exercises none.
OPERATIONS = [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.label)
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_api_conforms(operation: Any, data: st.DataObject, fuzzed: BrokerProcess) -> None:
    case = data.draw(operation.as_strategy())
    session = requests.Session()
    session.auth = ("guest", "guest")
    if case.operation.path.endswith("/stream"):
        pytest.skip("an endless event stream (tests/integration/test_console_tracing.py)")
    chosen = CHECKS
    if case.operation.path.startswith(("/api/health/", "/api/aliveness-test/")):
        chosen = CHECKS[1:]  # 503 is a health check's documented "failed" answer
    case.call_and_validate(base_url=fuzzed.api_url, session=session, checks=chosen, timeout=10)


def test_what_schemathesis_found_is_fixed(fuzzed: BrokerProcess) -> None:
    """Each was a 500 or a non-JSON answer before."""
    api = HttpApi(fuzzed.api_url + "/api")
    status, _, body = api.put("/vhosts/tagged", {"tags": [{}]})
    assert status == 400 and body["error"] == "bad_request"
    assert body["reason"].startswith("tags must be a string or a list of strings")
    assert api.get("/vhosts/tagged")[0] == 404  # nothing was created
    status, headers, body = api.request("POST", "/definitions", raw=b"",
                                        headers={"Content-Type": "multipart/form-data"})
    assert (status, body) == (400, {"error": "bad_request", "reason": "not_json"})
    status, headers, body = api.get("/queues/%2F/a%0Ab")  # a newline in a name
    assert (status, headers["Content-Type"]) == (404, "application/json")
    assert body == {"error": "Object Not Found", "reason": "Not Found"}


# Operations on the seeded objects, so their 200 answers are checked against the document
# too (generated names seldom hit an existing queue).
ON_OBJECTS = [
    ("GET", "/api/queues/{vhost}/{name}", {}, None),
    ("POST", "/api/queues/{vhost}/{name}/peek", {}, {"count": 2}),
    ("POST", "/api/queues/{vhost}/{name}/search", {}, {"body_contains": "t"}),
    ("POST", "/api/queues/{vhost}/{name}/get", {},
     {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}),
    ("POST", "/api/queues/{vhost}/{name}/move", {}, {"destination": "other", "positions": [0]}),
    ("DELETE", "/api/queues/{vhost}/{name}/messages", {}, {"positions": [0]}),
    ("GET", "/api/exchanges/{vhost}/{name}", {"name": "x"}, None),
    ("GET", "/api/policies/{vhost}/{name}", {"name": "p"}, None),
]


@pytest.mark.parametrize(("method", "path", "params", "body"), ON_OBJECTS)
def test_answers_on_existing_objects_conform(fuzzed: BrokerProcess, method: str, path: str,
                                             params: dict[str, str], body: Any) -> None:
    session = requests.Session()
    session.auth = ("guest", "guest")
    operation = schema[path][method]
    # "%2F": schemathesis drops a bare "/" path parameter.
    kwargs: dict[str, Any] = {"path_parameters": {"vhost": "%2F", "name": "q", **params}}
    if body is not None:
        kwargs["body"] = body
    response = operation.Case(**kwargs).call_and_validate(
        base_url=fuzzed.api_url, session=session, checks=CHECKS, timeout=10)
    assert response.status_code == 200, response.text
