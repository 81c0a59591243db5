"""The builtins the reader evaluates itself (docs/contract.md section 6.5), each as bash 5 does:
``echo`` (``-n``, ``-e``, ``-E``), ``printf`` (``-v``; ``%s``, ``%d``, ``%%``), ``true``, ``false``,
``:``, ``cd`` (a directory of this machine, said so), ``pwd``, coreutils' ``basename`` and
``dirname``, ``shift``, ``set`` (``--``, ``-e``, ``-u``, ``-x``, ``-v``, ``-n``, ``-f``,
``-o pipefail``), ``exit``, ``return``, ``break``, ``continue``, ``source``/``.``, ``exec``,
``env`` (``-i``, ``-u``), ``test``/``[``, ``trap``, ``shopt`` (options that change nothing read),
``eval`` of conda's hook. The builtins that change state the reader does not model (``read``,
``getopts``, ``let``, ``alias``, ...) are refused; any other command goes to ``on_command``."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from verl_rfpp.bash_reader import arithmetic, parse, words
from verl_rfpp.bash_reader.state import (
    SET_FLAGS,
    SET_OPTIONS,
    SHOPT_HARMLESS,
    Command,
    Exit,
    LoopControl,
    Return,
    Status,
    scalar,
)

if TYPE_CHECKING:
    from verl_rfpp.bash_reader.shell import Shell

MAX_SOURCE_DEPTH = 20
# The comparisons of test and [[ ]] on integers, and the file tests (read on this machine).
NUMERIC = {"-eq": lambda a, b: a == b, "-ne": lambda a, b: a != b, "-lt": lambda a, b: a < b,
           "-le": lambda a, b: a <= b, "-gt": lambda a, b: a > b, "-ge": lambda a, b: a >= b}
FILE_TESTS = {"-f": os.path.isfile, "-d": os.path.isdir, "-e": os.path.exists, "-a": os.path.exists,
              "-L": os.path.islink, "-h": os.path.islink,
              "-s": lambda p: os.path.isfile(p) and os.path.getsize(p) > 0,
              "-x": lambda p: os.access(p, os.X_OK), "-r": lambda p: os.access(p, os.R_OK),
              "-w": lambda p: os.access(p, os.W_OK)}


def _echo(shell: Shell, fields: list, node) -> Status:
    arguments, newline, escapes = fields[1:], "\n", False
    while arguments and re.fullmatch(r"-[neE]+", arguments[0]):
        for letter in arguments[0][1:]:
            newline = "" if letter == "n" else newline
            escapes = {"e": True, "E": False}.get(letter, escapes)
        arguments = arguments[1:]
    if any(shell.is_unknown(argument) for argument in arguments) and escapes:
        shell.emit(None)
        return 0
    out = []
    for index, argument in enumerate(arguments):
        if escapes:
            argument, stopped = words.echo_escapes(argument)
            out.append(argument if index == 0 else " " + argument)
            if stopped:
                shell.emit("".join(out))
                return 0
        else:
            out.append(argument if index == 0 else " " + argument)
    shell.emit("".join(out) + newline)
    return 0


def _printf(shell: Shell, fields: list, node) -> Status:
    arguments, target = fields[1:], None
    if arguments[:1] == ["-v"]:
        if len(arguments) < 2 or not re.fullmatch(r"[A-Za-z_]\w*", arguments[1]):
            raise shell.refuse(node, "printf -v without a plain variable name")
        target, arguments = arguments[1], arguments[2:]
    if arguments[:1] == ["--"]:
        arguments = arguments[1:]
    if not arguments:
        raise shell.refuse(node, "printf without a format (bash's error)")
    try:
        if any(shell.is_unknown(argument) for argument in arguments):
            raise words.Unsupported("an unknown value")
        output: Optional[str] = words.printf(arguments[0], arguments[1:])
        status: Status = 0
    except words.Unsupported:
        output, status = None, None
    if target is None:
        shell.emit(output)
        return status
    shell.check_assignable(target, node)
    shell.set_variable(target, shell.unknown(node) if output is None else output, node)
    return status


def _status(value: int) -> Callable:
    return lambda shell, fields, node: value


def _cd(shell: Shell, fields: list, node) -> Status:
    arguments = fields[1:]
    if arguments[:1] == ["--"]:
        arguments = arguments[1:]
    if len(arguments) > 1 or (arguments and arguments[0].startswith("-")):
        raise shell.refuse(node, "check does not model cd with options, several arguments or cd -")
    target = arguments[0] if arguments else scalar(shell.variables.get("HOME", ""))
    if not arguments and "HOME" not in shell.variables:
        raise shell.refuse(node, "cd with HOME unset")
    if shell.is_unknown(target) or shell.is_unknown(shell.cwd):
        shell.state.cwd = shell.unknown(node)
        return None
    path = os.path.normpath(os.path.join(shell.cwd, target or "."))
    found = os.path.isdir(path)
    shell.note(node, f"{'succeeds' if found else 'fails'}: {path} is {'' if found else 'not '}a directory on this "
                     "machine (read, as the run's machine is assumed to have the same files)")
    if not found:
        return 1
    shell.state.cwd = path
    return 0


def _pwd(shell: Shell, fields: list, node) -> Status:
    if len(fields) > 1:
        raise shell.refuse(node, "check does not model pwd's options")
    shell.emit(None if shell.is_unknown(shell.cwd) else shell.cwd + "\n")
    return 0


def _basename(shell: Shell, fields: list, node) -> Status:
    arguments = fields[1:]
    if arguments[:1] == ["--"]:
        arguments = arguments[1:]
    if not 1 <= len(arguments) <= 2 or any(a.startswith("-") for a in fields[1:2] if a != "--"):
        raise shell.refuse(node, "check models basename NAME [SUFFIX] only")
    if any(shell.is_unknown(argument) for argument in arguments):
        shell.emit(None)
        return None
    name = arguments[0].rstrip("/")
    name = "/" if not name and arguments[0] else os.path.basename(name)
    if len(arguments) == 2 and name.endswith(arguments[1]) and name != arguments[1]:
        name = name[: -len(arguments[1])]
    shell.emit(name + "\n")
    return 0


def _dirname(shell: Shell, fields: list, node) -> Status:
    arguments = fields[1:]
    if arguments[:1] == ["--"]:
        arguments = arguments[1:]
    if len(arguments) != 1 or arguments[0].startswith("-"):
        raise shell.refuse(node, "check models dirname NAME only")
    if shell.is_unknown(arguments[0]):
        shell.emit(None)
        return None
    path = arguments[0]
    stripped = path.rstrip("/")
    if not stripped:
        result = "/" if path else "."
    elif "/" not in stripped:
        result = "."
    else:
        result = stripped[: stripped.rindex("/")].rstrip("/") or "/"
        if stripped.startswith("//") and result == "/" and not stripped[2:].count("/"):
            result = "//"
    shell.emit(result + "\n")
    return 0


def _shift(shell: Shell, fields: list, node) -> Status:
    if len(fields) > 2:
        raise shell.refuse(node, "shift with several arguments")
    written = fields[1] if len(fields) > 1 else "1"
    if shell.is_unknown(written):
        raise shell.refuse(node, "how far this shifts is not known")
    count = arithmetic.test_integer(written)
    if count is None or count < 0:
        raise shell.refuse(node, "shift by a count that is not a number >= 0 (bash's error)")
    if count > len(shell.positional):
        return 1
    shell.state.positional = shell.positional[count:]
    return 0


def _set(shell: Shell, fields: list, node) -> Status:
    arguments = fields[1:]
    if not arguments:
        shell.emit(None)
        return 0
    while arguments:
        word = arguments[0]
        if shell.is_unknown(word):
            raise shell.refuse(node, "set with an unknown argument")
        if word in ("--", "-"):
            shell.state.positional = arguments[1:]
            return 0
        if word in ("-o", "+o"):
            if len(arguments) < 2 or arguments[1] not in SET_OPTIONS:
                raise shell.refuse(node, f"check does not model set {word} {' '.join(arguments[1:2])}")
            _option(shell, arguments[1], word == "-o")
            arguments = arguments[2:]
            continue
        if word[:1] in "-+" and len(word) > 1:
            for letter in word[1:]:
                if letter == "o":
                    if len(arguments) < 2 or arguments[1] not in SET_OPTIONS:
                        raise shell.refuse(node, f"check does not model set {word} {' '.join(arguments[1:2])}")
                    _option(shell, arguments[1], word[0] == "-")
                    arguments = arguments[1:]
                    continue
                if letter not in SET_FLAGS:
                    raise shell.refuse(node, f"check does not model set {word[0]}{letter}")
                _option(shell, SET_FLAGS[letter], word[0] == "-")
            arguments = arguments[1:]
            continue
        shell.state.positional = arguments
        return 0
    return 0


def _option(shell: Shell, name: str, on: bool) -> None:
    if name == "errexit" and on and "errexit" not in shell.state.options and shell.negations:
        raise shell.refuse(None, "set -e under ! (bash 5.2 then ends the shell at a later failure there)")
    if on:
        shell.state.options.add(name)
    else:
        shell.state.options.discard(name)


def _exit(shell: Shell, fields: list, node) -> Status:
    if len(fields) > 2:
        raise shell.refuse(node, f"{fields[0]} with several arguments (bash's error)")
    if fields[0] == "return" and not shell.state.locals and not shell.source_depth:
        raise shell.refuse(node, "return outside a function or sourced file (bash's error)")
    status: Status = shell.status
    if len(fields) == 2:
        if shell.is_unknown(fields[1]):
            status = None
        else:
            value = arithmetic.test_integer(fields[1])
            if value is None:
                raise shell.refuse(node, f"{fields[0]} {fields[1]}: not a number (bash's error)")
            status = value % 256
    raise (Return if fields[0] == "return" else Exit)(status)


def _loop(shell: Shell, fields: list, node) -> Status:
    levels = 1
    if len(fields) > 1:
        value = None if shell.is_unknown(fields[1]) else arithmetic.test_integer(fields[1])
        if value is None or value < 1 or len(fields) > 2:
            raise shell.refuse(node, f"{fields[0]} with this argument")
        levels = value
    if shell.loop_depth:
        raise LoopControl(fields[0], min(levels, shell.loop_depth))
    return 0  # bash: "only meaningful in a loop", and it goes on


def _eval(shell: Shell, fields: list, node) -> Status:
    """``eval "$(conda shell.bash hook)"`` defines conda's shell functions; any other eval is refused."""
    constructs = [shell.unknowns.get(word, (0, ""))[1] for word in fields[1:]]
    if len(constructs) == 1 and re.fullmatch(r"\$\(\S*conda shell\.\w+ hook\)", constructs[0]):
        shell.note(node, "defines conda's shell functions (not run); a `conda activate` is assumed to give a "
                         "python with the verl and verl-rfpp this check uses")
        return 0
    return _refuse(shell, fields, node)


