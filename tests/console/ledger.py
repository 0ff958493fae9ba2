"""The ledger run the console is tested on: a queue, its DLQ and a table made
by `idemq init`, a small set of transfers sent with boto3, the ledger example
(examples/ledger.rs) as a local worker, and what is read back: DLQ depth,
dead letters and balances.

The transfers: ten to three healthy accounts, six to `acct-outage` (whose
downstream is down in the first run, so they are retried and end in the DLQ
after maxReceiveCount receives), one healthy transfer sent twice (a
duplicate: applied once) and one malformed (amount 0: a permanent error,
dead-lettered at once).
"""

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import boto3

from processes import Process

OUTAGE = "acct-outage"
HEALTHY = ("acct-a", "acct-b", "acct-c")
JOB_ID_ATTRIBUTE = "idemq-job-id"
MAX_RECEIVE_COUNT = 5


@dataclass
class Transfers:
    """What is sent, and what must come of it."""

    messages: list[tuple[str, str]] = field(default_factory=list)  # (job id, body)
    outage_ids: set[str] = field(default_factory=set)
    malformed_id: str = ""
    duplicate_id: str = ""
    # Each account's balance once every well-formed transfer (outage
    # included, after its redrive) is applied exactly once.
    expected: dict[str, int] = field(default_factory=dict)

    def dead_letters(self) -> int:
        return len(self.outage_ids) + 1


def transfers() -> Transfers:
    t = Transfers()

    def add(transfer_id: str, account: str, amount: int) -> None:
        body = json.dumps({"transfer_id": transfer_id, "account": account, "amount": amount})
        t.messages.append((transfer_id, body))
        if amount > 0:
            t.expected[account] = t.expected.get(account, 0) + amount

    # Ten healthy transfers and six to the outage account, interleaved as an
    # outage hits real traffic.
    a, b, c = HEALTHY
    accounts = [a, b, OUTAGE, c, a, OUTAGE, b, OUTAGE, c, a, OUTAGE, b, OUTAGE, c, OUTAGE, a]
    for i, account in enumerate(accounts):
        transfer_id = f"tr-{1001 + i}"
        add(transfer_id, account, 10 + 7 * i)
        if account == OUTAGE:
            t.outage_ids.add(transfer_id)
    # A producer's resend after a network blip: same job id, same payload.
    t.duplicate_id, body = t.messages[0]
    t.messages.append((t.duplicate_id, body))
    # Amount 0: the ledger's permanent error.
    t.malformed_id = f"tr-{1001 + len(accounts)}"
    t.messages.append(
        (t.malformed_id, json.dumps({"transfer_id": t.malformed_id, "account": "acct-a", "amount": 0}))
    )
    return t


@dataclass
class Resources:
    run: str
    queue_url: str
    dlq_url: str
    table: str


