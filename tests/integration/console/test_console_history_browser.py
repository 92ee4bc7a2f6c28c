"""The console's second pass in a real headless Chromium: charts with history on load,
rates in the lists, connection and channel pages under the name the client gave,
errors that name the object, a not-found page with nothing to act on, no requests the
user may not make, the refreshed-at stamp and interval picker, the favicon.

The broker samples every second here (``collect_statistics_interval``), so history
exists within seconds; every wait is for a state, never for a time.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from tests.conftest import BrokerProcess

from .browser import WAIT, Console, wait_until

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("console-history")
    b = BrokerProcess(base / "data", base / "broker.log",
                      env={"LEVERET_COLLECT_STATISTICS_INTERVAL": "1"}).start()
    try:
        yield b
    finally:
        code = b.stop()
    assert code == 0, b.log_text()[-4000:]
    assert "Traceback" not in b.log_text(), b.log_text()[-4000:]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _api(broker: BrokerProcess, method: str, path: str, body: Any = None,
         user: str = "guest", password: str = "guest") -> Any:
    import base64
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{broker.api_url}/api/{path}", data=data, method=method)
    req.add_header("Authorization", "Basic " + base64.b64encode(
        f"{user}:{password}".encode()).decode())
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req) as resp:
        text = resp.read()
        return json.loads(text) if text else None


def _chart(ui: Console, caption: str) -> dict[str, str]:
    """The chart's data attributes: points drawn, points with a value, where they came from."""
    for fig in ui.all("figure.chart"):
        if fig.find_element(By.TAG_NAME, "figcaption").text == caption:
            return {k: str(fig.get_attribute(f"data-{k}") or "")
                    for k in ("points", "nonzero", "source")}
    return {}


