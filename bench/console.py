#!/usr/bin/env python3
"""How `idemq console` scales: a DLQ of 10,000 dead letters on the local stack.

`make bench-console` (scripts/bench_console.sh) runs this after starting the
stack and building `idemq`; BENCHMARKS.md, "Console with 10,000 dead
letters", explains what is measured and what carries over to SQS.

1. `idemq init` makes a queue, its DLQ and a table named for the run.
2. N ledger transfers are put straight into the DLQ (`SendMessageBatch`),
   over 50 accounts, stamped `idemq-job-id`; most also carry the context
   idemq's own dead-lettering writes (`idemq-error`, `idemq-attempts`,
   `idemq-failed-at`, `idemq-source-queue`, `idemq-first-enqueued`) with
   one of three causes (four groups with the letters that have none; no
   failure records are written, so every letter's record is looked for
   and none found, which costs the same requests).
3. Baseline: `idemq dlq stats` on the same DLQ, the CLI's full read.
4. `idemq console` is started several times; each time, over plain HTTP
   with the cookie its token link sets: the first page (its first full
   read of the DLQ), the letters page, a search by a payload field (the
   first one and again), one letter's page, a forced re-read
   (`?refresh=1`), and the process's peak RSS (`VmHWM`).

Between reads the DLQ must be whole again (every letter visible): a
reader that left letters in flight would make the next one read fewer.

    bench/console.py [--letters 10000] [--starts 3] [--repeats 5] [--write]

Prints a table, writes the run's numbers to bench/out/console.json, and
with --write (10,000 letters only) the block between the bench:console
markers of BENCHMARKS.md. Needs boto3 (the stack's `.state/venv-moto` has
it) and the stack's endpoints in the environment, else read from
`.state/stack.env`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html.parser
import http.client
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECTION = "Console with 10,000 dead letters"
BLOCK_START = "<!-- bench:console -->"
BLOCK_END = "<!-- /bench:console -->"
ACCOUNTS = 50
SEARCH_ACCOUNT = "acct-7"
# Causes of the letters that carry idemq's context, with their share of all
# letters; the rest carry only `idemq-job-id`. Numbers and quoted text vary
# inside a cause, as the console's grouping must see through them. Each
# returns (error, attempts) and may change the transfer to fit its error.


def _not_positive(r: random.Random, t: dict) -> tuple[str, int]:
    t["amount"] = -r.randint(0, 500)
    return "amount must be positive", 1


def _over_limit(r: random.Random, t: dict) -> tuple[str, int]:
    t["amount"] = r.randint(10001, 50000)
    return f"amount {t['amount']} exceeds the daily limit of 10000", 1


def _outage(r: random.Random, t: dict) -> tuple[str, int]:
    return f"downstream outage: account '{t['account']}' unreachable after {r.randint(800, 3000)} ms", 5


CAUSES = ((0.30, _not_positive), (0.15, _over_limit), (0.15, _outage))


def log(msg: str) -> None:
    print(f"bench-console: {msg}", file=sys.stderr, flush=True)


def die(msg: str) -> None:
    log(f"error: {msg}")
    sys.exit(1)


def load_stack_env() -> None:
    """The stack's endpoints, unless the caller already exported them."""
    if os.environ.get("AWS_ENDPOINT_URL"):
        return
    env = ROOT / ".state" / "stack.env"
    if not env.exists():
        die("no AWS_ENDPOINT_URL and no .state/stack.env: start the stack (scripts/stack.sh up)")
    for line in env.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            os.environ.setdefault(k.strip(), v.strip())


# ---------------------------------------------------------------- the DLQ


