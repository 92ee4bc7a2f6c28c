"""The console offers only what its user may do, in a real headless Chromium.

A management user who may only read queue ``q`` (configure ``^$``, write ``^$``, read
``^q$`` on "/") opens q's page: Peek works; Delete queue (configure), Move selected (write
on the default exchange), Bind (write on q) and the default exchange's Publish (write on
``amq.default``) are disabled, each naming the right it needs, in a tooltip and a line
below. Purge stays offered: queue.purge needs read, as in RabbitMQ, and the broker is the
judge the console follows. An administrator with every permission sees all of them enabled.
"""

from __future__ import annotations

from typing import Any

import pika
import pytest
from selenium.webdriver.common.by import By

from tests.integration.conftest import HttpApi

from .browser import Console

pytestmark = pytest.mark.timeout(120)

READER = "reader"
QUEUE = "q"
NEEDS_CONFIGURE = "needs configure on queue 'q' in vhost '/'"
NEEDS_DEFAULT_WRITE = "needs write on exchange 'amq.default' in vhost '/'"


def _button(ui: Console, text: str) -> Any:
    """The first displayed button reading ``text``, enabled or not."""
    def found(d: Any) -> Any:
        for b in d.find_elements(By.TAG_NAME, "button"):
            if b.text.strip() == text and b.is_displayed():
                return b
        return None
    return ui.wait(found, f"button {text!r}")


def _state(ui: Console, *texts: str) -> dict[str, tuple[bool, str]]:
    """Each button's (enabled, tooltip)."""
    return {t: (b.is_enabled(), b.get_attribute("title") or "")
            for t in texts for b in [_button(ui, t)]}


@pytest.fixture
def reader(broker: Any, channel: Any) -> None:
    api = HttpApi(broker.api_url + "/api")
    assert api.put(f"/users/{READER}", {"password": "pw", "tags": "management"})[0] in (201, 204)
    assert api.put(f"/permissions/%2F/{READER}",
                   {"configure": "^$", "write": "^$", "read": "^q$"})[0] in (201, 204)
    channel.queue_declare(QUEUE)
    for i in range(3):
        channel.basic_publish("", QUEUE, f"message {i}".encode(),
                              pika.BasicProperties(message_id=f"m{i}"))


def test_a_reader_gets_peek_but_no_configure_or_write_actions(ui: Console, reader: None,
                                                             channel: Any, broker: Any) -> None:
    ui.login(READER, "pw")
    ui.go(f"/queues/%2F/{QUEUE}")
    ui.wait_text("Peek and search read the queue")
    buttons = _state(ui, "Delete queue", "Move selected", "Bind", "Purge messages", "Peek",
                     "Delete selected")
    assert buttons["Delete queue"] == (False, f"Delete queue {NEEDS_CONFIGURE}")
    assert buttons["Move selected"] == (False, f"Move selected {NEEDS_DEFAULT_WRITE}")
    assert buttons["Bind"] == (False, "Bind needs write on queue 'q' in vhost '/'")
    # read on q is what purge, peek and deleting messages need: offered, as the broker allows.
    assert [buttons[t][0] for t in ("Purge messages", "Peek", "Delete selected")] == [True] * 3
    text = ui.text()
    assert f"Delete queue {NEEDS_CONFIGURE}." in text
    assert f"Move selected {NEEDS_DEFAULT_WRITE}." in text
    ui.click("Peek")
    shown = ui.wait(lambda d: (lambda m: m if len(m) == 3 else None)(
        d.find_elements(By.CSS_SELECTOR, "article.message")), "3 messages peeked")
    assert "message 0" in shown[0].text
    ui.screenshot("rights-reader-queue")
    ui.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})",
                             _button(ui, "Delete queue"))
    ui.screenshot("rights-reader-delete-queue")
    # Clicking a disabled button does nothing: the queue is still there, all three messages in it.
    ui.driver.execute_script("arguments[0].click()", _button(ui, "Delete queue"))
    assert ui.all("dialog.confirm") == []
    assert channel.queue_declare(QUEUE, passive=True).method.message_count == 3

    # A new queue's name is judged as it is typed: configure is "^$", so no name may be added.
    ui.go("/queues")
    ui.fill("form.panel input[name=name]", "mine")
    assert _state(ui, "Add queue")["Add queue"] == (
        False, "Add queue needs configure on queue 'mine' in vhost '/'")
    ui.wait_text("Add queue needs configure on queue 'mine' in vhost '/'.")

    ui.go("/exchanges/%2F/amq.default")
    ui.wait_text("Publish a message")
    assert _state(ui, "Publish message")["Publish message"] == (
        False, f"Publish message {NEEDS_DEFAULT_WRITE}")
    ui.screenshot("rights-reader-publish")

    # A permission granted meanwhile shows at the next navigation (whoami is read again).
    api = HttpApi(broker.api_url + "/api")
    assert api.put(f"/permissions/%2F/{READER}",
                   {"configure": "^q$", "write": "^$", "read": "^q$"})[0] == 204
    ui.go(f"/queues/%2F/{QUEUE}")
    ui.wait_text("Peek and search read the queue")
    assert _state(ui, "Delete queue")["Delete queue"] == (True, "")


def test_an_administrator_gets_every_action(ui: Console, reader: None) -> None:
    ui.login()
    ui.go(f"/queues/%2F/{QUEUE}")
    ui.wait_text("Peek and search read the queue")
    buttons = _state(ui, "Delete queue", "Move selected", "Bind", "Purge messages", "Peek",
                     "Redrive all", "Delete first N")
    assert buttons == {t: (True, "") for t in buttons}
    assert "needs " not in ui.text()
    ui.screenshot("rights-admin-queue")
