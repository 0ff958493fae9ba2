"""The processes a console test starts (the console, the ledger worker), and
their sure end.

Every process is started in the test's own process group (the test makes
itself a group leader), so scripts/console_test.sh can end whatever is left,
browser included, with one signal to that group even if the test itself is
killed. Here, each process is also stopped by the test's `finally`, with
SIGTERM first (the console serves until SIGTERM) and SIGKILL after a grace
period.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


class Stopped(Exception):
    """SIGTERM or SIGINT reached the test: unwind and clean up."""


def become_group_leader() -> None:
    """Puts this process (and so everything it starts) in a group of its own,
    and turns SIGTERM/SIGINT into an exception so `finally` blocks run."""
    try:
        os.setpgid(0, 0)
    except PermissionError:
        pass  # already a session leader: its group is its own

    def stop(signum, _frame):
        raise Stopped(f"stopped by {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


class Process:
    """One child process, its output in a log file (stdout optionally read)."""

    def __init__(self, name: str, argv: list[str], log: Path, env=None, read_stdout=False):
        self.name = name
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(log, "w", encoding="utf-8")
        self.popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if read_stdout else self._log_file,
            stderr=self._log_file,
            env=env,
            text=True,
        )
        self._lines: list[str] = []
        self._line_ready = threading.Condition()
        if read_stdout:
            # Drained by a thread: a full pipe would block the child.
            threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for line in self.popen.stdout:
            with self._line_ready:
                self._lines.append(line.rstrip("\n"))
                self._line_ready.notify_all()
        with self._line_ready:
            self._line_ready.notify_all()

    def first_line(self, timeout: float) -> str | None:
        """The first line the process printed on stdout, or None when it
        printed none within `timeout` seconds or exited first."""
        deadline = time.monotonic() + timeout
        with self._line_ready:
            while not self._lines:
                left = deadline - time.monotonic()
                if left <= 0 or (self.popen.poll() is not None and not self._lines):
                    return None
                self._line_ready.wait(min(left, 0.2))
            return self._lines[0]

    def stdout_lines(self) -> list[str]:
        with self._line_ready:
            return list(self._lines)

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None if still running after `timeout` s."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after `grace` s. Returns the exit code of a
        process that ended on SIGTERM, None if it had to be killed."""
        code = None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            code = self.wait(grace)
            if code is None:
                self.popen.kill()
                self.popen.wait()
        else:
            code = self.popen.returncode
        self._log_file.close()
        return code

    def log_tail(self, lines: int = 30) -> str:
        try:
            self._log_file.flush()
        except ValueError:
            pass  # closed
        text = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:])


def say(message: str) -> None:
    print(message, flush=True)


def warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
