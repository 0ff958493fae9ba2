#!/usr/bin/env python3
"""`idemq console` in a real browser, on the ledger's dead letters.

The story an operator lives through: a downstream outage sends six
transfers to the DLQ (after maxReceiveCount receives, by SQS's redrive) and
a malformed one goes there at once; the worker's metrics (EMF lines) go
to the local CloudWatch as Lambda's would. In the console, read-only
first: the overview counts them and charts the worker's retries, a search by a payload field (/account = acct-outage)
finds exactly the outage's letters, the groups tell the retries exhausted
from the permanent, a letter shows its context but not its payload, and
an action is refused. A page on another site that posts to the console is
refused too, and changes nothing. Then, with --allow redrive,export: a dry
run of the redrive filtered by the same field, the redrive itself as a
task, an export of what is left, the audit of all of it; and the ledger,
its outage over, applies the redriven transfers: every balance is exact
(each transfer once, the duplicate too), and the malformed letter is still
in the DLQ. Last, a second consumer of the same table: one console shows
both, each named by a file of its settings (--env-file).

Run by scripts/console_test.sh (which loads the stack's environment):
    test_console.py --idemq target/debug/idemq --ledger target/debug/examples/ledger
    test_console.py ... --screenshots docs/console   # also a PNG of each page

Every check says what it expected and what it found; on a failure the page
is saved (.state/logs/console-test-failure.{png,html}) and the console's
log is shown.
"""

import argparse
import http.server
import json
import re
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import emf
from console import Browser, Console
from ledger import OUTAGE, Ledger, transfers
from processes import Stopped, become_group_leader, say, warn

MATCH_COUNT = re.compile(r"(\d+) of (\d+) dead letters? match")


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def equal(got, want, what: str) -> None:
    if got != want:
        raise AssertionError(f"{what}: expected {want!r}, got {got!r}")