def rfc3339_ms(t: float) -> str:
    d = dt.datetime.fromtimestamp(t, dt.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"


def letters(n: int, queue_name: str, seed: int):
    """The N letters: (body, message attributes), deterministic per seed."""
    r = random.Random(seed)
    now = time.time()
    for i in range(n):
        t = {
            "transfer_id": f"transfer-{i:05d}",
            "account": f"acct-{i % ACCOUNTS}",
            "amount": r.randint(1, 9000),
        }
        attrs = {"idemq-job-id": {"DataType": "String", "StringValue": t["transfer_id"]}}
        x, cause = r.random(), None
        for share, make in CAUSES:
            if x < share:
                cause = make
                break
            x -= share
        if cause is not None:
            error, attempts = cause(r, t)
            failed_at = now - r.uniform(0, 24 * 3600)
            enqueued = failed_at - r.uniform(1, 600)
            attrs.update(
                {
                    "idemq-error": {"DataType": "String", "StringValue": error},
                    "idemq-attempts": {"DataType": "Number", "StringValue": str(attempts)},
                    "idemq-failed-at": {"DataType": "String", "StringValue": rfc3339_ms(failed_at)},
                    "idemq-source-queue": {"DataType": "String", "StringValue": queue_name},
                    "idemq-first-enqueued": {"DataType": "String", "StringValue": str(int(enqueued * 1000))},
                }
            )
        yield json.dumps(t, separators=(",", ":")), attrs


def fill_dlq(sqs, dlq_url: str, n: int, queue_name: str, seed: int) -> float:
    """Sends the N letters, 10 a request, 8 requests at once; returns seconds."""
    all_letters = list(letters(n, queue_name, seed))
    batches = [all_letters[i : i + 10] for i in range(0, n, 10)]
    sent = 0
    lock = threading.Lock()
    tty = sys.stderr.isatty()
    step = max(1, n // 10)
    t0 = time.perf_counter()

    def send(batch_no: int) -> None:
        nonlocal sent
        batch = batches[batch_no]
        entries = [
            {"Id": str(j), "MessageBody": body, "MessageAttributes": attrs}
            for j, (body, attrs) in enumerate(batch)
        ]
        for attempt in range(5):
            resp = sqs.send_message_batch(QueueUrl=dlq_url, Entries=entries)
            failed = {f["Id"] for f in resp.get("Failed", [])}
            if not failed:
                break
            entries = [e for e in entries if e["Id"] in failed]
            time.sleep(0.2 * (attempt + 1))
        else:
            raise RuntimeError(f"batch {batch_no}: {len(entries)} messages refused 5 times")
        with lock:
            before, sent = sent, sent + len(batch)
            if tty:
                print(f"\rbench-console: sent {sent:,} of {n:,} dead letters", end="", file=sys.stderr, flush=True)
            elif sent // step != before // step or sent == n:
                log(f"sent {sent:,} of {n:,} dead letters")

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(send, range(len(batches))))
    if tty:
        print(file=sys.stderr)
    return time.perf_counter() - t0


def depth(sqs, url: str) -> tuple[int, int]:
    a = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(a["ApproximateNumberOfMessages"]), int(a["ApproximateNumberOfMessagesNotVisible"])


def wait_whole(sqs, url: str, n: int, what: str, limit: float = 90.0) -> float:
    """Waits until all N letters are visible again; returns seconds waited."""
    t0 = time.monotonic()
    while True:
        visible, in_flight = depth(sqs, url)
        if visible >= n and in_flight == 0:
            return time.monotonic() - t0
        if time.monotonic() - t0 > limit:
            die(f"after {what}: {visible} visible, {in_flight} in flight after {limit:.0f} s, expected {n} visible")
        time.sleep(0.5)


# ---------------------------------------------------------------- processes


def peak_rss_mb(pid: int) -> tuple[float, float]:
    """(VmHWM, VmRSS) of a live process, in MB (10^6 bytes)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmHWM", "VmRSS"):
            fields[k] = int(v.split()[0]) * 1024 / 1e6
    return fields["VmHWM"], fields["VmRSS"]


def run_cli_stats(binary: str, dlq_url: str, table: str, scratch: Path) -> tuple[float, float, dict]:
    """`idemq dlq stats --json` once: (seconds, peak RSS MB, its JSON)."""
    cmd = [binary, "dlq", "stats", "--dlq-url", dlq_url, "--table", table, "--json"]
    out_path, err_path = scratch.with_suffix(".stats.json"), scratch.with_suffix(".stats.err")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        # wait4, not p.wait(): its rusage is this child's own peak RSS.
        _, status, usage = os.wait4(p.pid, 0)
        secs = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    maxrss_mb = usage.ru_maxrss * 1024 / 1e6
    if p.returncode not in (0, 1):
        die(f"{' '.join(cmd)} exited {p.returncode}: {err_path.read_text(errors='replace')[-2000:]}")
    try:
        stats = json.loads(out_path.read_text())
    except json.JSONDecodeError:
        die(f"idemq dlq stats --json printed no JSON (stderr: {err_path})")
    return secs, maxrss_mb, stats


class Console:
    """One `idemq console` process and an HTTP client holding its cookie."""

    def __init__(self, binary: str, dlq_url: str, table: str, log_path: Path, extra: list[str]):
        self.cmd = [binary, "console", "--dlq-url", dlq_url, "--table", table, "--listen", "127.0.0.1:0", *extra]
        self.log = open(log_path, "ab")
        self.cookie: str | None = None
        self.notes: list[str] = []
        self.conn: http.client.HTTPConnection | None = None
        self.t_start = time.perf_counter()
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self.log)
        line = self.proc.stdout.readline().decode().strip()
        self.t_url = time.perf_counter() - self.t_start
        m = re.fullmatch(r"idemq console: (http://127\.0\.0\.1:(\d+))/\?token=(\S+)", line)
        if not m:
            self.stop()
            die(f"the console's first stdout line is not its URL: {line!r} (log: {log_path})")
        self.base, self.port, self.token = m.group(1), int(m.group(2)), m.group(3)
        # Before any read: what the snapshot adds is the peak less this.
        self.idle_rss_mb = peak_rss_mb(self.proc.pid)[1]

    def _request(self, path: str, headers: dict) -> tuple[int, dict, bytes]:
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=900)
            try:
                self.conn.request("GET", path, headers=headers)
                resp = self.conn.getresponse()
                body = resp.read()
                hdrs = {}
                for k, v in resp.getheaders():
                    hdrs.setdefault(k.lower(), []).append(v)
                if resp.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return resp.status, hdrs, body
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def login(self) -> float:
        """GET /?token=…: the 303 and its cookie. Returns seconds."""
        t0 = time.perf_counter()
        status, hdrs, _ = self._request(f"/?token={urllib.parse.quote(self.token)}", {})
        secs = time.perf_counter() - t0
        if status != 303:
            self.notes.append(f"GET /?token=…: expected 303, got {status}")
        loc = (hdrs.get("location") or [""])[0]
        if loc and urllib.parse.urlsplit(loc).path != "/":
            self.notes.append(f"GET /?token=…: expected a redirect to /, got {loc!r}")
        for c in hdrs.get("set-cookie", []):
            if c.startswith("idemq_console="):
                self.cookie = c.split(";", 1)[0]
                attrs = {a.strip().lower() for a in c.split(";")[1:]}
                for want in ("httponly", "samesite=strict", "path=/"):
                    if want not in attrs:
                        self.notes.append(f"cookie idemq_console lacks {want}: {c!r}")
        if self.cookie is None:
            die(f"GET /?token=… set no idemq_console cookie (status {status}, headers {hdrs})")
        return secs

    def get(self, path: str, page: str | None = None) -> tuple[float, "Page"]:
        """GET path with the cookie: (seconds to the whole body, parsed page)."""
        t0 = time.perf_counter()
        status, _, body = self._request(path, {"Cookie": self.cookie or ""})
        secs = time.perf_counter() - t0
        if status != 200:
            die(f"GET {path}: {status}: {body[:500]!r}")
        parsed = Page(body.decode("utf-8", errors="replace"))
        if page and parsed.data_page != page:
            self.notes.append(f"GET {path}: expected data-page={page!r}, got {parsed.data_page!r}")
        return secs, parsed

    def unauthenticated_status(self) -> int:
        status, _, body = self._request("/", {})
        if status != 401 or Page(body.decode(errors="replace")).data_page != "login":
            self.notes.append(f"GET / without the cookie: expected 401 and data-page=login, got {status}")
        return status

    def rss(self) -> tuple[float, float]:
        return peak_rss_mb(self.proc.pid)

    def stop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.notes.append("the console did not exit within 20 s of SIGTERM; killed")
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Page(html.parser.HTMLParser):
    """What the benchmark reads from a page: data-page, texts by id,
    consumers, letter rows, the refresh link."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.data_page: str | None = None
        self.by_id: dict[str, str] = {}
        self.consumers: list[str] = []
        self.letter_ids: list[str] = []
        self.refresh_href: str | None = None
        self._open: list[tuple[str, str]] = []  # (tag, id) of elements with an id
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "body":
            self.data_page = a.get("data-page")
        if tag == "section" and "consumer" in classes and a.get("data-consumer"):
            self.consumers.append(a["data-consumer"])
        if tag == "tr" and "letter" in classes:
            self.letter_ids.append(a.get("data-job-id") or a.get("data-message-id") or "")
        if tag == "a" and a.get("id") == "refresh":
            self.refresh_href = a.get("href")
        if a.get("id"):
            self.by_id.setdefault(a["id"], "")
            self._open.append((tag, a["id"]))

    def handle_endtag(self, tag):
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i]
                break

    def handle_data(self, data):
        for _, ident in self._open:
            self.by_id[ident] += data