def _refuse(shell: Shell, fields: list, node) -> Status:
    raise shell.refuse(node, f"check does not run or model what `{fields[0]}` does")


def _source(shell: Shell, fields: list, node) -> Status:
    if len(fields) < 2 or shell.is_unknown(fields[1]) or shell.is_unknown(shell.cwd):
        raise shell.refuse(node, "the file this sources is not known")
    if fields[1].endswith("bin/activate"):
        return _activate(shell, fields, node)
    path = Path(shell.cwd) / fields[1]
    if "/" not in fields[1]:
        raise shell.refuse(node, "a source of a name without a / (bash searches PATH for it)")
    if str(Path(os.path.normpath(path))) in shell.written or "" in shell.written:
        raise shell.refuse(node, "a source of a file the script may have written")
    if shell.source_depth >= MAX_SOURCE_DEPTH:
        raise shell.refuse(node, f"sources nest deeper than {MAX_SOURCE_DEPTH}")
    try:
        data = parse.read_bytes(str(path))
    except parse.ReadError as error:
        raise shell.refuse(node, f"{path} cannot be read: {error.why}") from None
    shell.note(node, f"reads {path} from this machine (the run's machine is assumed to have the same file)")
    saved = shell.state.positional
    if len(fields) > 2:
        shell.state.positional = fields[2:]
    shell.source_depth += 1
    shell.files.append(fields[1])  # BASH_SOURCE[0]: the name as source was given it
    try:
        shell.block(parse.parse_script(data, str(path)).children)
        return shell.status
    except Return as stop:
        return stop.status
    finally:
        shell.files.pop()
        shell.source_depth -= 1
        if len(fields) > 2:
            shell.state.positional = saved