class CrossSite:
    """Another site on another local port: a page whose form posts to the
    console's action URL on load, without the CSRF token, as an attacker's
    page would."""

    def __init__(self, action_url: str, fields: dict[str, str]):
        inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in fields.items())
        page = (
            "<!doctype html><title>another site</title>"
            f'<form id="f" method="post" action="{action_url}">{inputs}</form>'
            "<script>document.getElementById('f').submit()</script>"
        ).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/post.html"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Scenario:
    def __init__(self, args):
        self.args = args
        self.logs = Path(args.logs)
        self.shots = Path(args.screenshots) if args.screenshots else None
        self.ledger = Ledger(args.idemq, args.ledger, self.logs)
        self.plan = transfers()
        self.browser: Browser | None = None
        self.console: Console | None = None
        self.passed: list[str] = []
        self.t0 = time.monotonic()

    # ---- structure ----

    @contextmanager
    def step(self, name: str, detail: str):
        """One step of the story: `name` in the summary, `detail` as it runs."""
        t = time.monotonic()
        say(f"-- {name}: {detail}")
        yield
        self.passed.append(name)
        say(f"   ok ({time.monotonic() - t:.1f} s)")

    def shot(self, name: str) -> None:
        if self.shots:
            path = self.shots / f"{name}.png"
            self.browser.screenshot(path)
            say(f"   saved {path}")

    def start_console(self, *extra: str, consumers: list[str] | None = None) -> Console:
        """The console on the ledger's consumer (its DLQ and table as flags),
        or on `consumers` (--function / --env-file arguments)."""
        if self.console:
            self.stop_console()
        n = getattr(self, "_consoles", 0) + 1
        self._consoles = n
        if consumers is None:
            consumers = ["--dlq-url", self.res.dlq_url, "--table", self.res.table]
        self.console = Console(
            self.args.idemq,
            [*consumers, "--listen", "127.0.0.1:0", "--audit", str(self.audit_file), *extra],
            self.logs / f"console-test-console-{n}.log",
        )
        say(f"   {' '.join(['idemq console', *extra]) or 'idemq console'}: {self.console.base}")
        return self.console

    def stop_console(self) -> None:
        console, self.console = self.console, None
        code = console.stop()
        # Serving until SIGTERM means ending on it, promptly.
        check(code is not None, "the console did not exit within 10 s of SIGTERM")

    def login(self) -> None:
        """Opens the printed address: the token becomes the session cookie
        and the console answers 303 to the same path without it."""
        self.browser.get(self.console.login_url)
        check("token=" not in self.browser.driver.current_url,
              f"after the token address the browser is at {self.browser.driver.current_url}: "
              "the console should redirect to the path without the token")
        self.browser.expect_page("overview", 200)

    def letters_path(self) -> str:
        return f"/c/{self.name}/letters"

    def letters(self, query: str = "") -> None:
        self.browser.get(self.console.url(self.letters_path() + query))
        self.browser.expect_page("letters", 200)

    def search(self, **fields: str) -> None:
        """Fills the search form as a user types it, and submits it."""
        form = self.browser.one("form#search")
        for name, value in fields.items():
            box = self.browser.one(f'[name="{name}"]', within=form)
            box.clear()
            box.send_keys(value)
        self.browser.click("#search-submit")
        self.browser.expect_page("letters", 200)
        query = parse_qs(urlsplit(self.browser.driver.current_url).query)
        for name, value in fields.items():
            equal(query.get(name, [""])[0], value, f"the search's URL parameter {name}")

    def match_count(self) -> tuple[int, int]:
        text = self.browser.text("#match-count")
        m = MATCH_COUNT.search(text)
        check(m is not None, f"#match-count is {text!r}, not `N of M dead letters match`")
        return int(m.group(1)), int(m.group(2))

    def letter_rows(self, table: str = "#letters") -> dict[str, str]:
        """job id -> message id of the table's letters."""
        return {
            r.get_attribute("data-job-id"): r.get_attribute("data-message-id")
            for r in self.browser.all(f"{table} tr.letter")
        }

    def dlq_unchanged(self, want: int, after: str) -> None:
        got = self.ledger.depth(self.res.dlq_url)
        equal(got, want, f"DLQ depth after {after} (read with boto3)")

    def groups(self) -> list[dict]:
        rows = []
        for r in self.browser.all("#groups tr.group"):
            rows.append({
                "id": r.get_attribute("data-group"),
                "kind": self.browser.text("td.kind", r),
                "error": self.browser.text("td.error", r),
                "count": self.browser.text("td.count", r),
            })
        return rows

    def action_form(self, action: str):
        return self.browser.one(f'form.action[data-action="{action}"]')

    def run_task(self, action: str) -> dict[str, str]:
        """From a preview page: submits #run, waits for the task page to
        reach done, and returns its results."""
        self.browser.submit_form("#run-submit")
        self.browser.expect_page("task")
        path = urlsplit(self.browser.driver.current_url).path
        check(re.fullmatch(r"/tasks/[^/]+", path) is not None,
              f"a run should land on /tasks/ID (303), landed on {path}")
        state = self.browser.poll_text("#task-state", lambda s: s in ("done", "failed"), 60)
        equal(state, "done", f"the {action} task's #task-state")
        results = {
            dd.get_attribute("data-result"): (dd.get_attribute("textContent") or "").strip()
            for dd in self.browser.all("#task-result dd[data-result]")
        }
        check(not self.browser.all('meta[http-equiv="refresh"]'),
              "a done task page still refreshes itself")
        return results

    # ---- the story ----

    def run(self) -> None:
        run = f"console-{int(time.time())}"
        # The consoles' audit file (--audit), fresh for each run.
        self.audit_file = self.logs / "console-test-audit.jsonl"
        self.audit_file.unlink(missing_ok=True)
        for stale in ("console-test-failure.png", "console-test-failure.html"):
            (self.logs / stale).unlink(missing_ok=True)
        plan = self.plan
        outage = sorted(plan.outage_ids)
        dead = plan.dead_letters()

        with self.step("outage", f"{run}: idemq init, {len(plan.messages)} transfers, the ledger worker with {OUTAGE} down"):
            self.res = self.ledger.init(run)
            self.ledger.send(self.res.queue_url, plan.messages)
            summary = self.ledger.run_worker(self.res, OUTAGE, timeout=150)
            say(f"   {summary}")
            # The worker's EMF lines, made CloudWatch metrics as on Lambda.
            metrics = emf.lines(self.ledger.workers[-1].log)
            self.retried = emf.total(metrics, "JobsRetried")
            self.received = emf.total(metrics, "BatchSize")
            check(self.retried > 0, f"the worker's EMF lines count no JobsRetried ({len(metrics)} lines)")
            say(f"   {len(metrics)} EMF lines, {emf.publish(metrics)} metric data put: "
                f"JobsRetried {self.retried}, BatchSize {self.received}")
            self.ledger.wait_depth(self.res.dlq_url, dead, 15, "the DLQ after the outage")
            self.ledger.wait_depth(self.res.queue_url, 0, 15, "the source queue after the worker")

        self.browser = Browser()
        b = self.browser

        with self.step("auth", "read-only console: its address line, token -> cookie, 401 without it"):
            c = self.start_console()
            status, headers, body = c.request("GET", "/")
            equal(status, 401, "GET / without the cookie")
            check('data-page="login"' in body, "the 401 page is not data-page=\"login\"")
            status, headers, _ = c.request("GET", f"/?token={c.token}")
            equal(status, 303, "GET /?token=TOKEN")
            check(headers.get("Location", "").endswith("/") and "token" not in headers.get("Location", ""),
                  f"the token's 303 goes to {headers.get('Location')!r}, not the same path without it")
            cookie = headers.get("Set-Cookie", "")
            for part in ("idemq_console=", "HttpOnly", "SameSite=Strict", "Path=/"):
                check(part.lower() in cookie.lower(), f"the session cookie lacks {part}: {cookie!r}")
            status, _, _ = c.request("GET", "/?token=not-the-token")
            equal(status, 401, "GET /?token=<wrong token>")

        with self.step("overview", f"dlq-depth {dead}, the metrics, the chart, /api/overview"):
            self.login()
            section = b.one("section.consumer")
            self.name = section.get_attribute("data-consumer")
            equal(self.name, run, "the consumer's name (its DLQ's source queue)")
            equal(b.text('dd[data-metric="dlq-depth"]', section), str(dead), "dlq-depth")
            for metric in ("source-visible", "source-in-flight", "source-delayed", "dlq-oldest-age",
                           "dead-last-hour", "dead-last-24h"):
                b.one(f'dd[data-metric="{metric}"]', section)
            equal(b.text('dd[data-metric="source-visible"]', section), "0", "source-visible")
            equal(b.text('dd[data-metric="dead-last-hour"]', section), str(dead), "dead-last-hour")
            equal(b.text('dd[data-metric="dead-last-24h"]', section), str(dead), "dead-last-24h")
            age = b.text('dd[data-metric="dlq-oldest-age"]', section)
            check(re.fullmatch(r"(\d+[dhms] ?)+", age) is not None, f"dlq-oldest-age is {age!r}, not an age like `3m 12s`")
            bars = b.all('svg.chart[data-chart="dead-letters-per-hour"] rect.bar')
            equal(len(bars), 24, "bars in the dead-letters-per-hour chart")
            # Retries from CloudWatch: every JobsRetried the worker printed,
            # all of it in the last hour.
            retries = b.one('svg.chart[data-chart="retries-per-hour"]', section).get_attribute("data-values")
            retries = [int(v) for v in retries.split(",")]
            equal(len(retries), 24, "hours in the retries-per-hour chart")
            equal(sum(retries), self.retried, "retries in the chart (the worker's JobsRetried)")
            equal(retries[-1], self.retried, "retries in the chart's last hour")
            equal(b.text('dd[data-metric="retried-last-hour"]', section), str(self.retried), "retried-last-hour")
            equal(b.text('dd[data-metric="retry-rate-last-hour"]', section),
                  f"{100 * self.retried / self.received:.1f} %", "retry-rate-last-hour")
            # LocalStack publishes no ApproximateAgeOfOldestMessage (SQS does,
            # every minute, while the queue is active): no value here.
            equal(b.text('dd[data-metric="source-oldest-age"]', section), "-", "source-oldest-age")
            b.one("#changes")
            nav = {a.get_attribute("pathname") for a in b.all("nav a")}
            for path in ("/", self.letters_path(), "/audit"):
                check(path in nav, f"<nav> has no link to {path} (links: {sorted(nav)})")
            api = b.fetch("GET", "/api/overview")
            equal(api["status"], 200, "GET /api/overview")
            data = json.loads(api["text"])
            consumer = data["consumers"][0]
            equal(consumer["name"], run, "/api/overview consumers[0].name")
            equal(consumer["dlq"]["depth"], dead, "/api/overview dlq.depth")
            equal(len(consumer["dead_per_hour"]), 24, "/api/overview dead_per_hour length")
            equal(sum(consumer["dead_per_hour"]), dead, "/api/overview sum of dead_per_hour")
            for key in ("visible", "in_flight", "delayed"):
                check(key in consumer["source"], f"/api/overview source lacks {key}")
            equal(consumer["cloudwatch"].get("retried_per_hour"), retries, "/api/overview cloudwatch.retried_per_hour")
            check("read_at" in consumer, "/api/overview lacks read_at")
            self.shot("overview")

        with self.step("groups", "all the letters; groups retries exhausted and permanent, a group's filter"):
            b.navigate(lambda: b.one(f'nav a[href$="{self.letters_path()}"]').click())
            b.expect_page("letters", 200)
            equal(self.match_count(), (dead, dead), "#match-count with no filter")
            equal(set(self.letter_rows()), plan.outage_ids | {plan.malformed_id}, "letters listed")
            groups = self.groups()
            by_kind: dict[str, int] = {}
            for g in groups:
                by_kind[g["kind"]] = by_kind.get(g["kind"], 0) + int(g["count"])
            equal(by_kind.get("retries exhausted"), len(outage), "letters in `retries exhausted` groups")
            equal(by_kind.get("permanent"), 1, "letters in `permanent` groups")
            check(all(g["kind"] in ("permanent", "retries exhausted", "unknown") for g in groups),
                  f"a group's kind is none of permanent / retries exhausted / unknown: {groups}")
            permanent = next(g for g in groups if g["kind"] == "permanent")
            check("amount" in permanent["error"] and "not positive" in permanent["error"],
                  f"the permanent group's error is {permanent['error']!r}")
            # A group's filter link lists exactly its letters.
            row = b.one(f'#groups tr.group[data-group="{permanent["id"]}"]')
            b.navigate(b.one("a.group-filter", row).click)
            b.expect_page("letters", 200)
            equal(set(self.letter_rows()), {plan.malformed_id}, "letters of the permanent group's filter")
            equal(self.match_count(), (1, dead), "#match-count of the permanent group")

        with self.step("search", "by job id, by error text, by payload pointer /account = acct-outage"):
            self.letters()
            self.search(job=plan.malformed_id)
            equal(set(self.letter_rows()), {plan.malformed_id}, "letters matching job=<malformed id>")
            self.letters()
            self.search(error="DOWNSTREAM OUTAGE")
            equal(set(self.letter_rows()), plan.outage_ids, "letters whose error contains `DOWNSTREAM OUTAGE` (any case)")
            self.letters()
            self.search(pointer="/account", value=OUTAGE)
            equal(self.match_count(), (len(outage), dead), "#match-count of /account = acct-outage")
            self.outage_rows = self.letter_rows()
            equal(set(self.outage_rows), plan.outage_ids, "letters matching /account = acct-outage")
            self.search_path = b.path()
            self.shot("letters")

        with self.step("letter", "its context, error chain and attributes; the payload hidden; 404"):
            job_id = outage[0]
            body = dict(plan.messages)[job_id]
            row = b.one(f'#letters tr.letter[data-job-id="{job_id}"]')
            b.navigate(b.one("td.job-id a", row).click)
            b.expect_page("letter", 200)
            field = lambda f: b.text(f'#context dd[data-field="{f}"]')
            equal(field("job-id"), job_id, "job-id")
            equal(field("message-id"), self.outage_rows[job_id], "message-id (the row's data-message-id)")
            equal(field("kind"), "retries exhausted", "kind")
            equal(field("attempts"), "5", "attempts (maxReceiveCount)")
            check(OUTAGE in field("error") and "outage" in field("error"), f"error is {field('error')!r}")
            check(run in field("source-queue"), f"source-queue {field('source-queue')!r} does not name {run}")
            size = re.match(r"\d+", field("payload-bytes").replace(",", ""))
            check(size is not None and int(size.group()) == len(body.encode()),
                  f"payload-bytes is {field('payload-bytes')!r}, the payload has {len(body.encode())} bytes")
            equal(field("failure-record"), "yes", "failure-record")
            # The record names the idemq that failed the job (and the deploy,
            # where the function's environment says one).
            check("(idemq " in field("deploy"), f"deploy {field('deploy')!r} does not name idemq's version")
            check(field("failed-at") not in ("", "-"), "failed-at is empty")
            check(field("first-enqueued") not in ("", "-"), "first-enqueued is empty")
            # Where the ledger's handler made the error: its frame first, the
            # rest folded into one line.
            where = b.text("#backtrace")
            check(where.splitlines()[1:2] and "examples/ledger.rs:" in where.splitlines()[1]
                  and "folded" in where.splitlines()[-1],
                  f"#backtrace does not show the ledger's frame first: {where[:400]!r}")
            chain = [li.get_attribute("textContent").strip() for li in b.all("#error-chain li")]
            check(any("downstream outage for account acct-outage" in e for e in chain),
                  f"#error-chain {chain} lacks the handler's error")
            attributes = b.text("#attributes")
            check("idemq-job-id" in attributes and job_id in attributes,
                  f"#attributes lacks idemq-job-id = {job_id}: {attributes[:300]!r}")
            b.one("#payload-hidden")
            check(not b.all("#payload"), "#payload is shown without --show-payloads")
            check(body not in b.driver.page_source and '"amount"' not in b.driver.page_source,
                  "the payload's bytes are in the page without --show-payloads")
            self.shot("letter")
            # The malformed one, by its message id.
            self.letters(f"?job={plan.malformed_id}")
            message_id = self.letter_rows()[plan.malformed_id]
            b.get(c.url(f"/c/{self.name}/letter/{message_id}"))
            b.expect_page("letter", 200)
            equal(field("kind"), "permanent", "the malformed letter's kind")
            equal(field("attempts"), "1", "the malformed letter's attempts")
            check("amount 0 is not positive" in field("error"), f"the malformed letter's error is {field('error')!r}")
            b.get(c.url(f"/c/{self.name}/letter/no-such-job"))
            b.expect_page("error", 404)
            check(b.all(f'nav a[href$="{self.letters_path()}"]'), "the 404 page has no navigation")
            # An unknown page opened with the token: the cookie first, then 404.
            status, headers, _ = c.request("GET", f"/no/such/page?token={c.token}")
            equal((status, headers.get("Location")), (303, "/no/such/page"), "an unknown page with the token")
            b.get(c.url("/no/such/page"))
            b.expect_page("error", 404)
            b.get(c.url("/c/no-such-consumer/letters"))
            b.expect_page("error", 404)
            check("no consumer no-such-consumer" in b.text("#error"), f"the 404 says {b.text('#error')!r}")

        with self.step("read-only refused", "actions disabled; a forced dry run and a run refused with 403"):
            b.get(c.url(self.search_path))
            for action in ("redrive", "delete", "export"):
                form = self.action_form(action)
                check(form.get_attribute("method").lower() == "post", f"the {action} form's method")
                equal(urlsplit(form.get_attribute("action")).path, f"/c/{self.name}/preview/{action}",
                      f"the {action} form's action")
                check(b.one("button.preview", form).get_attribute("disabled") is not None,
                      f"the {action} button is enabled in read-only mode")
                b.one("p.read-only", form)
                equal(b.one('input[name="csrf"]', form).get_attribute("value"), b.csrf(),
                      f"the {action} form's csrf (the page's meta csrf)")
            csrf = b.csrf()
            # As a user with the developer tools would: enable it and submit.
            form = self.action_form("redrive")
            b.driver.execute_script("arguments[0].disabled = false", b.one("button.preview", form))
            b.submit_form("button.preview", form)
            b.expect_page("error", 403)
            check("read-only" in b.text("#error"), f"#error is {b.text('#error')!r}, without `read-only`")
            self.shot("refused")
            b.get(c.url(self.search_path))
            r = b.fetch("POST", f"/c/{self.name}/run/redrive",
                        {"csrf": csrf, "pointer": "/account", "value": OUTAGE})
            equal(r["status"], 403, "POST run/redrive with the csrf, read-only")
            check("read-only" in r["text"], "the refused run does not say read-only")
            self.dlq_unchanged(dead, "the refused actions")

        with self.step("restart", "the console stops on SIGTERM; again with --allow redrive,export"):
            self.stop_console()
            c = self.start_console("--allow", "redrive,export")
            self.login()

        with self.step("cross-site refused", "another site's auto-posting form, POSTs without the csrf: 403, nothing moved"):
            action_url = c.url(f"/c/{self.name}/run/redrive")
            other = CrossSite(action_url, {"pointer": "/account", "value": OUTAGE})
            try:
                b.get(other.url)
                # The page posts itself to the console as soon as it loads.
                deadline = time.monotonic() + 15
                while not b.driver.current_url.startswith(c.base) and time.monotonic() < deadline:
                    time.sleep(0.1)
                b.wait_loaded()
                check(b.driver.current_url.startswith(c.base),
                      f"the other site's form did not post to the console (at {b.driver.current_url})")
                b.expect_page("error", 403)
                check("cross-site request refused" in b.text("#error"),
                      f"#error is {b.text('#error')!r}, without `cross-site request refused`")
            finally:
                other.close()
            b.get(c.url(self.search_path))
            for form in ({"pointer": "/account", "value": OUTAGE},
                         {"csrf": "not-the-token", "pointer": "/account", "value": OUTAGE}):
                r = b.fetch("POST", f"/c/{self.name}/run/redrive", form)
                equal(r["status"], 403, f"POST run/redrive with csrf={form.get('csrf')!r}")
                check("cross-site request refused" in r["text"], "the refusal does not say `cross-site request refused`")
            self.dlq_unchanged(dead, "the cross-site requests")

        with self.step(f"redrive ({len(outage)} moved)", f"/account = {OUTAGE}: dry run, pace 0 refused, run at 20/s, task done"):
            b.get(c.url(self.search_path))
            check(b.one("button.preview", self.action_form("delete")).get_attribute("disabled") is not None,
                  "the delete button is enabled although --allow lacks delete")
            b.submit_form("button.preview", self.action_form("redrive"))
            b.expect_page("preview", 200)
            equal(b.text("#preview-action"), "redrive", "#preview-action")
            equal(b.text("#preview-count"), str(len(outage)), "#preview-count")
            equal(set(self.letter_rows("#sample")), plan.outage_ids, "#sample letters")
            if b.all("#preview-refused"):
                say(f"   #preview-refused: {b.text('#preview-refused')!r}")
            # A pace that is no pace is refused, and nothing moves.
            b.one("#run-rate").send_keys("0")
            b.submit_form("#run-submit")
            b.expect_page("error", 400)
            check("pace" in b.text("#error") and "positive" in b.text("#error"),
                  f"the refusal of pace 0 says {b.text('#error')!r}")
            self.dlq_unchanged(dead, "a redrive at pace 0")
            b.get(c.url(self.search_path))
            b.submit_form("button.preview", self.action_form("redrive"))
            b.expect_page("preview", 200)
            self.shot("preview")
            b.one("#run-rate").send_keys("20")
            results = self.run_task("redrive")
            equal(results.get("moved"), str(len(outage)), "moved")
            equal(results.get("failed", "0"), "0", "failed")
            equal(results.get("left", "0"), "0", "left")
            progress = b.text("#task-progress")
            equal(progress, f"{len(outage)} of {len(outage)}", "#task-progress")
            self.shot("task")
            self.ledger.wait_depth(self.res.dlq_url, 1, 15, "the DLQ after the redrive")
            self.ledger.wait_depth(self.res.queue_url, len(outage), 15, "the source queue after the redrive")

        with self.step("export", "what is left: dry run, run, download (JSON lines)"):
            self.letters()
            b.click("a#refresh")
            b.expect_page("letters", 200)
            equal(self.match_count(), (1, 1), "#match-count after the redrive (refreshed)")
            b.submit_form("button.preview", self.action_form("export"))
            b.expect_page("preview", 200)
            equal(b.text("#preview-count"), "1", "the export's #preview-count")
            results = self.run_task("export")
            equal(results.get("exported"), "1", "exported")
            r = b.fetch("GET", b.one("a#download").get_attribute("pathname"))
            equal(r["status"], 200, "GET the export's download")
            check(r["type"].startswith("application/x-ndjson"), f"the download's content-type is {r['type']!r}")
            lines = [json.loads(l) for l in r["text"].splitlines() if l.strip()]
            equal(len(lines), 1, "lines in the export")
            check(plan.malformed_id in r["text"], "the export does not name the malformed transfer")
            self.dlq_unchanged(1, "the export")

        with self.step("audit", "the dry runs and the runs, newest first, on the page and in the file"):
            b.click('nav a[href$="/audit"]')
            b.expect_page("audit", 200)
            rows = [{k: b.text(f"td.{k}", r) for k in ("at", "who", "consumer", "action", "filter", "count", "outcome")}
                    for r in b.all("#audit tr.audit")]
            redrives = [i for i, r in enumerate(rows) if r["action"] == "redrive" and r["count"] == str(len(outage))]
            dry = [i for i in redrives if rows[i]["outcome"] == "dry run"]
            done = [i for i in redrives if rows[i]["outcome"] != "dry run" and "refused" not in rows[i]["outcome"]]
            check(dry and done, f"the audit lacks the redrive's dry run and run (count {len(outage)}): {rows}")
            check(done[0] < dry[-1], "the audit is not newest first (the run is listed after its dry run)")
            for i in (dry[-1], done[0]):
                check("/account" in rows[i]["filter"], f"the audit's filter {rows[i]['filter']!r} lacks /account")
                equal(rows[i]["consumer"], run, "the audit's consumer")
            check(any(r["action"] == "export" and r["outcome"] == "dry run" for r in rows), "the audit lacks the export's dry run")
            records = [json.loads(l) for l in self.audit_file.read_text().splitlines() if l.strip()]
            for r in records:
                check(set(r) >= {"at", "who", "consumer", "action", "filter", "count", "outcome"},
                      f"an audit line lacks a field: {r}")
            check(any(r["action"] == "redrive" and r["outcome"] == "dry run" for r in records),
                  f"{self.audit_file} lacks the redrive's dry run")
            check(any(r["action"] == "redrive" and r["outcome"] != "dry run" and str(r["count"]) == str(len(outage))
                      and "at most 20/s" in r["outcome"] for r in records),
                  f"{self.audit_file} lacks the redrive at its pace (at most 20/s)")
            self.shot("audit")

        with self.step("balances exact", "the outage over, the ledger again: each transfer once; the malformed letter kept"):
            summary = self.ledger.run_worker(self.res, None, timeout=90)
            say(f"   {summary}")
            self.ledger.wait_depth(self.res.queue_url, 0, 15, "the source queue after the second worker")
            for account, want in sorted(plan.expected.items()):
                got = self.ledger.balance(self.res.table, account)
                equal(got, want, f"balance of {account} (each well-formed transfer once)")
            equal(self.ledger.peek_job_ids(self.res.dlq_url), [plan.malformed_id], "job ids left in the DLQ")

        with self.step("two consumers", "a second consumer of the same table (FIFO queues, own namespace); "
                                        "one console on both, each by --env-file"):
            # FIFO: both letters in one message group, which SQS will not
            # hand out past a letter in flight; the read must still see both.
            second = self.ledger.init(f"{run}-b", table=self.res.table, fifo=True)
            second.run = second.queue_url.rsplit("/", 1)[1]
            bad = [f"{run}-b-{n}" for n in (1, 2)]
            self.ledger.send(second.queue_url, [
                (j, json.dumps({"transfer_id": j, "account": "acct-a", "amount": 0})) for j in bad])
            self.ledger.run_worker(second, None, timeout=60)
            self.ledger.wait_depth(second.dlq_url, len(bad), 15, "the second consumer's DLQ")
            # Each consumer's settings as a file: a .env file's syntax, the
            # table and the DLQ; the namespace is each one's source queue.
            files = []
            for res in (self.res, second):
                f = self.logs / f"console-test-{res.run}.env"
                f.write_text(f"# the consumer of {res.queue_url}\nIDEMQ_DLQ_URL={res.dlq_url}\n"
                             f"export IDEMQ_TABLE='{res.table}'\n")
                files += ["--env-file", str(f)]
            self.start_console(consumers=files)
            self.login()
            sections = {s.get_attribute("data-consumer"): s for s in b.all("section.consumer")}
            equal(sorted(sections), sorted([run, second.run]), "the overview's consumers")
            equal(b.text('dd[data-metric="dlq-depth"]', sections[run]), "1", f"{run}'s dlq-depth")
            equal(b.text('dd[data-metric="dlq-depth"]', sections[second.run]), str(len(bad)),
                  f"{second.run}'s dlq-depth")
            nav = {a.get_attribute("pathname") for a in b.all("nav a")}
            for name in (run, second.run):
                check(f"/c/{name}/letters" in nav, f"<nav> has no link to {name}'s letters (links: {sorted(nav)})")
            b.navigate(lambda: b.one(f'nav a[href$="/c/{second.run}/letters"]').click())
            b.expect_page("letters", 200)
            equal(sorted(self.letter_rows()), bad, f"{second.run}'s letters")
            equal([(g["kind"], int(g["count"])) for g in self.groups()], [("permanent", len(bad))],
                  f"{second.run}'s groups")
            # Its failure record is found: the file's table, its own namespace.
            row = b.one(f'#letters tr.letter[data-job-id="{bad[0]}"]')
            b.navigate(b.one("td.job-id a", row).click)
            b.expect_page("letter", 200)
            equal(b.text('#context dd[data-field="failure-record"]'), "yes", f"{bad[0]}'s failure-record")
            check("amount" in b.text('#context dd[data-field="error"]'),
                  f"{bad[0]}'s error {b.text('#context dd[data-field=error]')!r} is not the ledger's")

        with self.step("was it us", "deploy v1 in an outage, then v2 with a bug as it lasts: "
                                    "the overview by cause and by deploy tells them apart"):
            self.deploys(run)

        self.stop_console()

    def deploys(self, run: str) -> None:
        """A third consumer lives through two stories at once: `acct-outage`'s
        downstream is down under deploy v1 and stays down under v2 (one
        cause across deploys), and v2 ships a bug, a panic on `acct-new`
        (one new deploy, a new cause). The overview's tables must tell
        them apart, as must /api/overview."""
        b = self.browser
        third = self.ledger.init(f"{run}-d", table=self.res.table)
        third.run = f"{run}-d"
        v1, v2 = "ledger-v1", "ledger-v2"

        def send(ids: list[str], account: str) -> None:
            self.ledger.send(third.queue_url, [
                (j, json.dumps({"transfer_id": j, "account": account, "amount": 5})) for j in ids])

        send([f"{run}-d-1", f"{run}-d-2"], OUTAGE)
        self.ledger.run_worker(third, OUTAGE, timeout=90, deploy=v1)
        self.ledger.wait_depth(third.dlq_url, 2, 15, "the third consumer's DLQ after v1")
        send([f"{run}-d-3"], OUTAGE)
        send([f"{run}-d-4", f"{run}-d-5"], "acct-new")
        self.ledger.run_worker(third, f"{OUTAGE},panic:acct-new", timeout=90, deploy=v2)
        self.ledger.wait_depth(third.dlq_url, 5, 15, "the third consumer's DLQ after v2")

        f = self.logs / f"console-test-{third.run}.env"
        f.write_text(f"IDEMQ_DLQ_URL={third.dlq_url}\nIDEMQ_TABLE={third.table}\n")
        self.start_console(consumers=["--env-file", str(f)])
        self.login()
        section = b.one(f'section.consumer[data-consumer="{third.run}"]')

        def rows(key: str) -> list[dict]:
            table = b.one(f'table.trends[data-trend="{key}"]', section)
            return [{name: r.get_attribute(f"data-{name}") or "" for name in
                     (key, "letters", "deploys", "causes", "values", "first-hour")}
                    for r in table.find_elements("css selector", "tr.trend")]

        label = {d: f"{d}, idemq " for d in (v1, v2)}
        causes = rows("cause")
        outage = [r for r in causes if "downstream outage" in r["cause"]]
        bug = [r for r in causes if "no ledger rule" in r["cause"]]
        check(len(outage) == 1 and len(bug) == 1 and len(causes) == 2,
              f"the causes are not one outage and one bug: {causes}")
        outage, bug = outage[0], bug[0]
        equal(int(outage["letters"]), 3, "letters of the outage's cause")
        equal([d.split(" idemq ")[0] for d in outage["deploys"].split("\n")], [f"{v1},", f"{v2},"],
              "the outage's deploys, in the order they first failed")
        equal(int(bug["letters"]), 2, "letters of the bug's cause")
        check(bug["deploys"].startswith(label[v2]) and "\n" not in bug["deploys"],
              f"the bug's deploys are {bug['deploys']!r}, not {v2} alone")
        equal(sum(int(v) for v in outage["values"].split(",")), 3, "the outage's letters in the last 24 h")

        deploys = rows("deploy")
        equal([r["deploy"].split(",")[0] for r in deploys], [v1, v2], "deploys, in the order they began to fail")
        first, second = deploys
        equal(first["causes"].count("\n"), 0, f"{v1}'s causes (the outage only): {first['causes']!r}")
        check("downstream outage" in first["causes"], f"{v1}'s cause is {first['causes']!r}")
        # In the order they first failed: v2's panics may fail before its
        # outage's transfer does, so both orders are right.
        causes_v2 = second["causes"].split("\n")
        check(len(causes_v2) == 2 and any("downstream outage" in c for c in causes_v2)
              and any("no ledger rule" in c for c in causes_v2),
              f"{v2}'s causes are not the outage and the bug: {causes_v2}")
        for r in deploys:
            # Each deploy's first letter marked in its strip: this hour.
            equal(r["first-hour"], "23", f"{r['deploy']}'s first-hour")
            row = b.one(f'tr.trend[data-deploy="{r["deploy"]}"]', section)
            b.one("svg.strip rect.bar.first", row)
            check(re.fullmatch(r"▲ \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", b.text("td.first-failed", row)) is not None,
                  f"{r['deploy']}'s first failure reads {b.text('td.first-failed', row)!r}")

        api = b.fetch("GET", "/api/overview")
        consumer = next(c for c in json.loads(api["text"])["consumers"] if c["name"] == third.run)
        equal([(c["cause"], c["letters"], c["deploys"]) for c in consumer["dead_by_cause"]],
              [(r["cause"], int(r["letters"]), r["deploys"].split("\n")) for r in causes],
              "/api/overview dead_by_cause (the page's table)")
        by_deploy = consumer["dead_by_deploy"]
        equal([(d["deploy"], d["letters"], d["causes"]) for d in by_deploy],
              [(r["deploy"], int(r["letters"]), r["causes"].split("\n")) for r in deploys],
              "/api/overview dead_by_deploy (the page's table)")
        check(by_deploy[0]["first_failed_at"] < by_deploy[1]["first_failed_at"],
              f"{v1} did not fail before {v2}: {by_deploy}")
        self.shot("overview-deploys")

    def save_failure(self) -> None:
        if not self.browser:
            return
        try:
            self.logs.mkdir(parents=True, exist_ok=True)
            self.browser.driver.save_screenshot(str(self.logs / "console-test-failure.png"))
            (self.logs / "console-test-failure.html").write_text(self.browser.driver.page_source)
            warn(f"the page at {self.browser.driver.current_url} is saved in "
                 f"{self.logs}/console-test-failure.png and .html")
        except Exception as e:  # the browser itself may be what failed
            warn(f"(could not save the page: {e})")

    def cleanup(self) -> None:
        if self.console:
            self.console.stop()
        self.ledger.stop_workers()
        if self.browser:
            self.browser.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idemq", required=True, help="the idemq binary")
    parser.add_argument("--ledger", required=True, help="the ledger example's binary")
    parser.add_argument("--logs", default=".state/logs", help="where logs (and a failed page) go")
    parser.add_argument("--screenshots", help="save a PNG of each page into this folder")
    args = parser.parse_args()
    become_group_leader()
    scenario = Scenario(args)
    ok = False
    try:
        scenario.run()
        ok = True
    except (AssertionError, Stopped) as e:
        warn(f"\nFAILED: {e}")
        scenario.save_failure()
    except Exception:
        warn("\nFAILED with an unexpected error:\n" + traceback.format_exc())
        scenario.save_failure()
    finally:
        console = scenario.console
        if not ok and console:
            warn(f"\nthe console's log ({console.process.log}), last lines:\n{console.process.log_tail()}")
        scenario.cleanup()
    elapsed = time.monotonic() - scenario.t0
    if ok:
        say(f"console test: passed {len(scenario.passed)} steps in {elapsed:.0f} s: "
            + ", ".join(scenario.passed))
        return 0
    warn(f"console test: FAILED after {len(scenario.passed)} passed steps ({elapsed:.0f} s)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
