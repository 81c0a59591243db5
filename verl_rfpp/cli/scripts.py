"""What a launch script passes to ``verl.trainer.main_ppo``, read without running anything
(docs/contract.md section 6.5): the script is evaluated by ``verl_rfpp.bash_reader``; every command it
would start is answered here, as on a Linux machine with NVIDIA GPUs, and never run. A command
whose words start main_ppo (``-m verl.trainer.main_ppo``, ``-mverl.trainer.main_ppo`` or a path
ending in ``verl/trainer/main_ppo.py``, behind any interpreter or launcher: ``uv run``,
``torchrun``, ``ray job submit --``, ``setsid``, ``nohup``, ``timeout``, ``env A=B``, an absolute
path) is a launch; ``echo`` and strings never are. A command that starts a bash script (``bash
FILE``, ``./FILE`` with a bash ``#!`` line) is read as a child shell (``reader.child``); one that may
start main_ppo in a program check does not read (a Python file, what ``torchrun`` or ``srun``
start) is an ``assumed:`` line. Imports no verl."""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from verl_rfpp.bash_reader import child, parse, shell

MAIN_PPO = "verl.trainer.main_ppo"
MAIN_PPO_FILE = "verl/trainer/main_ppo.py"
WAY_OUT = ("pass main_ppo's overrides to check directly (verl-rfpp check OVERRIDES...), or set the value "
           "for the reading (VAR=value verl-rfpp check SCRIPT)")
_PYTHON = re.compile(r"python[\d.]*")
_SHELL_SYNTAX = re.compile(r"^\s*(#!|[A-Za-z_]\w*=|export\s|set\s+-|if\s|for\s|(python\S*|torchrun|uv|ray)\s)", re.M)


class ScriptError(Exception):
    """A script check cannot read safely, or that launches no run (``verl-rfpp check``'s exit 2)."""


@dataclass(frozen=True)
class Launch:
    """One main_ppo run the script makes: its arguments (a value the reading cannot know is a
    marker, see ``unknowns``), its line, the command words up to main_ppo, and the environment it gets."""

    arguments: tuple[str, ...]
    line: int
    launcher: str
    environment: Mapping[str, str]
    unknowns: Mapping[str, tuple[int, str]] = None  # type: ignore[assignment]
    script: str = ""  # the file of ``line`` when a script the script starts makes the run ("": the script's own)

    def place(self, script: str) -> str:
        """``SCRIPT:LINE`` of the run's main_ppo line (``script``: the script check was given)."""
        return f"{self.script or script}:{self.line}"

    def known(self, stand_in: str) -> tuple[str, ...]:
        """The arguments with every unknown value replaced by ``stand_in``."""
        replaced = []
        for argument in self.arguments:
            for marker in self.unknowns or {}:
                argument = argument.replace(marker, stand_in)
            replaced.append(argument)
        return tuple(replaced)

    def unknown_parts(self) -> list[tuple[object, str]]:
        """(line, construct) of each unknown value in the arguments (the line of a script the script
        starts: ``FILE:LINE``, see ``at``)."""
        text = "".join(self.arguments)
        return [where for marker, where in (self.unknowns or {}).items() if marker in text]


@dataclass(frozen=True)
class Reading:
    """The runs of one script, the assumptions made reading it, and where it set each exported
    variable (name -> line)."""

    launches: tuple[Launch, ...]
    assumptions: tuple[str, ...]
    exported_at: Mapping[str, int]


def at(script: str, line) -> str:
    """``SCRIPT:LINE`` of a line the reading names: ``line`` a number in the script, or already
    ``FILE:LINE`` in a script the script starts."""
    return line if isinstance(line, str) else f"{script}:{line}"