def _activate(shell: Shell, fields: list, node) -> Status:
    venv = str((Path(shell.cwd) / fields[1]).parent.parent)
    shell.variables["VIRTUAL_ENV"] = venv
    shell.variables["PATH"] = f"{venv}/bin:{scalar(shell.variables.get('PATH', ''))}"
    shell.state.exported.update(("VIRTUAL_ENV", "PATH"))
    shell.note(node, f"activates the virtual environment {venv} (not read): its python is assumed to have "
                     "the verl and verl-rfpp that check uses")
    return 0


def _exec(shell: Shell, fields: list, node) -> Status:
    if len(fields) == 1:
        return 0
    if fields[1].startswith("-") or fields[1] in shell.state.functions:
        raise shell.refuse(node, "check does not model exec with options or of a function's name")
    status = shell.external(fields[1:], node)
    raise Exit(status)


def _env(shell: Shell, fields: list, node) -> Status:
    arguments, environment = fields[1:], shell.environment()
    while arguments:
        word = arguments[0]
        if word in ("-i", "-", "--ignore-environment"):
            environment = {}
        elif word in ("-u", "--unset") and len(arguments) > 1:
            environment.pop(arguments[1], None)
            arguments = arguments[1:]
        elif word.startswith("--unset="):
            environment.pop(word.partition("=")[2], None)
        elif word == "--":
            arguments = arguments[1:]
            break
        elif word.startswith("-"):
            raise shell.refuse(node, f"check does not model env {word}")
        elif "=" in word:
            name, _, value = word.partition("=")
            environment[name] = value
        else:
            break
        arguments = arguments[1:]
    if any(shell.is_unknown(name) for name in environment):
        raise shell.refuse(node, "env with an unknown variable name")
    if not arguments:
        shell.emit(None)
        return 0
    answer = shell.on_command(shell, Command(tuple(arguments), parse.line(node), environment, shell.stdin_fed))
    shell.emit(answer.output)
    return answer.status


