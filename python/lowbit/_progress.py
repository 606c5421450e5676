"""Progress for the long calls: the caller's callback, or a one-line bar on stderr when it is a terminal."""

from __future__ import annotations

import contextlib
import sys
import time


class _Bar:
    def __init__(self, label: str):
        self.label = label
        self.start = time.monotonic()
        self.width = 0

    def __call__(self, done: int, total: int, detail: str = "") -> None:
        filled = 30 * min(done, total) // total if total else 0
        rate = done / max(time.monotonic() - self.start, 1e-9)
        line = f"{self.label} [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {rate:.2f}/s {detail}"
        self.width = max(self.width, len(line))
        sys.stderr.write("\r" + line.ljust(self.width))
        sys.stderr.flush()

    def close(self) -> None:
        if self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()


@contextlib.contextmanager
def progress_or_bar(progress, label: str):
    if progress is not None or not sys.stderr.isatty():
        yield progress
        return
    bar = _Bar(label)
    try:
        yield bar
    finally:
        bar.close()
