#!/usr/bin/env python3
"""A loopback fault injector between the AWS SDK and the DynamoDB emulator.

The chaos suite (tests/chaos.rs) points AWS_ENDPOINT_URL_DYNAMODB here. Each
request is forwarded to the upstream emulator unless the control file says
otherwise; the control file is re-read on every request, so a test changes
the faults while workers run. Keys (all optional):

  throttle          fraction of requests answered 400 ThrottlingException
  outage            true: every request answered 503
  conflict          fraction of TransactWriteItems answered with a
                    TransactionCanceledException whose reason is
                    TransactionConflict, and of PutItem answered with a
                    TransactionConflictException (nothing applied)
  drop_after_apply  fraction of TransactWriteItems and PutItem forwarded
                    and applied, whose response is then dropped (the
                    connection closes): the client cannot know it committed
  latency_ms        added before forwarding

Counts of what was done are written to the stats file on every request.
Loopback only; stdlib only.
"""

import argparse
import os
import http.client
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATS = {"forwarded": 0, "throttled": 0, "outage": 0, "conflict": 0, "dropped_after_apply": 0}


def control(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def bump(key, stats_path):
    with LOCK:
        STATS[key] += 1
        with open(stats_path + ".tmp", "w") as f:
            json.dump(STATS, f)
        # Atomic for the reader.
        os.replace(stats_path + ".tmp", stats_path)


def make_handler(upstream_host, upstream_port, control_path, stats_path):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status, body, error_type=None):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-amz-json-1.0")
            self.send_header("Content-Length", str(len(data)))
            if error_type:
                self.send_header("x-amzn-ErrorType", error_type)
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            body = self.rfile.read(length)
            target = self.headers.get("X-Amz-Target", "")
            c = control(control_path)
            transact = target.endswith(".TransactWriteItems")
            # A single conditional PutItem is a commit too (a fused marker
            # alone), and so is a failure record's write.
            single = target.endswith(".PutItem")
            if c.get("outage"):
                bump("outage", stats_path)
                return self.reply(503, {"__type": "com.amazonaws.dynamodb.v20120810#ServiceUnavailable",
                                        "message": "injected outage"}, "ServiceUnavailable")
            if random.random() < float(c.get("throttle", 0)):
                bump("throttled", stats_path)
                return self.reply(400, {"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException",
                                        "message": "injected throttling"}, "ThrottlingException")
            if transact and random.random() < float(c.get("conflict", 0)):
                items = len(json.loads(body or b"{}").get("TransactItems", []))
                reasons = [{"Code": "None"}] * max(items - 1, 0) + [
                    {"Code": "TransactionConflict", "Message": "injected conflict"}]
                bump("conflict", stats_path)
                return self.reply(400, {"__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
                                        "message": "Transaction cancelled, please refer cancellation reasons",
                                        "CancellationReasons": reasons}, "TransactionCanceledException")
            if single and random.random() < float(c.get("conflict", 0)):
                # What DynamoDB answers a single write on an item that an
                # ongoing transaction holds.
                bump("conflict", stats_path)
                return self.reply(400, {"__type": "com.amazonaws.dynamodb.v20120810#TransactionConflictException",
                                        "message": "injected conflict"}, "TransactionConflictException")
            if c.get("latency_ms"):
                time.sleep(float(c["latency_ms"]) / 1000)
            conn = http.client.HTTPConnection(upstream_host, upstream_port, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            conn.request("POST", self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            if (transact or single) and random.random() < float(c.get("drop_after_apply", 0)):
                # Applied upstream; the client never hears of it.
                bump("dropped_after_apply", stats_path)
                self.close_connection = True
                return
            bump("forwarded", stats_path)
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", default="127.0.0.1:4567")
    ap.add_argument("--control", required=True)
    ap.add_argument("--stats", required=True)
    a = ap.parse_args()
    host, port = a.upstream.split(":")
    server = ThreadingHTTPServer(("127.0.0.1", a.port), make_handler(host, int(port), a.control, a.stats))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