class _TestError(Exception):
    """What bash's test reports as an error (exit status 2)."""


def _test(shell: Shell, fields: list, node) -> Status:
    """``test``/``[``, by POSIX's rules on the number of arguments (bash's, up to four)."""
    arguments = fields[1:]
    if fields[0] == "[":
        if not arguments or arguments[-1] != "]":
            return 2  # bash: "[: missing `]'"
        arguments = arguments[:-1]
    try:
        truth = _test_arguments(shell, arguments, node)
    except _TestError:
        return 2
    return None if truth is None else int(not truth)


def _negated(truth: Optional[bool]) -> Optional[bool]:
    return None if truth is None else not truth


def _test_arguments(shell: Shell, arguments: list, node) -> Optional[bool]:
    count = len(arguments)
    if count == 0:
        return False
    if count == 1:
        return None if shell.is_unknown(arguments[0]) else arguments[0] != ""
    if shell.is_unknown(arguments[0]) and count in (2, 4):
        raise shell.refuse(node, "a test whose operator is not known")
    if count == 2:
        if arguments[0] == "!":
            return _negated(_test_arguments(shell, arguments[1:], node))
        if arguments[0] in _UNARY:
            return shell.unary(arguments[0], arguments[1], node)
        if arguments[0] in _BASH_UNARY:
            raise shell.refuse(node, f"check does not model the test {arguments[0]}")
        raise _TestError
    if count == 3:
        if shell.is_unknown(arguments[1]):
            raise shell.refuse(node, "a test whose operator is not known")
        if arguments[1] in _BINARY:
            return _binary(shell, arguments[0], arguments[1], arguments[2], node)
        if arguments[1] in ("-ot", "-nt", "-ef"):
            raise shell.refuse(node, f"check does not model the test {arguments[1]}")
        if arguments[0] == "!":
            return _negated(_test_arguments(shell, arguments[1:], node))
        if arguments[0] == "(" and arguments[2] == ")":
            return _test_arguments(shell, arguments[1:2], node)
        raise _TestError
    if count == 4:
        if arguments[0] == "!":
            return _negated(_test_arguments(shell, arguments[1:], node))
        if arguments[0] == "(" and arguments[3] == ")":
            return _test_arguments(shell, arguments[1:3], node)
    raise shell.refuse(node, "check does not model test with more than four arguments or this form")


