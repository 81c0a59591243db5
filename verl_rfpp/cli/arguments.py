"""The command line's shared argument checks: counts that must be positive and output directories
that must be usable, refused at parse time (exit 2, one line) before any command starts work."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import NoReturn, Optional


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stdout, where the CLI prints every
    refusal: ``verl-rfpp demo: --steps 0: train at least 1 step``."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message}")
        raise SystemExit(2)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help in which every option shows its default: ``(default: X)`` is appended to an option's
    text unless the text says it, the option is a flag, or it has none (``None``: the text says
    what happens without it)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS) or action.default is False or (
                not action.option_strings):
            return text
        return f"{text} (default: %(default)s)"


class Positive(argparse.Action):
    """An ``int`` option that must be at least 1; ``fix`` says what to give instead
    (``add_argument("--steps", type=int, action=Positive, fix="train at least 1 step")``)."""

    def __init__(self, option_strings, dest, fix: str = "give a count of at least 1", **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.fix = fix

    def __call__(self, parser, namespace, value, option_string=None) -> None:
        if value < 1:
            parser.error(f"{option_string} {value}: {self.fix}")
        setattr(namespace, self.dest, value)


class OutputDirectory(argparse.Action):
    """A directory the command writes into: an existing one it may write to, or a new one it can
    create (its nearest existing ancestor a directory it may write to). Stored as an absolute
    ``Path``: verl's workers run in other working directories."""

    def __call__(self, parser, namespace, value, option_string=None) -> None:
        problem = directory_problem(value)
        if problem is not None:
            parser.error(f"{option_string} {value}: {problem}; name a directory you can write to "
                         "(it is created if missing)")
        setattr(namespace, self.dest, Path(value).absolute())


def directory_problem(value: str) -> Optional[str]:
    """Why the path ``value`` cannot serve as an output directory, or ``None``."""
    if not value.strip():
        return "an empty path"
    path = Path(value)
    if path.exists():
        if not path.is_dir():
            return "is a file, not a directory"
        return None if os.access(path, os.W_OK | os.X_OK) else "is a directory you may not write to"
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is a file, so no directory can be made below it"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"does not exist and {ancestor} is a directory you may not write to"
    return None