def is_script(word: str) -> bool:
    """Whether a command-line word names a launch script. A word that is no existing path is an
    override (``False``); ``ScriptError`` for what is not a bash script: a directory, a missing
    ``.sh``/path-like word, a binary, YAML/JSON, a list of overrides, CRLF line endings."""
    path = Path(word)
    takes = "check takes a bash launch script (SCRIPT [ARGUMENTS...]) or main_ppo's Hydra overrides"
    if not path.exists():
        if "=" not in word and ("/" in word or word.endswith((".sh", ".bash", ".yaml", ".yml", ".json"))):
            raise ScriptError(f"{word}: no such file; {takes}")
        return False
    if path.is_dir():
        raise ScriptError(f"{word} is a directory; {takes} (a config directory of your own: "
                          f"check -cp {word} -cn NAME)")
    try:
        data = parse.read_bytes(word)
    except parse.ReadError as error:
        raise ScriptError(f"{word}: {error.why}; {takes}") from None
    try:
        text = data.decode()
    except UnicodeDecodeError:
        text = None
    if text is None or "\0" in text:
        raise ScriptError(f"{word} is a binary file, not a script; {takes}")
    if "\r\n" in text:
        raise ScriptError(f"{word} has Windows (CRLF) line endings, which bash reads as part of each word; "
                          f"convert it (dos2unix {word}) and check again")
    if path.suffix in (".yaml", ".yml", ".json") or text.lstrip().startswith(("{", "[")) or _looks_like_yaml(text):
        raise ScriptError(f"{word} is a YAML/JSON config, not a script; {takes} (a config of your own: "
                          f"check -cp DIR -cn NAME)")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if lines and all(re.fullmatch(r"[+~]*[\w.@/-]+=\S*", line) for line in lines) and not text.startswith("#!"):
        raise ScriptError(f"{word} is a list of overrides, not a script; {takes}: pass them as arguments, "
                          f"verl-rfpp check $(cat {word})")
    if not text.startswith("#!") and path.suffix not in (".sh", ".bash") and not _SHELL_SYNTAX.search(text):
        raise ScriptError(f"{word} does not read as a bash script (no #! line, no .sh name, no shell syntax); "
                          f"{takes}")
    return True


