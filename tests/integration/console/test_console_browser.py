"""The web console in a real headless Chromium against a real Leveret.

One browser for the module. Each test does what a user does (types, clicks) and
checks what a user sees, and, where the console changes the broker, checks the
broker with pika. Every page is screenshotted into ``test-artifacts/console/``
and its browser log read: a JavaScript error anywhere fails the test that saw it.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
import urllib.request
import uuid

import pika
import pytest
from selenium.webdriver.common.by import By

from .browser import Console, wait_until

pytestmark = pytest.mark.timeout(300)

PAGES = [
    ("overview", "/", "Message rates"),
    ("connections", "/connections", "Connections"),
    ("channels", "/channels", "Channels"),
    ("consumers", "/consumers", "Consumers"),
    ("exchanges", "/exchanges", "amq.topic"),
    ("queues", "/queues", "Add a queue"),
    ("admin", "/admin", "Topic permissions"),
    ("api-docs", "/api-docs", "/api/overview"),
    ("trace", "/trace", "Start tracing"),
    ("log", "/log", "Broker log"),
]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_console_is_served_with_its_vendored_files_and_no_outside_source(broker) -> None:
    with urllib.request.urlopen(f"{broker.api_url}/") as response:
        html = response.read().decode()
        csp = response.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert "http://" not in html and "https://" not in html
    for asset in ("/console/app.js", "/console/vendor/uplot/uPlot.iife.min.js",
                  "/console/vendor/uplot/LICENSE"):
        with urllib.request.urlopen(f"{broker.api_url}{asset}") as response:
            assert response.status == 200 and response.read()
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{broker.api_url}/console/../api.py")
    assert missing.value.code == 404


def test_login_refuses_a_wrong_password_in_place_then_logs_in(ui: Console) -> None:
    ui.open("/")
    ui.fill("form.login input[name=username]", "guest")
    ui.fill("form.login input[name=password]", "wrong")
    ui.find("form.login button[type=submit]").click()
    error = ui.find("form.login .error")
    assert "Login failed" in error.text
    ui.screenshot("login-failed")
    ui.fill("form.login input[name=password]", "guest")
    ui.find("form.login button[type=submit]").send_keys("\n")  # keyboard, not mouse
    ui.wait_text("Message rates")
    assert ui.find("#session .who").text == "guest"
    # Remembered for the session: a reload stays logged in.
    ui.driver.refresh()
    ui.wait_text("Message rates")


def test_every_page_loads_without_javascript_errors(ui: Console) -> None:
    ui.login()
    for name, path, marker in PAGES:
        ui.go(path)
        ui.wait_text(marker)
        ui.screenshot(name)
        assert ui.js_errors() == [], name
    ui.go("/")
    ui.wait(lambda d: "Publish:" in d.find_element(By.CSS_SELECTOR, ".chart-legend").text,
            "chart legend")
    assert ui.all(".chart-plot canvas"), "uPlot drew no chart"


def test_queue_declared_with_pika_is_listed_and_has_a_page(ui: Console, channel) -> None:
    queue = _name("ui-seen")
    channel.queue_declare(queue, durable=True, arguments={"x-max-length": 50})
    channel.confirm_delivery()  # all three are in the queue before the page loads
    for i in range(3):
        channel.basic_publish("", queue, f"m{i}".encode())
    ui.login()
    ui.go("/queues")
    ui.fill("section.list input[type=search]", queue)
    row = ui.row(queue)
    assert row["Ready"] == "3" and "Lim" in row["Features"], row
    ui.screenshot("queues-filtered")
    ui.click_in_row(queue, "td a")
    ui.wait(lambda d: d.find_element(By.TAG_NAME, "h1").text == queue, "queue page")
    ui.wait_text("x-max-length: 50")
    ui.wait_text("No consumers on this queue.")
    ui.screenshot("queue-page")


def test_publish_from_the_ui_reaches_a_pika_consumer(ui: Console, channel) -> None:
    queue = _name("ui-pub")
    channel.queue_declare(queue)
    ui.login()
    ui.go("/exchanges/%2F/amq.default")
    ui.wait_text("Publish a message")
    ui.fill("input[name=routing_key]", queue)
    ui.fill("input[name=message_id]", "ui-1")
    ui.fill("input[name=content_type]", "application/json")
    ui.fill("textarea[name=headers]", "source=console\nattempt=2")
    ui.fill("textarea[name=payload]", '{"hello": "from the console"}')
    ui.click("Publish message")
    ui.wait_text("Message published and routed.")
    ui.screenshot("exchange-published")
    _method, props, body = channel.basic_get(queue, auto_ack=True)
    assert body == b'{"hello": "from the console"}'
    assert props.message_id == "ui-1" and props.content_type == "application/json"
    assert props.headers == {"source": "console", "attempt": 2}
    assert props.delivery_mode == 2


def test_create_queue_with_argument_fields_then_purge_and_delete(ui: Console, channel) -> None:
    queue = _name("ui-made")
    ui.login()
    ui.go("/queues")
    ui.fill("input[name=name]", queue)
    ui.fill("input[name=x-message-ttl]", "60000")
    ui.fill("input[name=x-max-length]", "10")
    ui.click("Add queue")
    ui.wait_text(f"Queue {queue} added.")
    declared = channel.queue_declare(queue, passive=True)
    assert declared.method.message_count == 0
    channel.basic_publish("", queue, b"x")
    ui.go(f"/queues/%2F/{queue}")
    ui.wait_text("x-message-ttl: 60000")
    ui.click("Purge messages")
    ui.screenshot("confirm-purge")
    ui.confirm("Purge")
    ui.wait_text("Queue purged.")
    assert channel.queue_declare(queue, passive=True).method.message_count == 0
    ui.click("Delete queue")
    ui.click("Cancel", ui.find("dialog.confirm"))  # cancelling deletes nothing
    assert channel.queue_declare(queue, passive=True)
    ui.click("Delete queue")
    ui.confirm("Delete")
    ui.wait(lambda d: d.current_url.endswith("#/queues"), "back to the list")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        channel.queue_declare(queue, passive=True)


def test_create_a_user_and_log_in_as_that_user(ui: Console, broker) -> None:
    user, password = _name("ann"), "s3cret-ü"
    ui.login()
    ui.go("/admin")
    ui.wait_text("Add or update a user")
    ui.fill("input[name=username]", user)
    ui.fill("input[name=new-password]", password)
    ui.find("input[name=tag-management]").click()
    ui.click("Save user")
    ui.wait_text(f"User {user} saved.")
    ui.fill("input[name=perm-user]", user)
    ui.click("Set permissions")
    ui.wait_text("Permissions set.")
    ui.screenshot("admin-user-added")
    ui.logout()
    ui.login(user, password)
    assert ui.find("#session .who").text == user
    nav = ui.driver.find_element(By.ID, "nav").text
    assert "Admin" not in nav and "Queues" in nav  # management tag: no admin pages
    ui.wait_text("Message rates")
    ui.screenshot("overview-as-management-user")
    # The broker agrees: the new user's password works over HTTP.
    request = urllib.request.Request(f"{broker.api_url}/api/whoami")
    request.add_header("Authorization", "Basic " + base64.b64encode(
        f"{user}:{password}".encode()).decode())
    with urllib.request.urlopen(request) as response:
        assert json.load(response)["name"] == user
    ui.logout()


def test_closing_a_connection_from_the_ui_closes_the_client(ui: Console, broker) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", broker.port, "/", pika.PlainCredentials("guest", "guest"),
        client_properties={"product": "ui-close-me"}))
    try:
        ui.login()
        ui.go("/connections")
        ui.row("ui-close-me")
        ui.screenshot("connections")
        ui.driver.execute_script("window.prompt = () => 'closed by the console test'")
        ui.click_in_row("ui-close-me", "button")
        ui.wait_text("Closed ")

        def closed() -> bool:
            try:
                conn.process_data_events(0.05)
            except pika.exceptions.ConnectionClosedByBroker as exc:
                assert exc.reply_code == 320 and "closed by the console test" in exc.reply_text
                return True
            return False
        wait_until(closed)
    finally:
        if conn.is_open:
            conn.close()


def test_dark_theme_and_a_narrow_window(ui: Console) -> None:
    ui.login()
    ui.go("/queues")
    ui.wait_text("Add a queue")
    before = ui.driver.execute_script("return document.documentElement.dataset.theme")
    ui.click("Dark theme" if before == "light" else "Light theme",
             ui.driver.find_element(By.ID, "session"))
    after = ui.driver.execute_script("return document.documentElement.dataset.theme")
    assert {before, after} == {"light", "dark"}
    background = ui.driver.execute_script(
        "return getComputedStyle(document.body).backgroundColor")
    assert background == ("rgb(17, 20, 24)" if after == "dark" else "rgb(247, 247, 245)")
    ui.screenshot(f"queues-{after}")
    ui.driver.set_window_size(420, 800)
    try:
        ui.go("/overview")
        ui.go("/")
        ui.wait_text("Message rates")
        width = ui.driver.execute_script("return document.documentElement.scrollWidth")
        assert width <= 440, f"page is {width}px wide in a 420px window"
        ui.screenshot(f"overview-narrow-{after}")
    finally:
        ui.driver.set_window_size(1280, 800)
        if after != before:
            ui.click("Dark theme" if after == "light" else "Light theme",
                     ui.driver.find_element(By.ID, "session"))


def test_cancel_a_consumer_from_the_ui_tells_the_client(ui: Console, channel) -> None:
    queue = _name("ui-cancel")
    channel.queue_declare(queue)
    cancelled: list[str] = []
    channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = channel.basic_consume(queue, lambda *a: None, consumer_tag=_name("ctag"))
    ui.login()
    ui.go("/consumers")
    ui.row(tag)
    ui.screenshot("consumers")
    ui.click_in_row(tag, "button")
    ui.confirm("Cancel consumer")
    ui.wait_text(f"Cancelled {tag}.")
    wait_until(lambda: (channel.connection.process_data_events(0.05), cancelled)[1])
    assert cancelled == [tag]
    assert channel.queue_declare(queue, passive=True).method.consumer_count == 0


def test_the_error_check_sees_an_uncaught_javascript_error(ui: Console) -> None:
    """The guard every test relies on: an uncaught error in the page reaches js_errors()."""
    ui.login()
    ui.driver.execute_script("setTimeout(() => { throw new Error('planted-boom'); })")
    found = wait_until(lambda: [e for e in ui.js_errors() if "planted-boom" in e])
    assert found


def _get(broker, path: str) -> object:
    request = urllib.request.Request(f"{broker.api_url}/api/{path}")
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(request) as response:
        return json.load(response)


def test_admin_adds_a_vhost_a_policy_and_a_limit(ui: Console, broker) -> None:
    vhost, policy = _name("vh"), _name("cap")
    ui.login()
    ui.go("/admin")
    ui.wait_text("Add a vhost")
    ui.fill("input[name=vhost]", vhost)
    ui.click("Add vhost")
    ui.wait_text(f"Vhost {vhost} added.")
    ui.go("/")  # the admin page lists vhosts in its selects when it loads
    ui.go("/admin")
    ui.wait_text(vhost)
    ui.fill("input[name=perm-user]", "guest")  # policies need access to the vhost
    ui.choose("select[name=perm-vhost]", vhost)
    ui.click("Set permissions")
    ui.wait_text("Permissions set.")
    ui.choose("select[name=policy-vhost]", vhost)
    ui.fill("input[name=policy-name]", policy)
    ui.fill("input[name=policy-pattern]", "^orders")
    ui.fill("textarea[name=definition]", "max-length=5\noverflow=reject-publish")
    ui.click("Save policy")
    ui.wait_text(f"Policy {policy} saved.")
    ui.choose("select[name=limit-vhost]", vhost)
    ui.choose("select[name=limit]", "max-queues")
    ui.fill("input[name=limit-value]", "3")
    ui.click("Set limit")
    ui.wait_text("Limit set.")
    ui.screenshot("admin-policy-and-limit")
    encoded = urllib.parse.quote(vhost, safe="")
    assert _get(broker, f"policies/{encoded}/{policy}")["definition"] == {
        "max-length": 5, "overflow": "reject-publish"}
    assert _get(broker, f"vhost-limits/{encoded}")[0]["value"] == {"max-queues": 3}
    # A bad definition is refused in place with the broker's reason, and nothing is saved.
    ui.fill("input[name=policy-name]", policy + "-bad")
    ui.fill("textarea[name=definition]", "max-length=-1")
    ui.click("Save policy")
    error = ui.find("#policies .error")
    assert error.text
    assert policy + "-bad" not in json.dumps(_get(broker, f"policies/{encoded}"))


def test_exchange_create_bind_and_delete_from_the_ui(ui: Console, channel, broker) -> None:
    exchange, queue = _name("ui-x"), _name("ui-xq")
    channel.queue_declare(queue)
    ui.login()
    ui.go("/exchanges")
    ui.wait_text("Add an exchange")
    ui.fill("input[name=name]", exchange)
    ui.choose("select[name=type]", "topic")
    ui.click("Add exchange")
    ui.wait_text(f"Exchange {exchange} added.")
    ui.go(f"/exchanges/%2F/{exchange}")
    ui.wait_text("No bindings from this exchange")
    ui.fill("input[name=destination]", queue)
    ui.fill("form.panel input[name=routing_key]", "orders.*")
    ui.click("Bind")
    ui.wait_text("Bound.")
    ui.wait_text("orders.*")
    channel.basic_publish(exchange, "orders.eu", b"routed by a UI binding")
    ui.screenshot("exchange-page")
    _method, _props, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"routed by a UI binding"
    ui.click("Delete exchange")
    ui.confirm("Delete")
    ui.wait(lambda d: d.current_url.endswith("#/exchanges"), "back to the list")
    assert exchange not in json.dumps(_get(broker, "exchanges"))


def test_a_stream_page_shows_its_offsets_and_consumer_lag_and_offers_no_purge(
        ui: Console, channel) -> None:
    stream = _name("ui-stream")
    channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    channel.confirm_delivery()
    for i in range(4):
        channel.basic_publish("", stream, b"m%d" % i)
    channel.basic_qos(prefetch_count=1)
    channel.basic_consume(stream, lambda *a: None, consumer_tag="reader",
                          arguments={"x-stream-offset": "first"})
    try:
        ui.login()
        ui.go(f"/queues/%2F/{stream}")
        ui.wait_text("0 to 3")
        ui.wait_text("Lag")
        row = ui.wait(lambda d: [r for r in d.find_elements(By.CSS_SELECTOR, "tr")
                                 if "reader" in r.text], "the consumer's row")[0]
        assert row.text.split()[-2:] == ["1", "3"]  # next offset 1, 3 behind the end
        assert "Purge messages" not in ui.text()
        assert "Delete queue" in ui.text()
    finally:
        channel.queue_delete(stream)