def _requested(ui: Console) -> list[str]:
    return list(ui.driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"))


def test_queue_page_draws_history_at_once_and_the_list_shows_rates(ui: Console, channel,
                                                                  broker) -> None:
    q = _name("hist")
    channel.queue_declare(q)
    for _ in range(30):
        channel.basic_publish("", q, b"x")
    path = f"queues/%2F/{q}?lengths_age=300&lengths_incr=5"
    # The broker has history of the 30 messages (two 5-second points) before the page opens.
    # Two samples 5 s apart after the publishes: up to 10 s, more on a busy machine.
    wait_until(lambda: [s["sample"] for s in _api(broker, "GET", path)["messages_details"]
                        ["samples"][:2]] == [30, 30], 60)
    ui.login()
    ui.go(f"/queues/%2F/{q}")
    ui.wait_text("Message rates")
    # The first draw is the broker's 5 minutes (61 points at 5 s), with the 30 messages in
    # more than one of them: history, not one point at the right edge.
    ui.wait(lambda d: _chart(ui, "Queued messages").get("source") == "history", "history")
    queued = _chart(ui, "Queued messages")
    assert int(queued["points"]) == 61 and int(queued["nonzero"]) >= 2, queued
    assert _chart(ui, "Message rates")["source"] == "history"
    ui.screenshot("queue-history")
    ui.go("/queues")
    row = ui.row(q)
    for column in ("Incoming", "Deliver / get", "Ack", "Redelivered"):
        assert row[column].endswith("/s"), row
    assert row["State"] == "running"
    ui.screenshot("queues-rates")


def test_overview_charts_start_with_the_brokers_history(ui: Console, channel, broker) -> None:
    q = _name("ov")
    channel.queue_declare(q)
    channel.basic_publish("", q, b"m")
    wait_until(lambda: _api(broker, "GET", "overview?lengths_age=300&lengths_incr=5")
               ["queue_totals"]["messages_details"]["samples"][1]["sample"] > 0, WAIT)
    ui.login()
    ui.wait_text("Message rates")
    ui.wait(lambda d: _chart(ui, "Queued messages").get("source") == "history", "history")
    assert int(_chart(ui, "Queued messages")["nonzero"]) >= 2
    assert _chart(ui, "Message rates")["source"] == "history"
    ui.screenshot("overview-history")


def test_exchange_page_has_a_rate_chart_and_the_list_rate_columns(ui: Console, channel,
                                                                 broker) -> None:
    x = _name("ex")
    channel.exchange_declare(x, "fanout")
    q = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(q, x)
    for _ in range(12):
        channel.basic_publish(x, "", b"y")
    wait_until(lambda: _api(broker, "GET", f"exchanges/%2F/{x}").get("message_stats", {})
               .get("publish_in") == 12, WAIT)
    ui.login()
    ui.go(f"/exchanges/%2F/{x}")
    ui.wait_text("12 messages in")
    ui.wait_text("12 routed out")
    ui.wait(lambda d: _chart(ui, "Message rates").get("source") == "history", "history")
    ui.screenshot("exchange-rates")
    ui.go("/exchanges")
    row = ui.row(x)
    assert row["Rate in"].endswith("/s") and row["Rate out"].endswith("/s")


def test_connection_and_channel_pages_under_the_clients_name(ui: Console, broker) -> None:
    app = _name("orders-app")
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", broker.port, client_properties={"connection_name": app}))
    try:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_consume(q, lambda *a: None, consumer_tag="orders-consumer")
        ch.basic_publish("", q, b"z" * 2000)
        conn.process_data_events(0.2)
        ui.login()
        ui.go("/connections")
        row = ui.row(app)
        assert "->" in row["Name"]  # the address beside the name the client gave
        assert row["From client"].endswith("B/s"), row  # a byte rate with its unit
        ui.click_in_row(app, "a")
        ui.wait(lambda d: d.find_element(By.TAG_NAME, "h1").text == app, "connection page")
        ui.wait_text("Client properties")
        ui.wait_text("connection_name")
        ui.wait_text("orders-consumer")
        text = ui.text()
        assert "Data rates" in text and "B/s" in text
        ui.wait(lambda d: _chart(ui, "Data rates").get("source") == "history", "history")
        ui.screenshot("connection-page")
        # Its channel: the consumer, and the connection named as the client named it.
        ui.find("a[href^='#/channels/']").click()
        ui.wait(lambda d: d.find_element(By.TAG_NAME, "h1").text == "Channel 1", "channel page")
        ui.wait_text("orders-consumer")
        assert app in ui.text()
        ui.screenshot("channel-page")
        # The channels and consumers lists name the connection as the client did.
        ui.go("/channels")
        ui.row(app)
        ui.go("/consumers")
        assert app in ui.row("orders-consumer")["Channel"]
    finally:
        if conn.is_open:
            conn.close()


def test_a_wrong_password_is_said_plainly(ui: Console) -> None:
    ui.open("/")
    ui.driver.execute_script("sessionStorage.clear()")
    ui.driver.refresh()
    ui.fill("form.login input[name=username]", "guest")
    ui.fill("form.login input[name=password]", "wrong")
    ui.find("form.login button[type=submit]").click()
    error = ui.find("form.login .error").text
    assert error == "Login failed: unknown user 'guest' or wrong password."
    ui.screenshot("login-failed-text")


def test_a_missing_queue_gets_a_not_found_page_with_nothing_to_act_on(ui: Console) -> None:
    ui.login()
    ui.go("/queues/%2F/no-such-queue")
    ui.wait_text("No queue 'no-such-queue' in vhost '/'.")
    buttons = [b.text for b in ui.all("main button")]
    assert not {"Purge messages", "Delete queue", "Bind", "Peek"} & set(buttons), buttons
    assert "(AMQP default)" not in ui.text()  # no made-up binding
    ui.screenshot("queue-not-found")
    ui.go("/exchanges/%2F/no-such-exchange")
    ui.wait_text("No exchange 'no-such-exchange' in vhost '/'.")
    assert "Publish message" not in [b.text for b in ui.all("main button")]


def test_a_management_user_never_asks_for_node_health(ui: Console, broker) -> None:
    user, password = _name("mgmt"), "pw"
    _api(broker, "PUT", f"users/{user}", {"password": password, "tags": "management"})
    _api(broker, "PUT", f"permissions/%2F/{user}", {"configure": ".*", "write": ".*",
                                                    "read": ".*"})
    ui.login(user, password)
    ui.choose("select.interval", "every 2 s")
    ui.wait_text("Node health needs the monitoring or administrator tag.")
    # Three overview reads, and not one of /api/nodes.
    ui.wait(lambda d: sum("/api/overview" in u for u in _requested(ui)) >= 3, "three refreshes")
    assert not [u for u in _requested(ui) if "/api/nodes" in u]
    # No Trace or Log page offered; opened by its address, it says why, and asks nothing.
    nav = ui.driver.find_element(By.ID, "nav").text
    assert "Trace" not in nav and "Log" not in nav and "Admin" not in nav
    ui.go("/trace")
    ui.wait_text(f"User '{user}' cannot open this page: it needs the monitoring or "
                 "administrator tag.")
    assert not [u for u in _requested(ui) if "/api/traces" in u or "/api/nodes" in u]
    ui.choose("select.interval", "every 5 s")
    ui.logout()


def test_a_user_with_no_vhost_is_told_so_and_offered_no_form(ui: Console, broker) -> None:
    user, password = _name("nobody"), "pw"
    _api(broker, "PUT", f"users/{user}", {"password": password, "tags": "management"})
    ui.login(user, password)
    ui.go("/queues")
    ui.wait_text(f"User '{user}' has no permissions in any vhost")
    assert "Add a queue" not in ui.text()
    ui.screenshot("queues-no-vhost")
    ui.go("/exchanges")
    ui.wait_text(f"User '{user}' has no permissions in any vhost")
    assert "Add an exchange" not in ui.text()
    ui.logout()


def test_refreshed_stamp_and_the_interval_picker(ui: Console) -> None:
    ui.login()
    ui.go("/queues")
    stamp = ui.find("#session .refreshed")
    ui.wait(lambda d: stamp.text.startswith("Refreshed at "), "a stamp")
    ui.choose("select.interval", "every 2 s")
    first = stamp.get_attribute("data-at")
    ui.wait(lambda d: stamp.get_attribute("data-at") != first, "a refresh")
    ui.driver.refresh()  # remembered in this browser
    picker = ui.find("select.interval")
    assert picker.get_attribute("value") == "2000"
    ui.choose("select.interval", "paused")
    ui.screenshot("refresh-picker")
    ui.choose("select.interval", "every 5 s")


def test_a_favicon_is_served(broker) -> None:
    for path in ("/favicon.ico", "/console/favicon.svg"):
        with urllib.request.urlopen(broker.api_url + path) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("image/svg+xml")
            assert b"<svg" in resp.read()
    with urllib.request.urlopen(broker.api_url + "/") as resp:
        assert 'rel="icon"' in resp.read().decode()


def _visible_rows(ui: Console) -> list[str]:
    return [str(tr.text) for tr in ui.all("table.trace tbody tr") if tr.is_displayed()]


def test_tracing_follows_a_message_into_its_dead_letter_queue(ui: Console, channel) -> None:
    q = _name("work")
    dlq = q + "-dlq"
    channel.queue_declare(dlq)
    channel.queue_declare(q, arguments={"x-dead-letter-exchange": "",
                                        "x-dead-letter-routing-key": dlq})
    ui.login()
    ui.go("/trace")
    ui.click("Start tracing")
    status = ui.find("p.trace-status")
    ui.wait(lambda d: "following live" in status.text, "tracing live")
    assert status.text.startswith("Tracing all queues in vhost '/'")
    channel.basic_publish("", q, b"doomed", pika.BasicProperties(message_id=q + "-m"))
    method, _, _ = channel.basic_get(q)
    channel.basic_reject(method.delivery_tag, requeue=False)
    ui.wait_text(f"dead-lettered from {q} (rejected): (default) ⇒ {dlq}")
    # Details are fields, not a JSON line.
    assert ui.all("table.trace dl.fields dt") and "{" not in ui.row("dead-lettered from")["Details"]
    # The filter narrows the live view to the dead-letter queue's events.
    ui.fill("input[name=trace-filter]", dlq)
    ui.wait(lambda d: _visible_rows(ui) and all(dlq in r for r in _visible_rows(ui)),
            "only the DLQ's events")
    ui.screenshot("trace-dead-letter")
    box = ui.find("input[name=trace-filter]")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)  # as a user clears it (fires the input event)
    ui.wait(lambda d: any(dlq not in r for r in _visible_rows(ui)), "every event again")
    shown = len(_visible_rows(ui))
    # Stopping warns that the broker's ring goes, and the page keeps what it shows.
    ui.click("Stop tracing")
    dialog = ui.find("dialog.confirm")
    assert "discards" in dialog.text and "stay on this page" in dialog.text
    ui.confirm("Stop tracing")
    ui.wait(lambda d: status.text.startswith("Tracing is off in vhost '/'"), "tracing off")
    assert f"The {shown} event(s) shown below stay on this page" in status.text
    assert len(_visible_rows(ui)) == shown
    ui.click("Clear")
    ui.wait(lambda d: not _visible_rows(ui), "cleared")


