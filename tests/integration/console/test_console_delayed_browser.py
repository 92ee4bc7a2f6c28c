"""A delayed exchange's schedule on its console page, in a real headless Chromium.

Messages scheduled with pika are listed by due time; Cancel, Release now (a consumer gets
the message, with the plugin's negative ``x-delay``) and Cancel all are done in the
browser and checked over AMQP. A user without configure on the exchange sees the list and
no actions; without read, no list. Delays are minutes long, so nothing falls due by itself
while a test runs.
"""

from __future__ import annotations

import uuid

import pika
import pytest
from selenium.webdriver.common.by import By

from tests.integration.conftest import HttpApi

from .browser import Console, wait_until

pytestmark = pytest.mark.timeout(120)

ROWS = "section.delayed tbody tr"


def _schedule(channel, delays: dict[str, int]) -> str:
    """A delayed direct exchange bound to a queue of the same name, holding one message
    per body (routing key ``k``) with its delay in ms; returns the name."""
    name = f"ui-delayed-{uuid.uuid4().hex[:8]}"
    channel.confirm_delivery()
    channel.exchange_declare(name, "x-delayed-message", durable=True,
                             arguments={"x-delayed-type": "direct"})
    channel.queue_declare(name, durable=True)
    channel.queue_bind(name, name, "k")
    for body, delay in delays.items():
        channel.basic_publish(name, "k", body.encode(), pika.BasicProperties(
            headers={"x-delay": delay}, content_type="text/plain"))
    return name


def _bodies(ui: Console, count: int) -> list[str]:
    """The first line of each listed message, in the order shown, once ``count`` are."""
    def listed(d):
        rows = d.find_elements(By.CSS_SELECTOR, ROWS)
        if len(rows) != count:
            return None
        return [r.find_element(By.CSS_SELECTOR, "td[data-label=Message] summary").text
                for r in rows]
    return list(ui.wait(listed, f"{count} scheduled messages listed"))


def _shot(ui: Console, name: str) -> None:
    """A screenshot with the schedule in view (it is below the exchange's chart)."""
    ui.driver.execute_script("arguments[0].scrollIntoView()", ui.find("section.delayed"))
    ui.screenshot(name)


def test_list_cancel_release_now_and_cancel_all(ui: Console, channel) -> None:
    name = _schedule(channel, {"alpha": 600_000, "bravo": 300_000, "charlie": 900_000})
    ui.login()
    ui.go(f"/exchanges/%2F/{name}")
    ui.wait_text("Messages delayed: 3")
    ui.wait_text("3 messages delayed.")
    assert [b.split()[0] for b in _bodies(ui, 3)] == ["bravo", "alpha", "charlie"]
    first = ui.row("bravo")
    assert first["Routing key"] == "k" and first["Size"] == "5 B"
    assert "UTC (in 5 min)" in first["Due"], first
    assert "x-delay: 300000" in first["Message"]
    _shot(ui, "exchange-delayed-list")

    ui.click_in_row("alpha", "button.danger")
    ui.confirm("Cancel message")
    ui.wait_text("Message cancelled.")
    assert [b.split()[0] for b in _bodies(ui, 2)] == ["bravo", "charlie"]

    ui.click_in_row("charlie", "summary")  # its peek stays open across redraws
    ui.click_in_row("bravo", "button:not(.danger)")
    ui.wait_text("Released: routed now.")
    got = wait_until(lambda: (lambda m: m if m[0] else None)(
        channel.basic_get(name, auto_ack=True)))
    _method, props, body = got
    assert body == b"bravo" and props.headers == {"x-delay": -300_000}
    assert [b.split()[0] for b in _bodies(ui, 1)] == ["charlie"]
    assert '"content_type": "text/plain"' in ui.row("charlie")["Message"]
    _shot(ui, "exchange-delayed-after-release")

    ui.click("Cancel all")
    ui.confirm("Cancel all")
    ui.wait_text("Every scheduled message cancelled.")
    ui.wait_text("Nothing scheduled.")
    ui.wait_text("Messages delayed: 0")
    _shot(ui, "exchange-delayed-cancelled")
    # Nothing else was ever delivered: alpha and charlie are gone, not released.
    assert channel.queue_declare(name, durable=True, passive=True).method.message_count == 0


def test_without_configure_the_list_only_and_without_read_nothing(ui: Console, broker,
                                                                  channel) -> None:
    name = _schedule(channel, {"delta": 600_000})
    admin = HttpApi(broker.api_url + "/api")
    user = name + "-viewer"
    assert admin.put(f"/users/{user}", {"password": "pw", "tags": "management"})[0] in (201, 204)
    grant = {"configure": "^$", "write": ".*", "read": ".*"}
    assert admin.put(f"/permissions/%2F/{user}", grant)[0] in (201, 204)
    ui.login(user, "pw")
    ui.go(f"/exchanges/%2F/{name}")
    ui.wait_text("1 message delayed.")
    assert "delta" in ui.row("delta")["Message"]
    section = ui.find("section.delayed")
    assert [b.text for b in section.find_elements(By.TAG_NAME, "button") if b.is_displayed()] == []
    _shot(ui, "exchange-delayed-read-only")

    assert admin.put(f"/permissions/%2F/{user}", {**grant, "read": "^$"})[0] in (201, 204)
    ui.wait(lambda d: not any(s.is_displayed() for s in
                              d.find_elements(By.CSS_SELECTOR, "section.delayed")),
            "the schedule hidden once read is revoked")
    ui.wait_text("Messages delayed: 1")
    assert "delta" not in ui.text()
    assert admin.delete(f"/users/{user}")[0] == 204
    assert channel.queue_declare(name, durable=True, passive=True).method.message_count == 0