def _looks_like_yaml(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return bool(lines) and all(re.match(r"^\s*(-\s|[\w.-]+:(\s|$))", line) for line in lines)


def read_script(script: Path, arguments: Sequence[str] = (), environ: Optional[Mapping[str, str]] = None,
                cwd: Optional[str] = None) -> Reading:
    """The main_ppo runs ``bash script arguments...`` makes, read statically. ``environ``: the
    environment the script starts from (check's own by default). ``ScriptError`` when it cannot be
    read safely (naming the line and the construct) or launches no run."""
    script = Path(script)
    environ = dict(os.environ if environ is None else environ)
    launches, assumptions, exported_at = _read(script, list(arguments), environ, cwd)
    if not launches:
        raise ScriptError(f"{script} launches no run: no command of it starts {MAIN_PPO} (python -m {MAIN_PPO} "
                          f"or .../{MAIN_PPO_FILE}, directly or through uv run, torchrun, ray job submit, ...)")
    return Reading(tuple(launches), tuple(dict.fromkeys(assumptions)), exported_at)


def _read(script: Path, arguments: list, environ: dict, cwd: Optional[str]):
    launches: list[Launch] = []

    def answer(reader: shell.Shell, command: shell.Command) -> shell.Answer:
        return _answer(reader, command, launches)

    try:
        reader = shell.Shell(script.resolve(), arguments, environ, answer, cwd=cwd or os.getcwd(),
                             invoked_as=str(script))
        reader.read()
    except parse.ReadError as error:
        raise ScriptError(parse.printable(f"{script}:{error.line}: check cannot read this exactly ({error.why}): "
                                          f"{error.construct}; {WAY_OUT}")) from None
    except RecursionError:
        raise ScriptError(f"{script}: it nests too deeply for check to read; {WAY_OUT}") from None
    notes = [note.replace(f"{script.resolve().name}:", f"{script}:", 1) for note in reader.assumptions]
    return ([Launch(*launch[:4], unknowns=dict(reader.unknowns), script=launch[4]) for launch in launches], notes,
            reader.exported_at)


def _answer(reader: shell.Shell, command: shell.Command, launches: list) -> shell.Answer:
    """What a command the reader does not evaluate does, without running it."""
    words = command.words
    found = main_ppo_arguments(words)
    where = f"line {command.line}"
    if found is None:
        started = _started_script(reader, command)
        if started is not None:
            return started
        if reader.is_unknown(words[0]) and any(MAIN_PPO in word or MAIN_PPO_FILE in word for word in words):
            raise parse.ReadError(command.line, reader.shown(" ".join(words))[:80], "the program that starts "
                                  "main_ppo is not known")
        if any(MAIN_PPO in word or MAIN_PPO_FILE in word for word in words[1:]):
            raise parse.ReadError(command.line, reader.shown(" ".join(words))[:80], "this command starts main_ppo in "
                                  "a way check cannot read (inside a string another program runs)")
        name = os.path.basename(words[0])
        if _PYTHON.fullmatch(name) and "-c" in words and "torch_npu" in " ".join(words):
            reader.assumptions.append(f"{child.where(reader, command.line)}: `{shlex.join(words)[:60]}` fails "
                                      "(a Linux machine with NVIDIA GPUs: no torch_npu)")
            return shell.Answer(1, "")
        unfollowed = _unfollowed(words, reader.cwd)
        if unfollowed:
            reader.assumptions.append(f"{child.where(reader, command.line)}: `{reader.shown(shlex.join(words))[:60]}` "
                                      f"starts no main_ppo run (check does not read {unfollowed}; check it on its "
                                      "own)")
        return shell.Answer(None, None)
    index, launcher = found
    if command.stdin_fed:
        raise parse.ReadError(command.line, reader.shown(" ".join(words))[:80], "main_ppo is fed a here-document")
    if reader.is_unknown(words[0]):
        raise parse.ReadError(command.line, reader.shown(" ".join(words))[:80], "the program that starts main_ppo "
                              "is not known")
    interpreter = next((w for w in words[:index] if _PYTHON.fullmatch(os.path.basename(w))), None)
    if interpreter and ("/" in interpreter or "VIRTUAL_ENV" in command.environment):
        reader.assumptions.append(f"{child.where(reader, command.line)}: {interpreter} is assumed to have the "
                                  f"verl and verl-rfpp this check uses ({where} is not run)")
    environment = {**command.environment, **_env_assignments(words[:index]),
                   **_job_env_vars(words[:index], command.line)}
    launches.append((tuple(words[index:]), command.line, reader.shown(launcher), environment, child.place(reader)))
    return shell.Answer(0, "")


def _launched(words: Sequence[str]) -> tuple[Optional[int], dict]:
    """The index of the program a command starts behind the launchers that change nothing of it
    (``env NAME=VALUE...``, ``setsid``, ``nohup``, ``time``, ``timeout [OPTIONS] DURATION``) and the
    variables ``env`` gives it; ``None`` for ``env`` with options (``-i``, ``-u``) there."""
    index, assigned = 0, {}
    while index < len(words):
        name = os.path.basename(words[index])
        if name == "env":
            index += 1
            while index < len(words) and re.fullmatch(r"[A-Za-z_]\w*=.*", words[index], re.S):
                key, _, value = words[index].partition("=")
                assigned[key] = value
                index += 1
            if index < len(words) and words[index].startswith("-"):
                return None, {}
        elif name in ("setsid", "time"):
            index += 1
            while index < len(words) and words[index].startswith("-"):
                index += 1
        elif name == "nohup":
            index += 1
        elif name == "timeout":
            index = _skip_options(words, index + 1, _TIMEOUT_VALUED) + 1
        else:
            return index, assigned
    return None, {}


_SCRIPT_SUFFIXES = (".sh", ".bash")


def _started_script(reader: shell.Shell, command: shell.Command) -> Optional[shell.Answer]:
    """A command that starts a bash script (``bash FILE ARGS``, ``/bin/bash -e FILE``, ``env bash
    FILE``, ``./FILE`` with a bash ``#!`` line or none) read as a child shell
    (``verl_rfpp.bash_reader.child``); ``None`` for any other command. ``ReadError`` where it
    starts a script check cannot follow (``sh``, a missing file, an option check does not model)."""
    words = command.words
    index, assigned = _launched(words)
    if index is None or reader.is_unknown(words[index]):
        return None
    program, rest = words[index], list(words[index + 1:])
    shown = reader.shown(shlex.join(words))[:80]
    shell_name = child.shell_of(program)
    if shell_name is not None:
        given = rest[:next((k for k, word in enumerate(rest) if not word.startswith(("-", "+"))), len(rest))]
        if any(re.fullmatch(r"[-+][^-]*c.*", word) or word in ("--version", "--help") for word in given):
            return None  # -c: a string bash runs (main_ppo in it is refused, a script it names is an assumed: line)
        flags, at = child.options(rest, command.line, shown)
        if at >= len(rest):
            raise parse.ReadError(command.line, shown, "this shell reads its commands from standard input, which "
                                  "check does not follow")
        file, arguments = rest[at], rest[at + 1:]
    elif "/" in program:
        if reader.is_unknown(reader.cwd) and not program.startswith("/"):
            raise parse.ReadError(command.line, shown, "the directory this program is started in is not known")
        path = os.path.join(reader.cwd, program)
        if not os.path.lexists(path) and not reader.is_unknown(reader.cwd):
            if program.endswith(_SCRIPT_SUFFIXES):
                raise parse.ReadError(command.line, shown, f"{program} is not a file here; check cannot read the "
                                      "script this starts")
            return None
        head = child.first_line(path)
        if head is None:
            return None
        if not os.access(path, os.X_OK):
            raise parse.ReadError(command.line, shown, f"{program} is not executable here (bash: Permission denied, "
                                  "status 126); chmod +x it, or start it with bash")
        interpreter = head.split()
        if interpreter and os.path.basename(interpreter[0]) == "env":
            interpreter = interpreter[1:]
            if len(interpreter) != 1:
                raise parse.ReadError(command.line, shown, f"the #! line `#!{head}` of {program} is one check does "
                                      "not read")
        shell_name = child.shell_of(interpreter[0]) if interpreter else "bash"  # no #!: bash reads it itself
        if shell_name is None:
            return None
        options = interpreter[1:]
        if len(options) > 1:  # Linux gives the rest of the #! line as one argument
            options = [" ".join(options)]
        flags, at = child.options(options, command.line, shown)
        if at != len(options):
            raise parse.ReadError(command.line, shown, f"the #! line `#!{head}` of {program} is one check does not "
                                  "read")
        file, arguments = program, rest
    else:
        return None
    return child.read_child(reader, command, shell_name, file, arguments, flags, {**command.environment, **assigned})


_PYTHON_NO_RUN = {"pip", "venv", "ensurepip", "site", "json.tool", "http.server", "compileall", "py_compile",
                  "pip._internal"}
_LAUNCHERS = {"torchrun", "deepspeed", "horovodrun"}
_RUNNERS = {"srun", "sbatch", "salloc", "mpirun", "mpiexec", "sudo", "xargs", "nice", "ionice", "numactl", "taskset",
            "stdbuf", "chrt", "flock", "ssh", "pdsh", "parallel", "docker", "podman", "apptainer", "singularity",
            "nsys", "ncu", "strace", "watch"}
_STARTS_PROGRAMS = re.compile(r"(^|[\s/'\"=;&|(])(python[\d.]*|bash|sh|dash|torchrun|deepspeed|accelerate)(\s|$)|"
                              r"\.(sh|bash|py)(\s|$|[\"';&|)])")


def _unfollowed(words: Sequence[str], cwd: str) -> Optional[str]:
    """What a command that starts no main_ppo run by the launch grammar may start and check does
    not read (a Python file or module, what torchrun, deepspeed, ``accelerate launch``, ``uv run``,
    ``ray job submit``, srun, sudo, xargs, ... start, a script on PATH, a program file of another
    language: a file here with a ``#!`` line), as words for an ``assumed:`` line; ``None`` for every
    other command."""
    index, _ = _launched(words)
    index = index or 0
    name, rest = os.path.basename(words[index]), list(words[index + 1:])
    if _PYTHON.fullmatch(name):
        position = 0
        while position < len(rest):
            word = rest[position]
            if word == "-c" or word.startswith("-c") or word == "-":
                return None
            if word == "-m" or word.startswith("-m"):
                module = word[2:] or (rest[position + 1] if position + 1 < len(rest) else "")
                return None if not module or module in _PYTHON_NO_RUN else f"the Python module {module}"
            if word in _PYTHON_VALUED:
                position += 2
            elif word.startswith("-"):
                position += 1
            else:
                return f"the Python file {word}"
        return None
    if name in _LAUNCHERS or (name, rest[:1]) in (("accelerate", ["launch"]), ("uv", ["run"])) or \
            (name == "ray" and rest[:2] == ["job", "submit"]):
        return f"what {name} starts"
    if name in _RUNNERS or child.shell_of(name):
        return f"what {name} starts" if any(_STARTS_PROGRAMS.search(word) for word in rest) else None
    if name.endswith((*_SCRIPT_SUFFIXES, ".py")) or "/" in words[index] and child.first_line(
            os.path.join(cwd, words[index])):
        return f"the program {words[index]}"
    return None


def _env_assignments(words: Sequence[str]) -> dict:
    """The ``NAME=VALUE`` words after an ``env`` among a launch's launchers."""
    found, inside = {}, False
    for word in words:
        if os.path.basename(word) == "env":
            inside = True
        elif inside and re.fullmatch(r"[A-Za-z_]\w*=.*", word, re.S):
            name, _, value = word.partition("=")
            found[name] = value
        else:
            inside = False
    return found


def _job_env_vars(words: Sequence[str], line: int) -> dict:
    """The ``env_vars`` of ``ray job submit --runtime-env-json JSON``: the job's processes get them."""
    for index, word in enumerate(words):
        flag, equals, value = word.partition("=")
        if flag == "--runtime-env-json":
            text = value if equals else (words[index + 1] if index + 1 < len(words) else "")
            try:
                found = json.loads(text).get("env_vars", {})
            except (ValueError, AttributeError):
                raise parse.ReadError(line, word, "ray job submit's --runtime-env-json is not a JSON object "
                                      "check can read") from None
            return {str(name): str(value) for name, value in found.items()} if isinstance(found, dict) else {}
    return {}


_PYTHON_FLAGS = set("uOBEsSIbqvdRP")
_PYTHON_VALUED = ("-X", "-W")
_TIMEOUT_VALUED = ("-s", "-k", "--signal", "--kill-after")
_UV_VALUED = {"--with", "--python", "-p", "--project", "--directory", "--extra", "--group", "--env-file", "--index",
              "--package", "--with-requirements", "--with-editable", "--default-index", "--config-file"}
_TORCHRUN_VALUED = {f"--{name}{sep}{rest}" for name, rest in
                    (("nproc", "per_node"), ("node", "rank"), ("master", "addr"), ("master", "port"),
                     ("rdzv", "backend"), ("rdzv", "endpoint"), ("rdzv", "id"), ("rdzv", "conf"),
                     ("max", "restarts"), ("monitor", "interval"), ("log", "dir"), ("start", "method"),
                     ("local", "addr")) for sep in "_-"} | {"--nnodes", "--role", "--redirects", "--tee"}


def main_ppo_arguments(words: Sequence[str]) -> Optional[tuple[int, str]]:
    """Where main_ppo's own arguments start in one command's words, and the words that start it
    (``python3 -m verl.trainer.main_ppo``); ``None`` when the command does not start main_ppo as
    this grammar reads it: launchers (``env NAME=VALUE...``, ``setsid``, ``nohup``, ``time``, ``timeout [OPTIONS]
    DURATION``, ``uv run [OPTIONS]``, ``ray job submit ... --``), then a python interpreter with
    its options and ``-m verl.trainer.main_ppo`` (or ``-mverl...``, or a path ending in
    ``verl/trainer/main_ppo.py``), or ``torchrun [OPTIONS]`` with the module or path."""
    index = 0
    while index < len(words):
        name = os.path.basename(words[index])
        following = list(words[index + 1:index + 3])
        if name == "env":
            index += 1
            while index < len(words) and re.fullmatch(r"[A-Za-z_]\w*=.*", words[index], re.S):
                index += 1
        elif name in ("setsid", "nohup", "time"):
            index += 1
            while index < len(words) and words[index].startswith("-") and name != "nohup":
                index += 1
        elif name == "timeout":
            index = _skip_options(words, index + 1, _TIMEOUT_VALUED) + 1
        elif name == "uv" and following[:1] == ["run"]:
            index = _skip_options(words, index + 2, _UV_VALUED)
            if index < len(words) and words[index] in ("-m", "--module"):
                return _module(words, index)
        elif name == "ray" and following == ["job", "submit"]:
            if "--" not in words[index:]:
                return None
            index = list(words).index("--", index) + 1
        elif name == "torchrun":
            index = _skip_options(words, index + 1, _TORCHRUN_VALUED, stop=("-m", "--module"))
            if index < len(words) and words[index] in ("-m", "--module"):
                return _module(words, index)
            return _script(words, index)
        elif _PYTHON.fullmatch(name):
            return _python(words, index + 1)
        else:
            return None
    return None


def _skip_options(words: Sequence[str], index: int, valued, stop=()) -> int:
    """The index after the options starting at ``index`` (``valued``: options that take the next word)."""
    while index < len(words) and words[index].startswith("-") and words[index] not in stop:
        if words[index] == "--":
            return index + 1
        index += 2 if words[index] in valued else 1
    return index


def _python(words: Sequence[str], index: int) -> Optional[tuple[int, str]]:
    while index < len(words):
        word = words[index]
        if word in ("-m",):
            return _module(words, index)
        if word.startswith("-m") and len(word) > 2:
            return (index + 1, " ".join(words[:index + 1])) if word[2:] == MAIN_PPO else None
        if word in _PYTHON_VALUED:
            index += 2
        elif word.startswith(_PYTHON_VALUED):
            index += 1
        elif word.startswith("-") and len(word) > 1 and set(word[1:]) <= _PYTHON_FLAGS:
            index += 1
        else:
            return _script(words, index)
    return None


def _module(words: Sequence[str], index: int) -> Optional[tuple[int, str]]:
    if index + 1 < len(words) and words[index + 1] == MAIN_PPO:
        return index + 2, " ".join(words[:index + 2])
    return None


def _script(words: Sequence[str], index: int) -> Optional[tuple[int, str]]:
    if index < len(words) and words[index].endswith(MAIN_PPO_FILE):
        return index + 1, " ".join(words[:index + 1])
    return None


# main_ppo's own (Hydra's) options that choose the config; the rest of its arguments are overrides.
_CONFIG_OPTIONS = {"--config-path": "config_path", "-cp": "config_path", "--config-name": "config_name",
                   "-cn": "config_name", "--config-dir": "config_dir", "-cd": "config_dir"}


@dataclass(frozen=True)
class MainPpoCommand:
    """main_ppo's arguments read as Hydra reads them: the config options and the overrides."""

    overrides: tuple[str, ...]
    config_path: Optional[str] = None
    config_name: Optional[str] = None
    config_dir: Optional[str] = None

    def composition(self) -> tuple[Optional[str], Optional[str], list[str]]:
        """The config path, config name and overrides to compose, as Hydra reads ``--config-dir DIR``:
        DIR searched besides verl's own config directory (the primary config from DIR when it is there)."""
        name = self.config_name or "ppo_trainer"
        if self.config_path or not self.config_dir or not (
                Path(self.config_dir) / (name if name.endswith(".yaml") else f"{name}.yaml")).is_file():
            return self.config_path, self.config_name, list(self.overrides)
        return (os.path.abspath(self.config_dir), self.config_name,
                ["hydra.searchpath=[pkg://verl.trainer.config]", *self.overrides])


def parse_main_ppo(arguments: Sequence[str]) -> MainPpoCommand:
    """Split main_ppo's arguments into Hydra's config options (``--config-path X``,
    ``--config-path=X``, ``-cp X``, ``--config-dir``, ...) and the overrides. ``ScriptError`` for
    another Hydra option (``--multirun``, ``--cfg``, ...): not one run's config."""
    options: dict[str, str] = {}
    overrides: list[str] = []
    words = list(arguments)
    while words:
        word = words.pop(0)
        flag, equals, value = word.partition("=")
        if flag in _CONFIG_OPTIONS:
            if not equals:
                if not words:
                    raise ScriptError(f"main_ppo option {flag} has no value")
                value = words.pop(0)
            options[_CONFIG_OPTIONS[flag]] = value
        elif word.startswith("-"):
            raise ScriptError(f"main_ppo option {word!r} is not one run's config (verl-rfpp check reads "
                              "--config-path/-cp, --config-name/-cn, --config-dir/-cd and overrides)")
        else:
            overrides.append(word)
    return MainPpoCommand(tuple(overrides), **options)
