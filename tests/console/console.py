"""`idemq console` as a process, and headless Chromium driven by Selenium to
look at it.

The console prints one line once it listens,
`idemq console: http://127.0.0.1:PORT/?token=TOKEN`; opening that address
sets the session cookie. Pages are read only through what the console's
contract promises: `body[data-page]`, element ids, classes and data-*
attributes.

The browser is Debian's chromium, driven through Debian's chromedriver
(scripts/browser.sh installs both): Selenium is handed both paths, so its
Selenium Manager, which would download a driver, never runs. The flags keep
the browser off the network (no update, sync or QUIC) and runnable as root
on a machine without a GPU; each browser gets a fresh profile.
"""

import http.client
import re
import shutil
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from selenium import webdriver
from selenium.common.exceptions import (
    JavascriptException,
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from processes import Process

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # root, and no user namespaces in CI
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
# Screenshots and layout are taken at one size everywhere.
VIEWPORT = (1280, 900)
READY_LINE = re.compile(r"^idemq console: (http://127\.0\.0\.1:(\d+))/\?token=(\S+)$")


class Console:
    """One `idemq console` process."""

    def __init__(self, idemq: str, args: list[str], log: Path, startup_timeout: float = 60):
        self.argv = [idemq, "console", *args]
        self.process = Process("idemq console", self.argv, log, read_stdout=True)
        line = self.process.first_line(startup_timeout)
        if line is None:
            code = self.process.popen.poll()
            state = f"exited {code}" if code is not None else f"printed nothing in {startup_timeout:.0f} s"
            self.process.stop()
            raise AssertionError(
                f"`{' '.join(self.argv)}` {state} instead of its address line (log: {log}):\n"
                f"{self.process.log_tail()}"
            )
        m = READY_LINE.match(line)
        if not m:
            self.process.stop()
            raise AssertionError(
                f"the console's first stdout line is not `idemq console: http://127.0.0.1:PORT/?token=TOKEN`: {line!r}"
            )
        self.base, self.port, self.token = m.group(1), int(m.group(2)), m.group(3)
        self.login_url = line.split(": ", 1)[1]

    def url(self, path: str) -> str:
        return self.base + path

    def request(self, method: str, path: str, headers=None, body=None):
        """One HTTP request without the browser (no cookie, no redirects
        followed): (status, headers, body text)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.headers, r.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def stop(self) -> int | None:
        return self.process.stop()


class Browser:
    """Headless Chromium, with page helpers that follow the console's contract."""

    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="idemq-console-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={self.profile}")
        options.add_argument(f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}")
        self.driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
        # The page area itself is VIEWPORT, whatever the headless window's
        # frame takes: screenshots are exactly that size.
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": VIEWPORT[0], "height": VIEWPORT[1], "deviceScaleFactor": 1, "mobile": False},
        )
        self.driver.set_page_load_timeout(60)

    def quit(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)

    # ---- navigation ----

    def get(self, url: str) -> None:
        self.navigate(lambda: self.driver.get(url))

    def navigate(self, act, timeout: float = 30) -> None:
        """Runs `act` (a click, a submit) and waits for the next page to load."""
        try:
            old = self.driver.find_element(By.TAG_NAME, "html")
        except NoSuchElementException:
            old = None
        act()
        if old is not None:
            # While the old document is torn down, chromedriver may answer
            # a question about its element with a generic error ("Node with
            # given id does not belong to the document") rather than a stale
            # reference: ask again until it says stale.
            try:
                WebDriverWait(self.driver, timeout, ignored_exceptions=(WebDriverException,)).until(
                    expected_conditions.staleness_of(old)
                )
            except TimeoutException:
                raise AssertionError(f"no new page within {timeout:.0f} s (still at {self.driver.current_url})")
        self.wait_loaded(timeout)

    def wait_loaded(self, timeout: float = 30) -> None:
        WebDriverWait(self.driver, timeout).until(
            lambda d: d.execute_script("return document.readyState") == "complete"
        )

    def click(self, css: str) -> None:
        element = self.one(css)
        self.navigate(element.click)

    # ---- reading a page ----

    def page(self) -> str:
        """The page's kind: <body data-page="...">."""
        return self.driver.execute_script(
            "return document.body ? document.body.getAttribute('data-page') : null"
        ) or ""

    def status(self) -> int:
        """The HTTP status of the response the current page came from."""
        return int(self.driver.execute_script(
            "const n = performance.getEntriesByType('navigation')[0]; return n ? n.responseStatus : 0"
        ))

    def expect_page(self, want: str, status: int | None = None) -> None:
        got = self.page()
        if got != want:
            raise AssertionError(
                f"expected page data-page={want!r}, got {got!r} at {self.driver.current_url}: "
                f"{self.body_text()[:400]!r}"
            )
        if status is not None and self.status() != status:
            raise AssertionError(f"{self.driver.current_url}: expected HTTP {status}, got {self.status()}")

    def submit_form(self, button_css: str, within=None) -> None:
        """Clicks a form's button and waits for the answer. A form the
        console served to itself must never be refused as cross-site."""
        page_path = self.path()
        self.navigate(self.one(button_css, within).click)
        if self.page() == "error" and self.all("#error") and "cross-site" in self.text("#error"):
            policy = self.fetch("GET", page_path).get("referrer_policy") or "(none)"
            raise AssertionError(
                f"the console refused its own form (on {page_path}) as a cross-site request: "
                f"{self.text('#error')!r}. Its pages are served with Referrer-Policy: {policy}; "
                "with no-referrer a browser sends `Origin: null` on a form POST"
            )

    def body_text(self) -> str:
        try:
            return self.driver.find_element(By.TAG_NAME, "body").text
        except NoSuchElementException:
            return ""

    def all(self, css: str):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def one(self, css: str, within=None):
        found = (within or self.driver).find_elements(By.CSS_SELECTOR, css)
        if len(found) != 1:
            raise AssertionError(
                f"expected one element {css!r} on {self.driver.current_url} "
                f"(data-page={self.page()!r}), found {len(found)}"
            )
        return found[0]

    def text(self, css: str, within=None) -> str:
        # textContent, not .text: the latter is empty for hidden elements.
        return (self.one(css, within).get_attribute("textContent") or "").strip()

    def csrf(self) -> str:
        return self.one('meta[name="csrf"]').get_attribute("content") or ""

    def fetch(self, method: str, path: str, form: dict | None = None) -> dict:
        """A request from the current page's script (the browser adds its
        cookie and Origin): {"status", "text", "type"}."""
        result = self.driver.execute_async_script(
            """
            const [method, path, form, done] = arguments;
            const init = {method, credentials: 'same-origin', redirect: 'manual'};
            if (form) init.body = new URLSearchParams(form);
            fetch(path, init)
              .then(async r => done({status: r.status, text: await r.text(),
                                     type: r.headers.get('content-type') || '',
                                     referrer_policy: r.headers.get('referrer-policy') || ''}))
              .catch(e => done({status: -1, text: String(e), type: ''}));
            """,
            method, path, form,
        )
        return result

    def poll_text(self, css: str, until, timeout: float) -> str:
        """Re-reads `css` until `until(text)` holds, across pages that reload
        themselves (a running task refreshes every second)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                last = self.text(css)
                if until(last):
                    return last
            except (AssertionError, StaleElementReferenceException, JavascriptException):
                pass
            time.sleep(0.25)
        raise AssertionError(f"{css} on {self.driver.current_url} stayed {last!r} for {timeout:.0f} s")

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not self.driver.save_screenshot(str(path)):
            raise AssertionError(f"could not save {path}")

    def path(self) -> str:
        parts = urlsplit(self.driver.current_url)
        return parts.path + (f"?{parts.query}" if parts.query else "")
