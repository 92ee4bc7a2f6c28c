"""A real headless Chromium for the console's tests, driven by Selenium.

Debian's ``chromium`` and ``chromium-driver`` (``/usr/bin/chromium``,
``/usr/bin/chromedriver``; ``.ci/run`` installs them): Selenium is given the
driver's path, so its manager never downloads a browser. Without them the
tests skip on a developer's machine and *fail* under CI (``CI`` set), so a CI
run cannot pass by not running them.

``own_broker`` gives each browser module a broker of its own. ``Console`` wraps
one browser session (one per test module) with what the
tests need: log in, go to a page, wait for text, read the browser's console
log for JavaScript errors, save a screenshot under ``test-artifacts/console/``
(git-ignored).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BrokerProcess

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "console"
WAIT = 10.0
# Chromium logs a failed fetch (a 401/404 the page expected and shows in place) as a
# console error "Failed to load resource"; those are the page's business, not JS errors.
EXPECTED_NETWORK = re.compile(r"Failed to load resource: the server responded with a status of "
                              r"(400|401|404|405)")

try:
    from selenium import webdriver
    from selenium.common.exceptions import (
        StaleElementReferenceException,
        TimeoutException,
        WebDriverException,
    )
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # pragma: no cover - the dev extra installs it
    webdriver = None  # type: ignore[assignment]


def missing() -> str | None:
    if webdriver is None:
        return "selenium is not installed (pip install -e '.[dev]')"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    return None


def require_browser() -> None:
    """Skip without a browser, except under CI, where that is a failure."""
    why = missing()
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"browser tests cannot run under CI: {why}")
    pytest.skip(why)


class Console:
    def __init__(self, base_url: str) -> None:
        self.base = base_url
        self.profile = tempfile.mkdtemp(prefix="leveret-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                    f"--user-data-dir={self.profile}", "--window-size=1280,800"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        self.driver.set_window_size(1280, 800)
        self.errors: list[str] = []

    def close(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)

    # -- navigation and waiting --

    def open(self, hash_path: str = "/") -> None:
        self.driver.get(f"{self.base}/#{hash_path}")

    def go(self, hash_path: str) -> None:
        self.driver.execute_script("location.hash = arguments[0]", hash_path)

    def wait(self, predicate: Callable[[Any], Any], what: str, timeout: float = WAIT) -> Any:
        try:
            # Lists redraw every few seconds: an element read mid-redraw is stale; try again.
            return WebDriverWait(self.driver, timeout, 0.05,
                                 ignored_exceptions=(StaleElementReferenceException,)
                                 ).until(predicate)
        except TimeoutException:
            self.screenshot(f"timeout-{re.sub(r'[^a-z0-9]+', '-', what.lower())[:40]}")
            body = self.driver.find_element(By.TAG_NAME, "body").text
            raise AssertionError(f"timed out waiting for {what}; page shows:\n{body[:3000]}") from None

    def wait_text(self, text: str, timeout: float = WAIT) -> None:
        self.wait(lambda d: text in d.find_element(By.TAG_NAME, "main").text, repr(text), timeout)

    def find(self, css: str) -> Any:
        return self.wait(lambda d: _shown(d, css), css)

    def all(self, css: str) -> list[Any]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def fill(self, css: str, value: str) -> None:
        el = self.find(css)
        el.clear()
        el.send_keys(value)

    def row(self, text: str) -> dict[str, str]:
        """The cells (by column title) of the first table row containing ``text``.

        Read inside the wait: lists refresh every few seconds, so a row element kept
        across a refresh would be stale."""
        def cells(d: Any) -> dict[str, str] | None:
            try:
                for tr in d.find_elements(By.CSS_SELECTOR, "tbody tr"):
                    if text in tr.text:
                        return {td.get_attribute("data-label"): td.text
                                for td in tr.find_elements(By.TAG_NAME, "td")}
            except StaleElementReferenceException:
                return None
            return None
        return dict(self.wait(cells, f"row with {text!r}"))

    def click_in_row(self, text: str, css: str) -> None:
        """Clicks ``css`` inside the first row containing ``text`` (retried if redrawn)."""
        def clicked(d: Any) -> bool:
            try:
                for tr in d.find_elements(By.CSS_SELECTOR, "tbody tr"):
                    if text in tr.text:
                        tr.find_element(By.CSS_SELECTOR, css).click()
                        return True
            except StaleElementReferenceException:
                return False
            return False
        self.wait(clicked, f"{css} in row with {text!r}")

    def choose(self, css: str, visible_text: str) -> None:
        """Picks an option of a <select>, as a user does (fires its change event)."""
        Select(self.find(css)).select_by_visible_text(visible_text)

    def button(self, text: str, within: Any = None) -> Any:
        """The first visible button whose text is ``text``."""
        def found(d: Any) -> Any:
            scope = within or d
            for b in scope.find_elements(By.TAG_NAME, "button"):
                if b.text.strip() == text and b.is_displayed() and b.is_enabled():
                    return b
            return None
        return self.wait(found, f"button {text!r}")

    def click(self, text: str, within: Any = None) -> None:
        """Clicks the button, found again if a refresh redrew it between finding and clicking."""
        def clicked(d: Any) -> bool:
            try:
                b = self.button(text, within)
                d.execute_script("arguments[0].scrollIntoView({block: 'center'})", b)
                b.click()
                return True
            except StaleElementReferenceException:
                return False
        self.wait(clicked, f"a click on {text!r}")

    def confirm(self, yes: str) -> None:
        dialog = self.find("dialog.confirm")
        self.click(yes, dialog)

    def text(self) -> str:
        return str(self.driver.find_element(By.TAG_NAME, "main").text)

    # -- login --

    def login(self, user: str = "guest", password: str = "guest") -> None:
        """Logs in afresh (a test starts from the login page whatever the last one left)."""
        self.open("/")
        self.driver.execute_script("sessionStorage.clear()")
        self.driver.refresh()
        self.fill("form.login input[name=username]", user)
        self.fill("form.login input[name=password]", password)
        self.find("form.login button[type=submit]").click()
        self.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#session .who"), "logged in")

    def logout(self) -> None:
        self.click("Log out", self.driver.find_element(By.ID, "session"))
        self.find("form.login")

    # -- evidence --

    def js_errors(self) -> list[str]:
        """Browser console entries at SEVERE since the last call, less expected HTTP errors."""
        found = []
        for entry in self.driver.get_log("browser"):
            if entry.get("level") != "SEVERE":
                continue
            message = str(entry.get("message", ""))
            if EXPECTED_NETWORK.search(message):
                continue
            found.append(message)
        self.errors.extend(found)
        return found

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        try:
            self.driver.save_screenshot(str(path))
        except WebDriverException:
            pass
        return path


def _shown(driver: Any, css: str) -> Any:
    for el in driver.find_elements(By.CSS_SELECTOR, css):
        if el.is_displayed():
            return el
    return None


def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker for one browser module: the console creates users and vhosts, which the
    session broker's other tests do not expect to find."""
    base = tmp_path_factory.mktemp("console-broker")
    broker = BrokerProcess(base / "data", base / "broker.log").start()
    try:
        yield broker
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()[-4000:]
    assert "Traceback" not in broker.log_text(), broker.log_text()[-4000:]


def console_session(base_url: str) -> Iterator[Console]:
    require_browser()
    console = Console(base_url)
    try:
        yield console
    finally:
        console.close()


def wait_until(predicate: Callable[[], Any], timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