def test_list_state_is_in_the_url_and_survives_a_reload(ui: Console, channel) -> None:
    prefix = _name("urlstate")
    for i in range(3):
        channel.queue_declare(f"{prefix}-{i}")
        for _ in range(i):
            channel.basic_publish("", f"{prefix}-{i}", b"m")
    ui.login()
    ui.go("/queues")
    ui.fill("section.list input[type=search]", prefix)
    ui.click("Total")  # sort by total, ascending, then descending
    ui.wait(lambda d: "sort=messages" in d.current_url, "sort in the URL")
    ui.click("Total ▲")
    ui.wait(lambda d: "reverse=true" in d.current_url, "order in the URL")
    assert f"name={prefix}" in ui.driver.current_url
    ui.driver.refresh()
    ui.wait(lambda d: ui.find("section.list input[type=search]").get_attribute("value") == prefix,
            "the filter back")
    # Filtered, by total, largest first: as it was before the reload.
    names = ui.wait(lambda d: [n for n in (a.text for a in ui.all("tbody tr td a"))
                               if n.startswith(prefix)] or None, "names")
    assert names == [f"{prefix}-2", f"{prefix}-1", f"{prefix}-0"]
    assert ui.find("th[aria-sort=descending]").text == "Total ▼"
    ui.screenshot("queues-url-state")


