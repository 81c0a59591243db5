"""Where other libraries' lines go while a command prints only its own (verl's import-time warnings,
Ray's and numba's messages): file descriptor 2 of this process is sent to a log file of the command's
own, made by ``tempfile.mkstemp`` (created exclusively, mode 0600, never a fixed path, never through a
symlink). The command says nothing of those lines unless one of them reads as an error
(``ERROR_LINE``: a logging record at ERROR or above, a traceback): then ``QuietLog.mention`` names the
log (or counts its lines). The log is removed when nothing was written to it or when the block ends
by an exception (an interrupt included); otherwise ``QuietLog.path`` names it, for the caller to move
or, when it mentions nothing, remove (``discard``). With ``keep=False`` the log has no name at all
(``tempfile.TemporaryFile``) and ``QuietLog`` only counts its lines. When no log can be made (an
unwritable ``TMPDIR``) the lines are dropped, never a traceback. ``scratch`` gives a command a private
temporary directory for what other libraries write there (torch's ``torchinductor_*`` cache), removed
when the command ends."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Iterator, Optional

# A line of another library the user must see: a logging record at ERROR or above (verl's and
# Python's formats put the level first), or a traceback and its last line.
ERROR_LINE = re.compile(r"^\W*(?:ERROR|CRITICAL|FATAL)\b|^Traceback \(most recent call last\):|^\S*Error: ")


@dataclass
class QuietLog:
    """``path``: the log holding what was routed away, once the block has ended; ``None`` when
    nothing was written, when the block was verbose, or when no log could be made."""

    path: Optional[str] = None
    lines: int = 0
    errors: int = 0  # of ``lines``, those that read as errors (``ERROR_LINE``)

    def mention(self) -> str:
        """A sentence naming the log (or, for a log not kept, counting its lines) for the command's
        output when a line of it reads as an error, else ``""``."""
        if not self.errors:
            return ""
        if self.path:
            return f"(other libraries' messages: {self.path})"
        if self.lines:
            plural = "s" if self.lines > 1 else ""
            return f"(other libraries printed {self.lines} line{plural}, not shown: -v shows them)"
        return ""


@contextlib.contextmanager
def quiet(command: str, verbose: bool = False, stdout: bool = False, keep: bool = True) -> Iterator[QuietLog]:
    """Send file descriptor 2 to ``verl-rfpp-COMMAND-*.log`` in the temporary directory for the
    block (``verbose``: leave it on the terminal). What the command prints on stdout is untouched,
    unless ``stdout``: then file descriptor 1 goes to the log too (a block that prints nothing of
    its own while a library prints progress there: the tokenizer trainer of the demo's assets).
    ``keep=False``: the log is a file with no name, gone when closed; only its lines are counted."""
    log = QuietLog()
    if verbose:
        yield log
        return
    anonymous = None
    try:
        if keep:
            descriptor, path = tempfile.mkstemp(prefix=f"verl-rfpp-{command}-", suffix=".log")
        else:
            anonymous = tempfile.TemporaryFile()
            descriptor, path = os.dup(anonymous.fileno()), None
    except OSError:
        descriptor, path = os.open(os.devnull, os.O_WRONLY), None
    routed = (1, 2) if stdout else (2,)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(fd) for fd in routed]
    ended = False
    try:
        for fd in routed:
            os.dup2(descriptor, fd)
        yield log
        ended = True
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip(routed, saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
        written = os.fstat(descriptor).st_size if path else 0
        if anonymous is not None or written:
            _count(log, anonymous.fileno() if anonymous is not None else descriptor)
        os.close(descriptor)
        if anonymous is not None:
            anonymous.close()
        if path and written and ended:
            log.path = path
        elif path:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _count(log: QuietLog, descriptor: int) -> None:
    """``log.lines`` and ``log.errors`` from the log open at ``descriptor`` (read from its start)."""
    with open(os.dup(descriptor), "rb") as handle:
        handle.seek(0)
        for line in handle:
            log.lines += 1
            log.errors += bool(ERROR_LINE.search(line.decode("utf-8", "replace")))


def discard(log: QuietLog) -> None:
    """Remove the kept log of a command that mentions nothing of it (no line reads as an error)."""
    if log.path and not log.mention():
        with contextlib.suppress(OSError):
            os.unlink(log.path)
        log.path = None


_SCRATCH_VARIABLES = ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR")  # torch sets the second on import (cache_dir_utils)


@contextlib.contextmanager
def scratch(command: str) -> Iterator[Optional[str]]:
    """A private temporary directory (``verl-rfpp-COMMAND-*``, mode 0700) for the block: ``TMPDIR`` and
    ``tempfile.tempdir`` point at it, so what other libraries write to the temporary directory (the
    ``torchinductor_USER`` folder torch makes when verl imports it, a child's files) lands there; it
    is removed, and both restored, when the block ends. ``None`` (nothing changed) when it cannot be
    made."""
    try:
        path = tempfile.mkdtemp(prefix=f"verl-rfpp-{command}-")
    except OSError:
        yield None
        return
    saved, saved_tempdir = {name: os.environ.get(name) for name in _SCRATCH_VARIABLES}, tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = path, path
    try:
        yield path
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        tempfile.tempdir = saved_tempdir
        shutil.rmtree(path, ignore_errors=True)