def match_count(page: Page) -> tuple[int, int]:
    text = " ".join(page.by_id.get("match-count", "").split())
    m = re.search(r"([\d,]+) of ([\d,]+)", text)
    if not m:
        die(f"no 'N of M dead letters match' in #match-count: {text!r}")
    return int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))


# ---------------------------------------------------------------- report


def ms(x: float) -> str:
    return f"{x * 1000:,.0f} ms" if x >= 1 else f"{x * 1000:,.1f} ms"


def secs_or_ms(x: float) -> str:
    return f"{x:,.2f} s" if x >= 1 else ms(x)


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(xs: list[float]) -> str:
    return "" if len(xs) < 2 else f" ({secs_or_ms(min(xs))}–{secs_or_ms(max(xs))})"


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}"


def version(binary: str) -> str:
    try:
        return subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return binary


def per_letter_kb(r: dict) -> float:
    """What one read adds to the process's peak, per letter."""
    return (med(r["first_read_hwm_mb"]) - med(r["idle_rss_mb"])) * 1000 / r["letters"]


def report(r: dict) -> str:
    n = r["letters"]
    cli = r["cli_secs"]
    first = r["first_page_from_start"]
    rows = [
        ("`idemq dlq stats` (the CLI's full read, baseline)", f"{secs_or_ms(med(cli))}{spread(cli)}", f"{len(cli)} run{'' if len(cli) == 1 else 's'}; peak RSS {r['cli_rss_mb']:.0f} MB"),
        ("console: start to its URL line", secs_or_ms(med(r["url_secs"])), ""),
        ("**console: first page** (`GET /` after the token redirect: its first full read)", f"**{secs_or_ms(med(r['first_page']))}**{spread(r['first_page'])}", f"from process start: {secs_or_ms(med(first))}; **{med(r['first_page']) / med(cli):.2f}×** the CLI's read"),
        ("console: letters page (`/c/NAME/letters`: groups and the first 500 rows)", ms(med(r["letters_page"])), f"median of {len(r['letters_page'])}"),
        (f"console: search by payload field, first (`?pointer=/account&value={SEARCH_ACCOUNT}`)", ms(med(r["search_first"])), f"median of {len(r['search_first'])} (one a start); {r['matches']:,} of {n:,} match"),
        ("console: the same search again (from the snapshot)", ms(med(r["search_again"])), f"median of {len(r['search_again'])}"),
        ("console: a letter's page (`/c/NAME/letter/ID`)", ms(med(r["letter_page"])), f"median of {len(r['letter_page'])}"),
        ("**console: forced re-read** (`?refresh=1`)", f"**{secs_or_ms(med(r['refresh']))}**{spread(r['refresh'])}", f"{med(r['refresh']) / med(cli):.2f}× the CLI's read"),
        ("console: peak RSS (`VmHWM`) after the first page", f"**{med(r['first_read_hwm_mb']):.0f} MB**", f"{med(r['idle_rss_mb']):.0f} MB before its first read: about {per_letter_kb(r):.1f} KB a letter"),
        ("console: peak RSS at the end (after the re-read)", f"{med(r['console_hwm_mb']):.0f} MB", f"max of {len(r['console_hwm_mb'])} starts {max(r['console_hwm_mb']):.0f} MB; the old snapshot is kept until the new read is done; RSS at the end {med(r['console_rss_mb']):.0f} MB"),
    ]
    out = [
        f"| {n:,} dead letters, local stack | time (median; range) | notes |",
        "| --- | --- | --- |",
    ]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(out)


