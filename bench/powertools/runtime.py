"""A minimal Lambda Runtime API client for the Powertools peer.

What Lambda's managed Python runtime does, cut to the loop: import the
handler module (`_HANDLER`, e.g. `handler.lambda_handler`), then GET the
next event, call the handler with a LambdaContext, POST its answer, forever.
It speaks to `AWS_LAMBDA_RUNTIME_API` (`host:port`, or `http://host:port/prefix`
as `cargo lambda watch` gives it). The managed runtime's own bootstrap
(awslambdaric) is not started, so the init measured here is Python's start
plus the handler's imports and module-level init: a lower bound of what
Lambda reports as Init Duration for this function.

On stderr, one line: `init: imports <ms> ms` (time inside Python).
"""

from __future__ import annotations

import http.client
import importlib
import json
import os
import sys
import time
import traceback

START = time.perf_counter()


class LambdaContext:
    def __init__(self, request_id: str, deadline_ms: int, arn: str):
        self.aws_request_id = request_id
        self.invoked_function_arn = arn
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
        self.log_group_name = os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self.identity = None
        self.client_context = None
        self._deadline_ms = deadline_ms

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


def main() -> None:
    api = os.environ["AWS_LAMBDA_RUNTIME_API"].removeprefix("http://")
    host, _, prefix = api.partition("/")
    base = f"/{prefix}".rstrip("/") + "/2018-06-01/runtime"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    module, _, name = os.environ["_HANDLER"].rpartition(".")
    conn = http.client.HTTPConnection(host)
    try:
        handler = getattr(importlib.import_module(module), name)
    except Exception as e:  # what the managed runtime reports as Runtime.ImportModuleError
        body = json.dumps({"errorMessage": str(e), "errorType": type(e).__name__})
        conn.request("POST", f"{base}/init/error", body=body)
        conn.getresponse().read()
        raise
    print(f"init: imports {(time.perf_counter() - START) * 1000:.1f} ms", file=sys.stderr, flush=True)
    while True:
        conn.request("GET", f"{base}/invocation/next")
        r = conn.getresponse()
        event = r.read()
        request_id = r.getheader("Lambda-Runtime-Aws-Request-Id")
        context = LambdaContext(
            request_id,
            int(r.getheader("Lambda-Runtime-Deadline-Ms") or 0),
            r.getheader("Lambda-Runtime-Invoked-Function-Arn") or "",
        )
        try:
            result = handler(json.loads(event), context)
            path, body, headers = "response", json.dumps(result), {}
        except Exception as e:
            traceback.print_exc()
            path = "error"
            body = json.dumps({"errorMessage": str(e), "errorType": type(e).__name__})
            headers = {"Lambda-Runtime-Function-Error-Type": "Unhandled"}
        conn.request(
            "POST", f"{base}/invocation/{request_id}/{path}", body=body,
            headers={"Content-Type": "application/json", **headers},
        )
        conn.getresponse().read()


if __name__ == "__main__":
    main()