class Ledger:
    """The stack seen from the test: idemq init, boto3, the ledger worker."""

    def __init__(self, idemq: str, ledger: str, logs: Path):
        self.idemq = idemq
        self.ledger = ledger
        self.logs = logs
        self.sqs = boto3.client("sqs", endpoint_url=os.environ["AWS_ENDPOINT_URL_SQS"])
        self.dynamodb = boto3.client("dynamodb", endpoint_url=os.environ["AWS_ENDPOINT_URL_DYNAMODB"])
        self.workers: list[Process] = []

    def init(self, run: str, table: str | None = None, fifo: bool = False) -> Resources:
        """`idemq init`, as scripts/demo.sh runs it: queues named `run` (FIFO
        queues `run.fifo` with `fifo`), the table `table` (default `run`; an
        existing one is checked, not made)."""
        table = table or run
        out = subprocess.run(
            [self.idemq, "init", "--queue-name", run, "--table-name", table, *(["--fifo"] if fifo else []),
             "--max-receive-count", str(MAX_RECEIVE_COUNT), "--visibility-timeout-secs", "10"],
            capture_output=True, text=True, timeout=120,
        )
        if out.returncode != 0:
            raise AssertionError(f"idemq init failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
        try:
            made = json.loads(out.stdout)
            return Resources(run, made["queue_url"], made["dlq_url"], table)
        except (ValueError, KeyError) as e:
            raise AssertionError(f"idemq init printed no queue_url/dlq_url JSON ({e}): {out.stdout!r}")

    def send(self, queue_url: str, messages: list[tuple[str, str]]) -> None:
        for start in range(0, len(messages), 10):
            batch = messages[start:start + 10]
            sent = self.sqs.send_message_batch(
                QueueUrl=queue_url,
                Entries=[
                    {
                        "Id": str(n),
                        "MessageBody": body,
                        "MessageAttributes": {JOB_ID_ATTRIBUTE: {"DataType": "String", "StringValue": job_id}},
                        # A FIFO queue: one group per account, in order.
                        **({"MessageGroupId": json.loads(body)["account"], "MessageDeduplicationId": job_id}
                           if queue_url.endswith(".fifo") else {}),
                    }
                    for n, (job_id, body) in enumerate(batch)
                ],
            )
            if sent.get("Failed"):
                raise AssertionError(f"SendMessageBatch refused entries: {sent['Failed']}")

    def run_worker(self, res: Resources, fail_accounts: str | None, timeout: float,
                   deploy: str | None = None) -> str:
        """The ledger example as a local worker until 6 s without messages.
        Short backoff (1-2 s) so the outage's retries take seconds. `deploy`
        names the deploy its failures record (IDEMQ_DEPLOY), else none.
        Returns the worker's summary line."""
        env = dict(os.environ, IDEMQ_TABLE=res.table, IDEMQ_BACKOFF_BASE="1s",
                   IDEMQ_BACKOFF_CAP="2s", IDEMQ_LOG="error")
        for name in ("LEDGER_FAIL_ACCOUNTS", "IDEMQ_DEPLOY"):
            env.pop(name, None)
        if fail_accounts:
            env["LEDGER_FAIL_ACCOUNTS"] = fail_accounts
        if deploy:
            env["IDEMQ_DEPLOY"] = deploy
        n = len(self.workers) + 1
        # --emf: its metrics as EMF lines on stdout (the log), which the test
        # turns into CloudWatch metrics (emf.py).
        worker = Process(f"ledger worker {n}",
                         [self.ledger, "--queue-url", res.queue_url, "--exit-when-idle", "6", "--emf"],
                         self.logs / f"console-test-ledger-{n}.log", env=env)
        self.workers.append(worker)
        code = worker.wait(timeout)
        if code is None:
            worker.stop()
            raise AssertionError(f"the ledger worker did not finish within {timeout:.0f} s "
                                 f"(log: {worker.log}):\n{worker.log_tail()}")
        if code != 0:
            raise AssertionError(f"the ledger worker exited {code} (log: {worker.log}):\n{worker.log_tail()}")
        lines = [l for l in worker.log_tail(200).splitlines() if l.startswith("idemq worker:")]
        return lines[-1] if lines else "(no summary line)"

    def depth(self, queue_url: str) -> int:
        """Messages in the queue, visible or not (ApproximateNumberOfMessages
        and ...NotVisible; exact on the local stack)."""
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])

    def wait_depth(self, queue_url: str, want: int, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        got = self.depth(queue_url)
        while got != want and time.monotonic() < deadline:
            time.sleep(0.5)
            got = self.depth(queue_url)
        if got != want:
            raise AssertionError(f"{what}: expected {want} messages, found {got} after {timeout:.0f} s")

    def peek_job_ids(self, queue_url: str) -> list[str]:
        """The idemq-job-id of every message in the queue, each received once
        and made visible again at once."""
        seen: dict[str, str] = {}
        handles = []
        for _ in range(20):
            got = self.sqs.receive_message(
                QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=30,
                WaitTimeSeconds=1, MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not got:
                break
            for m in got:
                attr = m.get("MessageAttributes", {}).get(JOB_ID_ATTRIBUTE, {})
                seen[m["MessageId"]] = attr.get("StringValue", "?")
                handles.append(m["ReceiptHandle"])
        for h in handles:
            self.sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=h, VisibilityTimeout=0)
        return sorted(seen.values())

    def balance(self, table: str, account: str) -> int:
        item = self.dynamodb.get_item(
            TableName=table, Key={"pk": {"S": f"account#{account}"}}, ConsistentRead=True,
        ).get("Item")
        return int(item["balance"]["N"]) if item and "balance" in item else 0

    def stop_workers(self) -> None:
        for w in self.workers:
            w.stop(grace=5)
