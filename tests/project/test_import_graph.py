"""The package's layers hold (docs/layout.md, "The layers"): every import of every module of
``verl_rfpp/``, module-level and inside functions, relative ones resolved, goes from a part to a
part its row of the table allows; no file imports itself through others, and no part does.
Static (``ast``, nothing imported); an import under ``if TYPE_CHECKING:`` never runs and is not
counted; ``importlib.import_module`` of a computed name is not seen."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "verl_rfpp"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts}


def part(module: str) -> str:
    """A module's part: its package under ``verl_rfpp`` or, at the top, its own name (``__init__``
    for ``verl_rfpp`` itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, (ast.Name, ast.Attribute)) and ast.unparse(test).endswith("TYPE_CHECKING")


def _imports(module: str) -> set[tuple[str, int]]:
    """``(module of ours, line)`` of every import in ``module``'s file that runs."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    stack = [ast.parse(path.read_text(), str(path))]
    while stack:
        node = stack.pop()
        if _type_checking(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] != "verl_rfpp":
                continue
            while target not in MODULES:
                target = target.rpartition(".")[0]
            if target != module:
                found.add((target, node.lineno))
    return found


IMPORTS = {module: _imports(module) for module in MODULES}


def allowed() -> dict[str, set[str]]:
    """docs/layout.md's table: part -> the parts it may import."""
    text = (ROOT / "docs" / "layout.md").read_text()
    section = text[text.index("## The layers"):]
    section = section[: section.index("\n## ", 1)]
    rows = re.findall(r"^\| `(\w+)` \| (.*) \|$", section, flags=re.M)
    return {name: set(re.findall(r"`(\w+)`", cell)) for name, cell in rows}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_every_kind_of_import():
    assert any(target == "verl_rfpp.cli.scripts" for target, _ in IMPORTS["verl_rfpp.cli.multinode"])
    assert any(target == "verl_rfpp.cpu.launch" for target, _ in IMPORTS["verl_rfpp.cli.main"])  # inside a function
    assert "verl_rfpp.bash_reader.shell" not in {target for target, _ in IMPORTS["verl_rfpp.bash_reader.builtins"]}
    assert {"verl_rfpp.rules.table", "verl_rfpp.rules.keys"} <= {t for t, _ in IMPORTS["verl_rfpp.validation"]}
    assert "verl_rfpp.rules.keys" in {target for target, _ in IMPORTS["verl_rfpp.rules.table"]}  # within a part
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


RUN_MODULES = ("run_metrics", "checkpoints", "configuration", "launch")  # docs/layout.md, "A CPU run of main_ppo"


def test_a_cpu_runs_modules_import_down_their_order():
    """What a CPU run is (configuration) and what it leaves across runs (checkpoints) do not reach
    the supervision (launch) that runs it, nor the metrics files what reads them."""
    order = {f"verl_rfpp.cpu.{name}": index for index, name in enumerate(RUN_MODULES)}
    assert all(module in MODULES for module in order)
    upward = sorted(f"{module}:{line} imports {target}" for module, index in order.items()
                    for target, line in IMPORTS[module] if order.get(target, -1) > index)
    assert upward == []
    assert {target for target, _ in IMPORTS["verl_rfpp.cpu.launch"]} >= set(order) - {"verl_rfpp.cpu.launch"}


def test_the_experiments_shared_modules_import_nothing_of_the_noisy_study():
    """Inside ``experiments`` (docs/layout.md, "The applications"), the modules both tasks share
    (runs, series, stats, the demo task's report) import nothing of the ``noisy`` subpackage, and
    the subpackage's ``__init__`` imports none of its modules: the study sits on the pipeline, not
    in it."""
    shared = sorted(m for m in MODULES if m.startswith("verl_rfpp.experiments")
                    and not m.startswith("verl_rfpp.experiments.noisy"))
    assert {"verl_rfpp.experiments.runs", "verl_rfpp.experiments.series", "verl_rfpp.experiments.stats",
            "verl_rfpp.experiments.report"} <= set(shared)
    wrong = sorted(f"{module}:{line} imports {target}" for module in shared for target, line in IMPORTS[module]
                   if target.startswith("verl_rfpp.experiments.noisy"))
    assert wrong == []
    assert IMPORTS["verl_rfpp.experiments.noisy"] == set()
    assert any(target == "verl_rfpp.experiments.noisy.analysis"  # the check sees the subpackage's imports
               for target, _ in IMPORTS["verl_rfpp.experiments.noisy.sections"])


def test_every_part_has_its_row_and_every_row_a_part():
    table = allowed()
    parts = {part(module) for module in MODULES}
    assert sorted(parts - set(table)) == [], "parts of verl_rfpp/ docs/layout.md's table does not place"
    assert sorted(set(table) - parts) == [], "rows of docs/layout.md's table that name no part"
    named = set().union(*table.values())
    assert sorted(named - parts) == [], "parts a row allows that do not exist"


def test_every_import_goes_where_the_table_allows():
    table = allowed()
    wrong = sorted(f"{module}:{line} imports {target} ({part(module)} -> {part(target)})"
                   for module, found in IMPORTS.items() for target, line in found
                   if part(target) != part(module) and part(target) not in table.get(part(module), set()))
    assert wrong == []


def test_no_file_imports_itself_through_others():
    assert _cycles({module: {target for target, _ in found} for module, found in IMPORTS.items()}) == []


def test_no_part_imports_itself_through_others():
    graph: dict[str, set[str]] = {}
    for module, found in IMPORTS.items():
        targets = {part(target) for target, _ in found} - {part(module)}
        graph.setdefault(part(module), set()).update(targets)
    assert _cycles(graph) == []
    assert _cycles(allowed()) == [], "the table itself allows a circle"