def block(r: dict) -> str:
    return "\n".join(
        [
            BLOCK_START,
            f"Run of {r['at']} (`{r['command']}`), {r['total_secs']:.0f} s in all.",
            f"Machine: {r['machine']} (shared with other work); local stack: LocalStack SQS + moto DynamoDB on loopback.",
            f"{r['version']}, debug build (`target/debug/idemq`); {r['letters']:,} letters sent in {r['fill_secs']:.1f} s;"
            f" {r['starts']} console starts, cheap pages {r['repeats']} times a start;"
            f" {r['reads']} full reads in all, after which a letter's `ApproximateReceiveCount` was {r['receive_count']}"
            f" (the receive that read it included).",
            "",
            report(r),
            BLOCK_END,
        ]
    )


def write_benchmarks(r: dict) -> None:
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text()
    new = block(r)
    if BLOCK_START in text and BLOCK_END in text:
        head, rest = text.split(BLOCK_START, 1)
        _, tail = rest.split(BLOCK_END, 1)
        text = head + new + tail
    else:
        text = text.rstrip("\n") + f"\n\n## {SECTION}\n\n{new}\n"
    path.write_text(text)
    log("BENCHMARKS.md updated")


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--letters", type=int, default=int(os.environ.get("BENCH_LETTERS", "10000")))
    ap.add_argument("--starts", type=int, default=3, help="console starts (each: a first page and a re-read)")
    ap.add_argument("--repeats", type=int, default=5, help="times each cheap page is fetched per start")
    ap.add_argument("--cli-runs", type=int, default=3)
    ap.add_argument("--binary", default=os.environ.get("IDEMQ_BIN", str(ROOT / "target" / "debug" / "idemq")))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="leave the queues and the table")
    ap.add_argument("--write", action="store_true", help=f"update BENCHMARKS.md, {SECTION!r} (10,000 letters only)")
    ap.add_argument("--command", default=os.environ.get("BENCH_COMMAND", "bench/console.py"))
    args = ap.parse_args()
    if args.letters < ACCOUNTS:
        die(f"--letters must be at least {ACCOUNTS}")
    if not os.access(args.binary, os.X_OK):
        die(f"{args.binary} is not built (cargo build --locked --workspace --features testing,postgres --bin idemq)")

    load_stack_env()
    import boto3  # the stack's venv has it

    sqs = boto3.client("sqs")
    started = time.perf_counter()
    run = f"bench-console-{int(time.time())}"
    logs = ROOT / ".state" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    console_log = logs / f"{run}.log"

    log(f"idemq init --queue-name {run} --table-name {run} --max-receive-count 5")
    init = subprocess.run(
        [args.binary, "init", "--queue-name", run, "--table-name", run, "--max-receive-count", "5", "--no-deletion-protection"],
        capture_output=True,
        text=True,
    )
    if init.returncode != 0:
        die(f"idemq init failed: {init.stderr[-2000:]}")
    res = json.loads(init.stdout)
    queue_url, dlq_url = res["queue_url"], res["dlq_url"]

    r: dict = {
        "letters": args.letters,
        "starts": args.starts,
        "repeats": args.repeats,
        "machine": machine(),
        "version": version(args.binary),
        "command": args.command,
        "at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    notes: list[str] = []
    try:
        log(f"putting {args.letters:,} dead letters into {dlq_url}")
        r["fill_secs"] = fill_dlq(sqs, dlq_url, args.letters, run, args.seed)
        wait_whole(sqs, dlq_url, args.letters, "sending")
        expected_matches = sum(1 for i in range(args.letters) if f"acct-{i % ACCOUNTS}" == SEARCH_ACCOUNT)
        reads = 0

        # Baseline: the CLI's full read of the same DLQ.
        r["cli_secs"] = []
        for i in range(args.cli_runs):
            secs, rss, stats = run_cli_stats(args.binary, dlq_url, run, logs / run)
            reads += 1
            r["cli_secs"].append(secs)
            r["cli_rss_mb"] = max(rss, r.get("cli_rss_mb", 0.0))
            got = stats.get("read", stats.get("jobs"))
            log(f"idemq dlq stats: {secs:.2f} s, read {got}")
            if got is not None and got != args.letters:
                notes.append(f"idemq dlq stats read {got} letters, expected {args.letters}")
            wait_whole(sqs, dlq_url, args.letters, "idemq dlq stats")

        for key in ("idle_rss_mb", "first_read_hwm_mb", "url_secs", "first_page", "first_page_from_start", "letters_page", "search_first",
                    "search_again", "letter_page", "refresh", "console_hwm_mb", "console_rss_mb"):
            r[key] = []
        extra = ["--refresh-secs", "3600"]  # only ?refresh=1 re-reads during a run
        for start in range(args.starts):
            c = Console(args.binary, dlq_url, run, console_log, extra)
            try:
                r["url_secs"].append(c.t_url)
                r["idle_rss_mb"].append(c.idle_rss_mb)
                c.unauthenticated_status()
                auth = c.login()
                secs, overview = c.get("/", "overview")
                reads += 1
                r["first_page"].append(auth + secs)
                r["first_page_from_start"].append(time.perf_counter() - c.t_start)
                r["first_read_hwm_mb"].append(c.rss()[0])
                visible, in_flight = depth(sqs, dlq_url)
                if in_flight:
                    notes.append(f"after the first page: {in_flight} letters still in flight (the read should release them)")
                if not overview.consumers:
                    die("the overview names no consumer (section.consumer[data-consumer])")
                name = urllib.parse.quote(overview.consumers[0], safe="")
                letters_path = f"/c/{name}/letters"
                search_path = f"{letters_path}?pointer=%2Faccount&value={SEARCH_ACCOUNT}"

                for _ in range(args.repeats):
                    secs, lp = c.get(letters_path, "letters")
                    r["letters_page"].append(secs)
                shown, total = match_count(lp)
                if total != args.letters or shown != args.letters:
                    notes.append(f"letters page: '{shown} of {total}' match, expected {args.letters} of {args.letters}")
                if len(lp.letter_ids) != min(500, args.letters):
                    notes.append(f"letters page shows {len(lp.letter_ids)} rows, expected {min(500, args.letters)}")

                secs, sp = c.get(search_path, "letters")
                r["search_first"].append(secs)
                for _ in range(args.repeats):
                    secs, sp = c.get(search_path, "letters")
                    r["search_again"].append(secs)
                r["matches"], total = match_count(sp)
                if r["matches"] != expected_matches or total != args.letters:
                    notes.append(f"search {SEARCH_ACCOUNT}: '{r['matches']} of {total}', expected {expected_matches} of {args.letters}")

                job = next((j for j in sp.letter_ids if j), None) or next((j for j in lp.letter_ids if j), None)
                if job is None:
                    die("no letter row carries data-job-id or data-message-id")
                for _ in range(args.repeats):
                    secs, _ = c.get(f"/c/{name}/letter/{urllib.parse.quote(job, safe='')}", "letter")
                    r["letter_page"].append(secs)

                href = lp.refresh_href or f"{letters_path}?refresh=1"
                if lp.refresh_href is None:
                    notes.append("letters page has no a#refresh; used ?refresh=1")
                secs, rp = c.get(href, "letters")
                reads += 1
                r["refresh"].append(secs)
                shown, total = match_count(rp)
                if total != args.letters:
                    notes.append(f"after ?refresh=1: {total} letters, expected {args.letters}")

                hwm, rss = c.rss()
                r["console_hwm_mb"].append(hwm)
                r["console_rss_mb"].append(rss)
                log(
                    f"start {start + 1}: first page {r['first_page'][-1]:.2f} s, re-read {r['refresh'][-1]:.2f} s,"
                    f" search {r['search_first'][-1] * 1000:.1f} / {r['search_again'][-1] * 1000:.1f} ms, VmHWM {hwm:.0f} MB"
                )
            finally:
                c.stop()
                notes.extend(n for n in c.notes if n not in notes)
            wait_whole(sqs, dlq_url, args.letters, "the console")

        # What reading did to each letter: one receive per full read (and
        # one for this look, which holds nothing: visibility 0).
        m = sqs.receive_message(
            QueueUrl=dlq_url, MaxNumberOfMessages=1, VisibilityTimeout=0,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
        ).get("Messages", [])
        r["receive_count"] = int(m[0]["Attributes"]["ApproximateReceiveCount"]) if m else 0
        r["reads"] = reads
    finally:
        if not args.keep:
            for url in (queue_url, dlq_url):
                try:
                    sqs.delete_queue(QueueUrl=url)
                except Exception as e:  # cleanup only: report and go on
                    log(f"could not delete {url}: {e}")
            try:
                boto3.client("dynamodb").delete_table(TableName=run)
            except Exception as e:
                log(f"could not delete table {run}: {e}")

    r["total_secs"] = time.perf_counter() - started
    (ROOT / "bench" / "out").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "out" / "console.json").write_text(json.dumps(r, indent=1) + "\n")
    print(f"{args.letters:,} dead letters; {r['reads']} full reads; a letter's receive count at the end: {r['receive_count']}")
    print(report(r))
    if notes:
        print("\ncontract notes (what the console did not do as its spec says):")
        for n in notes:
            print(f"  - {n}")
    if args.write:
        if args.letters != 10000:
            log(f"not writing BENCHMARKS.md: its section is for 10,000 letters, this run had {args.letters:,}")
        else:
            write_benchmarks(r)


if __name__ == "__main__":
    main()
