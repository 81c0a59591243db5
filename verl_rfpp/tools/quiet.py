"""Where other libraries' lines go while a command prints only its own (verl's import-time warnings,
Ray's and numba's messages): file descriptor 2 of this process is sent to a log file of the command's
own, made by ``tempfile.mkstemp`` (created exclusively, mode 0600, never a fixed path, never through a
symlink). The log is removed when nothing was written to it; otherwise ``QuietLog.path`` names it.
When no log can be made (an unwritable ``TMPDIR``) the lines are dropped, never a traceback."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import Iterator, Optional


@dataclass
class QuietLog:
    """``path``: the log holding what was routed away, once the block has ended; ``None`` when
    nothing was written, when the block was verbose, or when no log could be made."""

    path: Optional[str] = None

    def mention(self) -> str:
        """A sentence naming the log for the command's output, or ``""`` when there is none."""
        return f"(other libraries' messages: {self.path})" if self.path else ""


@contextlib.contextmanager
def quiet(command: str, verbose: bool = False, stdout: bool = False) -> Iterator[QuietLog]:
    """Send file descriptor 2 to ``verl-rfpp-COMMAND-*.log`` in the temporary directory for the
    block (``verbose``: leave it on the terminal). What the command prints on stdout is untouched,
    unless ``stdout``: then file descriptor 1 goes to the log too (a block that prints nothing of
    its own while a library prints progress there: the tokenizer trainer of the demo's assets)."""
    log = QuietLog()
    if verbose:
        yield log
        return
    try:
        descriptor, path = tempfile.mkstemp(prefix=f"verl-rfpp-{command}-", suffix=".log")
    except OSError:
        descriptor, path = os.open(os.devnull, os.O_WRONLY), None
    routed = (1, 2) if stdout else (2,)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(fd) for fd in routed]
    try:
        for fd in routed:
            os.dup2(descriptor, fd)
        yield log
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip(routed, saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
        written = os.fstat(descriptor).st_size if path else 0
        os.close(descriptor)
        if path and written:
            log.path = path
        elif path:
            with contextlib.suppress(OSError):
                os.unlink(path)
