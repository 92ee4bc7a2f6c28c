"""The console's "beyond RabbitMQ" pages in a real headless Chromium.

Peek, search, redrive and trace, each done in the browser and checked with pika:
peeking changes nothing (same order, ``redelivered`` false), redriven messages
are consumed from their origin queue. One browser for the module; every page's
browser log must be free of JavaScript errors.
"""

from __future__ import annotations

import re
import time
import uuid

import pika
import pytest
from selenium.webdriver.common.by import By

from .browser import Console, wait_until

pytestmark = pytest.mark.timeout(300)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _messages(ui: Console, count: int) -> list:
    return ui.wait(lambda d: (lambda found: found if len(found) == count else None)(
        d.find_elements(By.CSS_SELECTOR, "article.message")), f"{count} messages shown")


def test_peek_shows_three_messages_and_changes_nothing(ui: Console, channel) -> None:
    queue = _name("ui-peek")
    channel.queue_declare(queue)
    for i in range(4):
        channel.basic_publish("", queue, f'{{"n": {i}}}'.encode(),
                              pika.BasicProperties(message_id=f"p{i}", headers={"k": i}))
    ui.login()
    ui.go(f"/queues/%2F/{queue}")
    ui.wait_text("Peek and search read the queue")
    ui.fill("input[name=count]", "3")
    ui.click("Peek")
    shown = _messages(ui, 3)
    assert [m.get_attribute("data-position") for m in shown] == ["0", "1", "2"]
    assert '{"n": 0}' in shown[0].text and "redelivered no" in shown[0].text
    ui.choose("select[name=view]", "JSON")
    ui.wait(lambda d: '"n": 1' in d.find_elements(By.CSS_SELECTOR, "article.message")[1].text,
            "pretty JSON")
    ui.screenshot("queue-peek-json")
    ui.choose("select[name=view]", "hex")
    ui.wait(lambda d: "7b 22 6e 22" in d.find_element(By.CSS_SELECTOR, "article.message").text,
            "hex dump")
    # The queue is as it was: same order, nothing redelivered, nothing held.
    seen = []
    for _ in range(4):
        method, props, _body = channel.basic_get(queue, auto_ack=True)
        seen.append((props.message_id, method.redelivered))
    assert seen == [("p0", False), ("p1", False), ("p2", False), ("p3", False)]


def test_search_by_message_id_finds_only_that_message(ui: Console, channel) -> None:
    queue = _name("ui-search")
    channel.queue_declare(queue)
    for i in range(6):
        channel.basic_publish("", queue, f"body {i}".encode(),
                              pika.BasicProperties(message_id=f"s{i}"))
    ui.login()
    ui.go(f"/queues/%2F/{queue}")
    ui.fill("input[name=message_id]", "s4")
    ui.click("Search")
    ui.wait_text("1 found.")
    (found,) = _messages(ui, 1)
    assert found.get_attribute("data-position") == "4" and "body 4" in found.text
    ui.screenshot("queue-search")
    assert channel.queue_declare(queue, passive=True).method.message_count == 6


def test_a_streams_log_is_peeked_by_offset_and_time_with_no_action_offered(
        ui: Console, channel) -> None:
    stream = _name("ui-stream")
    channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    channel.confirm_delivery()
    for i in range(5):
        channel.basic_publish("", stream, b"early %d" % i)
    # The time field has seconds: the later chunks arrive in a later second than these.
    later = int(time.time()) + 1
    wait_until(lambda: time.time() >= later)
    for i in range(5):
        channel.basic_publish("", stream, b"late %d" % i)
    ui.login()
    ui.go(f"/queues/%2F/{stream}")
    ui.wait_text("read the stream's log by offset or arrival time")
    assert not ui.all("select[name=state]")  # a log has no ready or unacked messages
    assert not [b for b in ui.all("button") if b.text in ("Delete selected", "Move selected")]
    ui.fill("input[name=offset]", "3")
    ui.fill("input[name=count]", "4")
    ui.click("Peek")
    shown = _messages(ui, 4)
    assert [m.get_attribute("data-position") for m in shown] == ["3", "4", "5", "6"]
    assert "offset 3" in shown[0].text and "arrived " in shown[0].text
    assert "early 3" in shown[0].text and "late 1" in shown[3].text
    assert not ui.all("article.message input[type=checkbox]")
    since = ui.find("input[name=timestamp]")
    ui.driver.execute_script(  # the browser's local time of second ``later``
        "const d = new Date(arguments[1] * 1000);"
        "arguments[0].value = new Date(d - d.getTimezoneOffset() * 60000)"
        ".toISOString().slice(0, 19);", since, later)
    ui.click("Peek")
    ui.wait(lambda d: d.find_element(By.CSS_SELECTOR, "article.message")
            .get_attribute("data-position") == "5", "the first message of the later chunks")
    assert ui.find("input[name=offset]").get_attribute("value") == "5"
    ui.screenshot("stream-peek")
    # Nothing was taken: a consumer from "first" starts at offset 0.
    channel.basic_qos(prefetch_count=1)
    got: list[int] = []
    channel.basic_consume(stream, lambda ch, m, props, body: got.append(
        props.headers["x-stream-offset"]), arguments={"x-stream-offset": "first"})
    wait_until(lambda: channel.connection.process_data_events(time_limit=0.05) or got)
    assert got[0] == 0
    channel.queue_delete(stream)


