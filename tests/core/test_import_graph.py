"""flowrl's import graph, read with ``ast`` from the source folders (``setup.py``'s ``SOURCE_FOLDERS``: ``flowrl.pipelines``
is ``pipelines/``, and so on): no import circle, and the config imports no plug-in."""

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def source_folders(root: Path = ROOT) -> dict[str, str]:
    """``setup.py``'s import name -> folder table, read without running setup.py."""
    for node in ast.parse((root / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "SOURCE_FOLDERS":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no SOURCE_FOLDERS")


def modules(root: Path, folders: dict[str, str]) -> dict[str, Path]:
    """Every module's dotted name -> its file (a package is its ``__init__.py``)."""
    found = {}
    for package, folder in folders.items():
        for path in (root / folder).rglob("*.py"):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _import_nodes(body: list[ast.stmt], late: bool):
    """The import statements of a module's top level (in ``if``/``try`` blocks, ``TYPE_CHECKING`` included);
    with ``late``, inside functions and classes as well."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.If, ast.Try)):
            blocks = [node.body, node.orelse, *(h.body for h in getattr(node, "handlers", []))]
            for block in [*blocks, getattr(node, "finalbody", [])]:
                yield from _import_nodes(block, late)
        elif late:
            for block in ("body", "orelse", "finalbody"):
                yield from _import_nodes(getattr(node, block, []) or [], late)


def imports(root: Path, folders: dict[str, str], late: bool) -> dict[str, set[str]]:
    """Each module -> the modules of the tree it imports (``from a.b import c``: ``a.b.c`` when that is a module,
    else ``a.b``; a relative import resolved against its package)."""
    mods = modules(root, folders)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in _import_nodes(ast.parse(path.read_text()).body, late):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    head = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*head, base] if base else head)
                wanted = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in mods else base for alias in node.names]
            for target in wanted:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_walk_finds_a_circle_through_a_mapped_folder_and_a_late_import(tmp_path):
    (tmp_path / "core").mkdir()
    (tmp_path / "plugins" / "sub").mkdir(parents=True)
    (tmp_path / "core" / "__init__.py").write_text("")
    (tmp_path / "core" / "config.py").write_text("def f():\n    from core.plugins.sub import thing\n")
    (tmp_path / "plugins" / "__init__.py").write_text("")
    (tmp_path / "plugins" / "sub" / "__init__.py").write_text("")
    (tmp_path / "plugins" / "sub" / "thing.py").write_text("from ...config import x\n")
    folders = {"core": "core", "core.plugins": "plugins"}
    assert imports(tmp_path, folders, late=False)["core.plugins.sub.thing"] == {"core.config"}
    assert circles(imports(tmp_path, folders, late=False)) == []
    assert circles(imports(tmp_path, folders, late=True)) == [["core.config", "core.plugins.sub.thing"]]


def test_the_source_folders_are_the_import_names():
    import flowrl

    assert source_folders() == {"flowrl": "flowrl", **flowrl.SOURCE_FOLDERS}
    assert flowrl.SOURCE_FOLDERS == {
        "flowrl.pipelines": "pipelines",
        "flowrl.reward_models": "reward_models",
        "flowrl.benchmarks": "benchmarks",
    }
    assert len(modules(ROOT, source_folders())) > 200


def test_a_plain_checkout_imports_the_folders_as_flowrl_subpackages():
    """No install's finder (the editable one removed), only the checkout on the path: ``flowrl.CheckoutFinder``
    maps the folders."""
    code = (
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')]\n"
        "import flowrl.pipelines.sd3.layout, flowrl.reward_models.base, flowrl.benchmarks.models\n"
        "print(flowrl.pipelines.sd3.layout.__file__, flowrl.reward_models.base.__file__, flowrl.benchmarks.__file__)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/", timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        str(ROOT / "pipelines" / "sd3" / "layout.py"),
        str(ROOT / "reward_models" / "base.py"),
        str(ROOT / "benchmarks" / "__init__.py"),
    ]


def test_no_import_circle_at_module_level():
    assert circles(imports(ROOT, source_folders(), late=False)) == []


def test_no_import_circle_counting_imports_inside_functions():
    """A late import hides a dependence from the module's head, not from the design: none closes a circle."""
    assert circles(imports(ROOT, source_folders(), late=True)) == []


def test_the_config_imports_no_plug_in():
    """``flowrl.config`` is plain data: of flowrl it imports only the config toolkit (and its key tables), at any
    depth; checks against the plug-ins are ``flowrl.resolve``'s."""
    graph = imports(ROOT, source_folders(), late=True)
    assert graph["flowrl.config"] == {"flowrl.configkit"}
    assert graph["flowrl.configkit"] == {"flowrl.migration"}
    assert graph["flowrl.migration"] == set()