def test_inspector_position_is_in_the_url_and_times_are_readable(ui: Console, channel) -> None:
    q = _name("inspect-url")
    dlq = q + "-dlq"
    channel.queue_declare(dlq)
    channel.queue_declare(q, arguments={"x-dead-letter-exchange": "",
                                        "x-dead-letter-routing-key": dlq})
    for i in range(5):
        channel.basic_publish("", q, f"m{i}".encode(),
                              pika.BasicProperties(timestamp=1_700_000_000 + i))
    for _ in range(5):
        method, _, _ = channel.basic_get(q)
        channel.basic_reject(method.delivery_tag, requeue=False)
    ui.login()
    ui.go(f"/queues/%2F/{dlq}")
    ui.wait_text("Messages")
    ui.fill("input[name=offset]", "2")
    ui.fill("input[name=count]", "2")
    ui.click("Peek")
    ui.find("article.message[data-position='2']")
    assert "offset=2" in ui.driver.current_url and "count=2" in ui.driver.current_url
    ui.driver.refresh()  # the same messages, without a click
    ui.find("article.message[data-position='2']")
    positions = [a.get_attribute("data-position") for a in ui.all("article.message")]
    assert positions == ["2", "3"]
    message = ui.find("article.message[data-position='2']")
    message.find_element(By.CSS_SELECTOR, "details summary").click()  # its properties
    ui.wait(lambda d: "2023-11-14 22:13:22 UTC" in message.text,  # 1700000002, not epoch s
            "a readable timestamp")
    death_time = ui.find("table.x-death tbody td:last-child").text
    assert death_time.endswith(" UTC") and death_time[:2] == "20", death_time
    ui.screenshot("inspector-url-readable-times")