def test_redrive_dead_letters_home_from_the_ui(ui: Console, channel) -> None:
    origin, dlq = _name("ui-origin"), _name("ui-dlq")
    channel.queue_declare(dlq)
    channel.queue_declare(origin, arguments={"x-dead-letter-exchange": "",
                                             "x-dead-letter-routing-key": dlq})
    for i in range(2):
        channel.basic_publish("", origin, f"order {i}".encode(),
                              pika.BasicProperties(message_id=f"o{i}"))
    for _ in range(2):
        method, _props, _body = channel.basic_get(origin)
        channel.basic_reject(method.delivery_tag, requeue=False)
    assert channel.queue_declare(dlq, passive=True).method.message_count == 2
    ui.login()
    ui.go(f"/queues/%2F/{dlq}")
    ui.click("Peek")
    shown = _messages(ui, 2)
    death = shown[0].find_element(By.CSS_SELECTOR, "table.x-death")
    assert origin in death.text and "rejected" in death.text
    ui.screenshot("queue-dead-letters")
    for box in ui.all("article.message input[type=checkbox]"):
        box.click()
    ui.click("Redrive selected")
    ui.wait_text("Redrive: 2 message(s).")
    ui.screenshot("queue-redriven")
    assert channel.queue_declare(dlq, passive=True).method.message_count == 0
    got = []
    for _ in range(2):
        _method, props, body = channel.basic_get(origin, auto_ack=True)
        got.append((props.message_id, body))
    assert got == [("o0", b"order 0"), ("o1", b"order 1")]


def test_trace_one_message_from_publish_to_ack(ui: Console, channel) -> None:
    queue, message_id = _name("ui-trace"), _name("traced")
    channel.queue_declare(queue)
    ui.login()
    ui.go("/trace")
    ui.wait_text("Start tracing")
    ui.click("Start tracing")
    ui.wait_text("Tracing on.")
    channel.basic_publish("", queue, b"follow me", pika.BasicProperties(message_id=message_id))
    method, _props, _body = channel.basic_get(queue)
    channel.basic_ack(method.delivery_tag)
    # Live over SSE: the events show up in the table as they happen.
    ui.wait(lambda d: "ack" in [b.text for b in d.find_elements(By.CSS_SELECTOR, "table.trace .badge")],
            "live ack event")
    ui.fill("input[name=trace-message-id]", message_id)
    ui.click("Find message")
    ui.wait_text(f"event(s) for {message_id}.")
    events = [b.text for b in ui.all("table.trace .badge")]
    assert events[0] == "publish" and events[-1] == "ack", events
    assert "deliver" in events
    # The route event reads as a chain: the default exchange, then the queue it reached.
    chains = [c.text for c in ui.all("table.trace .route-chain")]
    assert chains == [f"(default) ⇒ {queue}"], chains
    # The ring's fill as the API reports it (a wrong field name once showed "undefined").
    ui.wait(lambda d: re.search(r"the broker's ring holds [1-9]\d* of 10000 records",
                                d.find_element(By.TAG_NAME, "body").text), "ring fill")
    ui.screenshot("trace")
    ui.click("Stop tracing")
    ui.confirm("Stop tracing")
    ui.wait_text("Tracing off in vhost '/'")


def test_move_selected_and_delete_first_n_from_the_ui(ui: Console, channel) -> None:
    source, target = _name("ui-src"), _name("ui-dst")
    channel.queue_declare(source)
    channel.queue_declare(target)
    for i in range(5):
        channel.basic_publish("", source, f"m{i}".encode(), pika.BasicProperties(message_id=f"m{i}"))
    ui.login()
    ui.go(f"/queues/%2F/{source}")
    ui.click("Peek")
    shown = _messages(ui, 5)
    for article in (shown[1], shown[3]):
        article.find_element(By.CSS_SELECTOR, "input[type=checkbox]").click()
    ui.fill("input[name=destination]", target)
    ui.click("Move selected")
    ui.wait_text("Move: 2 message(s).")
    _messages(ui, 3)
    ui.fill("input[name=first_n]", "1")
    ui.click("Delete first N")
    ui.confirm("Delete")
    ui.wait_text("Delete: 1 message(s).")
    ui.screenshot("queue-moved-and-deleted")

    def drain(queue: str) -> list[str]:
        out = []
        while True:
            _method, props, _body = channel.basic_get(queue, auto_ack=True)
            if props is None:
                return out
            out.append(props.message_id)
    assert drain(target) == ["m1", "m3"]
    assert drain(source) == ["m2", "m4"]



def test_live_log_shows_what_the_broker_logs(ui: Console, channel) -> None:
    ui.login()
    ui.go("/log")
    ui.wait_text("Broker log")
    ui.choose("select[name=log-level]", "debug and up")  # declarations are logged at debug
    # The stream attaches when the page's request arrives: declare until a line shows up
    # (a try every 2 s, for as long as a busy machine needs: a hang guard, not a budget).
    for _ in range(60):
        queue = _name("ui-logged")
        channel.queue_declare(queue)  # logged at debug level, the tests' broker level
        try:
            ui.wait(lambda d, q=queue: q in d.find_element(By.CSS_SELECTOR, "div.log").text,
                    "log line", timeout=2)
            break
        except AssertionError:
            continue
    else:
        pytest.fail("no declaration reached the console's live log")
    ui.screenshot("log")