_UNARY = {"-z", "-n", "-v", *FILE_TESTS}
_BASH_UNARY = {f"-{letter}" for letter in "abcdefghkprstuwxzGLNOSovRn"}  # bash's, modeled or not
_BINARY = {"=", "==", "!=", "-a", "-o", "<", ">", *NUMERIC}


def _binary(shell: Shell, left: str, operator: str, right: str, node) -> Optional[bool]:
    if shell.is_unknown(left) or shell.is_unknown(right):
        return None
    if operator in ("=", "=="):
        return left == right
    if operator == "!=":
        return left != right
    if operator == "-a":
        return left != "" and right != ""
    if operator == "-o":
        return left != "" or right != ""
    if operator in ("<", ">"):
        raise shell.refuse(node, "check does not model string ordering (the locale decides it)")
    a, b = arithmetic.test_integer(left), arithmetic.test_integer(right)
    if a is None or b is None:
        raise _TestError  # bash: "integer expression expected"
    return NUMERIC[operator](a, b)


def _trap(shell: Shell, fields: list, node) -> Status:
    arguments = fields[1:]
    if arguments[:1] == ["--"]:
        arguments = arguments[1:]
    if not arguments or arguments[0].startswith("-") and arguments[0] != "-":
        shell.emit(None)
        return 0
    if len(arguments) == 1:
        raise shell.refuse(node, "trap with one argument")
    action, signals = arguments[0], arguments[1:]
    if shell.is_unknown(action) or any(shell.is_unknown(signal) for signal in signals):
        raise shell.refuse(node, "a trap whose action is not known")
    for signal in signals:
        if action in ("", "-"):
            shell.state.traps.pop(signal.upper(), None)
        else:
            shell.state.traps[signal.upper()] = (parse.line(node), action)
    if "main_ppo" in action:
        shell.check_traps()
    return 0


def _shopt(shell: Shell, fields: list, node) -> Status:
    arguments = fields[1:]
    if arguments[:1] in (["-s"], ["-u"]) and arguments[1:] and all(a in SHOPT_HARMLESS for a in arguments[1:]):
        return 0
    raise shell.refuse(node, f"check does not model shopt {' '.join(arguments)[:40]}")


def _unknown_status(shell: Shell, fields: list, node) -> Status:
    return None


def _time(shell: Shell, fields: list, node) -> Status:
    """``time [-p] COMMAND``: the command runs (bash's keyword only times it)."""
    arguments = fields[1:]
    if arguments[:1] == ["-p"]:
        arguments = arguments[1:]
    return shell.run(arguments, node) if arguments else 0


def _command(shell: Shell, fields: list, node) -> Status:
    """``command -v NAME`` / ``-V``: whether NAME exists is not known here; other forms refused."""
    if len(fields) >= 3 and fields[1] in ("-v", "-V"):
        shell.emit(None)
        return None
    return _refuse(shell, fields, node)


BUILTINS: dict = {
    "echo": _echo, "printf": _printf, "true": _status(0), ":": _status(0), "false": _status(1), "cd": _cd,
    "pwd": _pwd, "basename": _basename, "dirname": _dirname, "shift": _shift, "set": _set, "exit": _exit,
    "return": _exit, "break": _loop, "continue": _loop, "source": _source, ".": _source, "eval": _eval,
    "exec": _exec, "env": _env, "test": _test, "[": _test, "trap": _trap, "shopt": _shopt,
    "ulimit": _unknown_status, "umask": _unknown_status, "hash": _unknown_status, "wait": _unknown_status,
    "alias": _refuse, "unalias": _refuse, "let": _refuse, "read": _refuse, "mapfile": _refuse, "readarray": _refuse,
    "pushd": _refuse, "popd": _refuse, "getopts": _refuse, "enable": _refuse, "declare": _refuse, "typeset": _refuse,
    "local": _refuse, "export": _refuse, "readonly": _refuse, "unset": _refuse, "builtin": _refuse,
    "command": _command, "caller": _refuse, "coproc": _refuse, "select": _refuse, "time": _time,
}
