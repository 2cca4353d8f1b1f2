"""No import circle in harness/: the graph of its internal imports (function-level ones included)
has no cycle, and every module imports alone in a fresh interpreter."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` (a folder under `root`) by dotted name; a package by its name."""
    names = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """Imports under `if TYPE_CHECKING:`: never run, so no edge of the runtime graph."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped.update(ast.walk(child))
    return skipped


def imported_names(path: Path, module: str, is_package: bool) -> list[str]:
    """The dotted names `module` imports anywhere in its file (top level, in functions,
    in classes), `from x import y` giving x.y as well as x (y may be a submodule)."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_only(tree)
    found = []
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1 more
                parts = module.split(".")
                anchor = parts if is_package else parts[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append(base)
            found += [f"{base}.{alias.name}" for alias in node.names]
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of `package` that importing it runs. Importing a.b.c also runs the
    packages a.b and a, unless the importer is inside them (then they are already running)."""
    modules = module_names(root, package)
    graph = {}
    for module, path in modules.items():
        edges = set()
        is_package = path.name == "__init__.py"
        for name in imported_names(path, module, is_package):
            parts = name.split(".")
            # The longest prefix that is a module: `from harness.x import f` names harness.x.f.
            while parts and ".".join(parts) not in modules:
                parts.pop()
            for end in range(len(parts), 0, -1):
                target = ".".join(parts[:end])
                if module == target or module.startswith(target + "."):
                    continue  # itself, or an enclosing package of it: already running
                edges.add(target)
        graph[module] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None (depth-first search)."""
    state: dict[str, str] = {}  # "open" while on the stack, "done" after
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_import_graph_of_harness_has_no_cycle():
    graph = import_graph(REPO, "harness")
    assert "harness.report.cli" in graph["harness.report"]  # function-level imports count
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_sweep_report_and_the_esgd_study_import_nothing_of_each_other():
    """Two renderers that harness.report.cli picks between; they share only the low floors
    (harness.style, harness.markdown)."""
    graph = import_graph(REPO, "harness")

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    assert not {m for m in reach("harness.esgd.app") if m.startswith("harness.report")}
    assert not {m for m in reach("harness.report.summary") if m.startswith("harness.esgd")}
    # the low floors: nothing of the harness but their own modules
    assert not {m for m in reach("harness.style") if not m.startswith("harness.style")}
    assert not reach("harness.markdown")


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between harness's packages and top-level modules (harness.X): an arrow where a
    module of one imports a module of another. Entry points (`__main__`, imported by nothing)
    are left out: they sit above everything."""
    packages: dict[str, set[str]] = {}
    for module, edges in graph.items():
        if module.endswith(".__main__"):
            continue
        source = ".".join(module.split(".")[:2])
        targets = {".".join(e.split(".")[:2]) for e in edges} - {source, "harness"}
        packages.setdefault(source, set()).update(targets)
    return packages


def test_the_packages_of_harness_import_each_other_without_a_circle():
    """Packages by concern form floors: problems and config low, training above them, stacking
    and sweeps above training, the report on top."""
    packages = package_graph(import_graph(REPO, "harness"))
    cycle = find_cycle(packages)
    assert cycle is None, "package circle: " + " -> ".join(cycle)
    assert "harness.problems" in packages["harness.training"]  # a real graph
    assert "harness.training" in packages["harness.stacking"]
    assert packages["harness.problems"] <= {"harness.config", "harness.errors"}


def test_the_walk_finds_a_circle_through_a_function_and_a_package(tmp_path):
    """The checker itself: a circle closed by a function-level import of a package whose
    __init__ imports a submodule is found; the same graph without it is not."""
    files = {
        "pkg/__init__.py": "",
        "pkg/style.py": "def f():\n    from pkg.report.common import X\n",
        "pkg/report/__init__.py": "from pkg.report.common import X\n",
        "pkg/report/common.py": "from pkg import style\nX = 1\n",
        "pkg/report/other.py": "from . import common\nfrom ..style import f\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.report.other"] == {"pkg.report.common", "pkg.style"}  # relative imports
    cycle = find_cycle(graph)
    assert cycle and {"pkg.style", "pkg.report.common"} <= set(cycle), cycle
    (tmp_path / "pkg/style.py").write_text("def f():\n    pass\n")
    assert find_cycle(import_graph(tmp_path, "pkg")) is None


# Importing a package's __main__ runs its program.
MODULES = [m for m in sorted(module_names(REPO, "harness")) if not m.endswith(".__main__")]
# Third-party libraries loaded once before the forks (no harness module among them): each
# module's import then costs milliseconds, not the seconds of `import torch`.
PRELOAD = ["numpy", "pandas", "torch", "matplotlib.figure", "omegaconf", "hydra", "scipy.stats"]
ALONE = """
import importlib, os, sys, traceback
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
assert not [m for m in sys.modules if m == "harness" or m.startswith("harness.")]
failed = 0
for module in sys.argv[1].split(","):
    pid = os.fork()
    if pid == 0:  # the child: a process where no harness module was ever imported
        try:
            importlib.import_module(module)
        except BaseException:
            print(module, traceback.format_exc().strip().splitlines()[-1], flush=True)
            os._exit(1)
        os._exit(0)
    failed += os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0
sys.exit(1 if failed else 0)
"""


@pytest.mark.slow
def test_every_module_imports_alone_in_a_fresh_process():
    """A circle that only bites when one module is imported first (a partially initialised
    module) fails here: each module imported first, in a process of its own (forked from one
    that loaded only third-party libraries)."""
    result = subprocess.run(
        [sys.executable, "-c", ALONE, ",".join(MODULES), *PRELOAD],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["harness.report", "harness.style", "harness.markdown"])
def test_drawing_and_tables_do_not_import_torch(name):
    """The report, the style and the Markdown writer load without torch (the command line and
    the ESGD renderer do need it)."""
    code = f"import sys, {name}; assert 'torch' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


# Generic code: what trains, stacks, sweeps and tunes any problem.
GENERIC = ("training", "stacking", "sweeps", "tuning", "esgd", "recommend")
PROBLEM_PACKAGES = ("harness.problems.classification", "harness.problems.ratings")


def test_generic_code_imports_no_problem_package():
    """The seam is sealed: generic code reaches a problem only through `harness.problems`
    (`Problem`, `problem_of`, the shared `layers`), never a problem's own package, so a new
    problem plugs in without editing it. ESGD too: it evolves MLPs, which it asks the problem
    about (`Problem.hand_stacked`) and builds through it."""
    graph = import_graph(REPO, "harness")
    generic = [m for m in graph if m.split(".")[1:2] and m.split(".")[1] in GENERIC]
    assert "harness.stacking.grouping" in generic and "harness.esgd.app" in generic  # real
    found = {
        module: sorted(e for e in graph[module] if e.startswith(PROBLEM_PACKAGES))
        for module in generic
    }
    assert not {m: e for m, e in found.items() if e}


def test_the_seal_check_finds_an_import_of_a_problem_package(tmp_path):
    """The checker itself: a function-level import of a problem's module is an edge."""
    files = {
        "harness/__init__.py": "",
        "harness/problems/__init__.py": "",
        "harness/problems/classification/__init__.py": "",
        "harness/problems/classification/mnist.py": "X = 1\n",
        "harness/sweeps/__init__.py": "",
        "harness/sweeps/execute.py": (
            "def f():\n    from harness.problems.classification.mnist import X\n"
        ),
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    edges = import_graph(tmp_path, "harness")["harness.sweeps.execute"]
    assert "harness.problems.classification.mnist" in edges