def test_log_page_shows_the_last_lines_at_once_with_time_and_level(ui: Console) -> None:
    ui.login()
    ui.go("/log")
    ui.wait_text("Broker log")
    ui.choose("select[name=log-level]", "info and up")
    # The broker's start-up lines were written before the page opened: shown at once.
    ui.wait(lambda d: any("listening for" in line.text for line in ui.all("div.log-line")),
            "the last lines")
    line = next(x for x in ui.all("div.log-line") if "listening for" in x.text)
    assert line.get_attribute("data-level") == "info"
    assert line.find_element(By.CSS_SELECTOR, ".log-level").text.strip() == "INFO"
    assert len(line.find_element(By.CSS_SELECTOR, ".log-time").text) == len("14:02:03.123")
    ui.screenshot("log-levels")
    ui.choose("select[name=log-level]", "error and up")
    ui.wait(lambda d: not any("listening for" in x.text for x in ui.all("div.log-line")),
            "info lines gone")
    ui.choose("select[name=log-level]", "info and up")


def test_a_refused_action_names_the_queue_and_the_right(ui: Console, channel, broker) -> None:
    q = _name("guarded")
    channel.queue_declare(q)
    user, password = _name("readless"), "pw"
    _api(broker, "PUT", f"users/{user}", {"password": password, "tags": "management"})
    _api(broker, "PUT", f"permissions/%2F/{user}", {"configure": "", "write": "", "read": ".*"})
    ui.login(user, password)
    ui.go(f"/queues/%2F/{q}")
    ui.wait_text("Purge or delete")
    # Purge is offered (read), then read is revoked while the page is open: the broker's
    # refusal is explained in place, naming the queue and the right.
    _api(broker, "PUT", f"permissions/%2F/{user}", {"configure": "", "write": "", "read": ""})
    ui.click("Purge messages")
    ui.confirm("Purge")
    ui.wait_text(f"Access to queue '{q}' in vhost '/' refused for user '{user}': it needs the "
                 "read permission.")
    ui.screenshot("purge-refused")
    # The next page knows: Purge is no longer offered, and says why.
    ui.go("/queues")
    ui.wait_text("Add a queue")
    ui.go(f"/queues/%2F/{q}")
    ui.wait_text(f"Purge messages needs read on queue '{q}' in vhost '/'.")
    ui.logout()


def test_the_new_pages_fit_a_narrow_window(ui: Console, broker) -> None:
    app = _name("narrow-app")
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", broker.port, client_properties={"connection_name": app}))
    try:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_consume(q, lambda *a: None, consumer_tag="narrow-consumer")
        ui.login()
        ui.driver.set_window_size(480, 900)
        name = next(c["name"] for c in _api(broker, "GET", "connections")
                    if c.get("user_provided_name") == app)
        channel_name = f"{name} (1)"
        for page, marker, shot in ((f"/queues/%2F/{q}", "Message rates", "queue-narrow"),
                                   (f"/connections/{name}", "Client properties",
                                    "connection-narrow"),
                                   (f"/channels/{channel_name}", "narrow-consumer",
                                    "channel-narrow")):
            ui.go(page.replace(" ", "%20"))
            ui.wait_text(marker)
            # Waited for, not read once: a page drawn in parts settles after its marker shows.
            ui.wait(lambda d: d.execute_script(
                "return document.documentElement.scrollWidth") <= 500,
                f"{page} to fit a 480px window")
            ui.screenshot(shot)
    finally:
        ui.driver.set_window_size(1280, 800)
        if conn.is_open:
            conn.close()
