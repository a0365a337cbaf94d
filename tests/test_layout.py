"""The package layout's rules, checked over the source with `ast` (docs/architecture.md).

* Imports run one way: every import goes to a lower layer (`LAYERS`) or stays in its own unit.
* No import circle between modules, function-level imports included.
* Every package's `__init__.py` docstring says what it owns and, on a `May import:` line, what
  it may import; the modules of the package import nothing else (the standard library aside).
* `reports` never imports `benchmarks`, torch or transformers; the measurement library
  (`benchmarks.harness`) never imports pytest, `reports`, the A/B runner or the calibration.
* No module of the libraries is longer than `MAX_LINES`.

The checker is a pure function over a folder, so it is also run on small synthetic trees that
break each rule: a rule that cannot fail is not a rule.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("benchmarks", "reports")
MAX_LINES = 400

# Lowest first. A module belongs to the unit with the longest matching prefix; an import must
# reach a strictly lower layer or stay inside its own unit.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("benchmarks.harness.errors", "benchmarks.harness.records", "reports.errors"),
    ("benchmarks.harness.device", "reports.history"),
    ("benchmarks.harness.model", "reports.analysis"),
    (
        "benchmarks.harness.cache",
        "benchmarks.harness.quant",
        "reports.render",
        "reports.ab_settings",
    ),
    (
        "benchmarks.harness.roofline",
        "benchmarks.harness.matrix",
        "benchmarks.harness.probe",
        "reports.ab",
        "reports.cli",
    ),
    ("benchmarks.harness.engine", "reports.scenarios"),
    # kvquant: quantized KV caches (backends, bytes, the CLI's measured timeline on the engine).
    ("benchmarks.harness.kvquant",),
    (
        "benchmarks.harness.overhead",
        "benchmarks.harness.profiling",
        "benchmarks.harness.runmode",
        "benchmarks.harness.mlx",  # the MLX engine (DESIGN §14): beside runmode, below modelcache
        "benchmarks.harness.cellmodel",  # the protocol torch's and MLX's built cells implement
        "reports.__main__",
    ),
    # tp: tensor-parallel ranks and their launcher; reads the engine, cache, roofline, model.
    ("benchmarks.harness.plan", "benchmarks.harness.modelcache", "benchmarks.harness.tp"),
    # serve: a server per cell, its load generator and metrics; reads model/ and device/.
    ("benchmarks.harness.serve",),
    ("benchmarks.harness.doctor",),  # `doctor` verb: reads device/ and roofline/, below cli
    ("benchmarks.harness.cli",),
    ("benchmarks.harness.__main__",),
    ("benchmarks.ab",),
    ("benchmarks.calibration",),
    ("benchmarks.bisect",),  # bisection: every step an A/B run, the search in reports.analysis
    ("benchmarks.suite",),  # the suite's pytest glue: rounds, collection, fixtures, tp cells
    ("benchmarks",),  # the suite: conftest.py and the test modules
)
# (importer prefix, imported prefix, why)
FORBIDDEN: tuple[tuple[str, str, str], ...] = (
    ("reports", "benchmarks", "reports reads JSON history; it never imports the measurement side"),
    ("reports", "torch", "reports installs without torch"),
    ("reports", "transformers", "reports installs without transformers"),
    ("benchmarks.harness", "pytest", "the measurement library never knows pytest"),
    ("benchmarks.harness", "reports", "the measurement library never imports reports"),
    ("benchmarks.harness", "benchmarks.ab", "the library does not know its A/B runner"),
    ("benchmarks.harness", "benchmarks.calibration", "the library does not know calibration"),
)


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool
    imports: tuple[str, ...]  # absolute module names, function-level imports included
    lines: int


@dataclass
class Findings:
    upward: list[str] = field(default_factory=list)
    forbidden: list[str] = field(default_factory=list)
    circles: list[str] = field(default_factory=list)
    undeclared: list[str] = field(default_factory=list)
    docstrings: list[str] = field(default_factory=list)
    too_long: list[str] = field(default_factory=list)

    def all(self) -> list[str]:
        return [
            *self.upward,
            *self.forbidden,
            *self.circles,
            *self.undeclared,
            *self.docstrings,
            *self.too_long,
        ]


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.AST, name: str, is_package: bool, known: set[str]) -> tuple[str, ...]:
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:  # `from pkg import module` imports the module
                candidate = f"{target}.{alias.name}"
                found.add(candidate if candidate in known else target)
    return tuple(sorted(found - {name}))


def scan(root: Path, packages: Sequence[str] = PACKAGES) -> dict[str, Module]:
    """Every module under `root/<package>`, with what it imports."""
    paths = [p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))]
    known = {_module_name(root, p) for p in paths}
    modules = {}
    for path in paths:
        name = _module_name(root, path)
        text = path.read_text(encoding="utf-8")
        is_package = path.name == "__init__.py"
        imports = _imports(ast.parse(text), name, is_package, known)
        modules[name] = Module(name, path, is_package, imports, text.count("\n"))
    return modules


def _unit(name: str, layers: Sequence[Sequence[str]]) -> tuple[str, int] | None:
    best: tuple[str, int] | None = None
    for rank, units in enumerate(layers):
        for unit in units:
            if (name == unit or name.startswith(unit + ".")) and (
                best is None or len(unit) > len(best[0])
            ):
                best = (unit, rank)
    return best


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _circles(modules: Mapping[str, Module]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in modules[v].imports:
            if w not in modules:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(modules):
        if name not in index:
            visit(name)
    return found


def declared_imports(docstring: str | None) -> tuple[str, ...] | None:
    """The names on the docstring's `May import:` line (None when it has none)."""
    lines = (docstring or "").splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("May import:"):
            rest = [line.split(":", 1)[1]]
            rest += _until_blank(lines[i + 1 :])
            text = " ".join(rest).replace("nothing", "")
            return tuple(n.strip(" .`") for n in text.split(",") if n.strip(" .`"))
    return None


def _until_blank(lines: Sequence[str]) -> list[str]:
    out = []
    for line in lines:
        if not line.strip():
            break
        out.append(line)
    return out


def check(
    modules: Mapping[str, Module],
    layers: Sequence[Sequence[str]] = LAYERS,
    forbidden: Iterable[tuple[str, str, str]] = FORBIDDEN,
    max_lines: int = MAX_LINES,
) -> Findings:
    """Every broken rule, one line each (file, import, the rule)."""
    out = Findings()
    forbidden = tuple(forbidden)
    for mod in modules.values():
        _check_imports(mod, modules, layers, forbidden, out)
        if mod.lines > max_lines and not mod.name.split(".")[-1].startswith("test_"):
            out.too_long.append(f"{mod.path}: {mod.lines} lines (split past {max_lines})")
    out.circles = [" -> ".join(c) for c in _circles(modules)]
    for pkg in (m for m in modules.values() if m.is_package):
        _check_declared(pkg, modules, out)
    return out


def _check_imports(
    mod: Module,
    modules: Mapping[str, Module],
    layers: Sequence[Sequence[str]],
    forbidden: Sequence[tuple[str, str, str]],
    out: Findings,
) -> None:
    where = _unit(mod.name, layers)
    for target in mod.imports:
        for importer, imported, why in forbidden:
            if _within(mod.name, importer) and _within(target, imported):
                out.forbidden.append(f"{mod.path}: imports {target} ({why})")
        to = _unit(target, layers) if target in modules else None
        if where is not None and to is not None and to[0] != where[0] and to[1] >= where[1]:
            out.upward.append(f"{mod.path}: imports {target} ({to[0]} is not below {where[0]})")


def _check_declared(pkg: Module, modules: Mapping[str, Module], out: Findings) -> None:
    doc = ast.get_docstring(ast.parse(pkg.path.read_text(encoding="utf-8")))
    allowed = declared_imports(doc)
    if not doc or allowed is None or len(doc.splitlines()) < 2:
        out.docstrings.append(
            f"{pkg.path}: the docstring must say what the package owns and, on a "
            "'May import:' line, what it may import"
        )
        return
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    members = [m for m in modules.values() if m is pkg or m.name.rpartition(".")[0] == pkg.name]
    for mod in members:
        for target in mod.imports:
            if target.split(".")[0] in stdlib or _within(target, pkg.name):
                continue
            if not any(_within(target, name) for name in allowed):
                out.undeclared.append(
                    f"{mod.path}: imports {target}, not on {pkg.path}'s 'May import:' line"
                )


def test_the_repository_keeps_its_layout() -> None:
    findings = check(scan(ROOT))
    assert findings.all() == [], "\n".join(findings.all())


def test_the_workflows_scripts_are_short_too() -> None:
    scripts = sorted((ROOT / ".github" / "scripts").glob("*.py"))
    assert scripts
    lengths = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in scripts}
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in scan(ROOT) if _unit(m, LAYERS) is None and m not in PACKAGES]
    assert unplaced == []


# --- the checker on trees that break each rule ------------------------------------------------


def _tree(root: Path, files: Mapping[str, str]) -> dict[str, Module]:
    """Write `files`; every folder without an `__init__.py` among them gets one (`DOC`, nothing)."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for folder in {p.parent for p in (root / "pkg").rglob("*.py")} | {root / "pkg"}:
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text(DOC.format("nothing"), encoding="utf-8")
    return scan(root, ("pkg",))


LAYERS_OF_PKG = (("pkg.low",), ("pkg.high",))
DOC = '"""Owns: things.\n\nMay import: {}.\n"""\n'


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "pkg/low/__init__.py": DOC.format("pkg.high"),
            "pkg/low/a.py": "def f():\n    from pkg.high import b  # lazy imports count too\n",
            "pkg/high/b.py": "X = 1\n",
        },
    )
    findings = check(modules, LAYERS_OF_PKG, ())
    assert len(findings.upward) == 1
    assert "pkg/low/a.py: imports pkg.high.b" in findings.upward[0]


def test_a_circle_is_found_even_inside_one_package(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "pkg/low/a.py": "from pkg.low import b\n",
            "pkg/low/b.py": "def g():\n    from pkg.low.a import X\n",
        },
    )
    assert check(modules, LAYERS_OF_PKG, ()).circles == ["pkg.low.a -> pkg.low.b"]


def test_undeclared_and_forbidden_imports_and_bare_docstrings_are_found(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "pkg/__init__.py": '"""No import line here."""\n',
            "pkg/low/__init__.py": DOC.format("yaml"),
            "pkg/low/a.py": "import json\nimport yaml\nimport torch\n",
        },
    )
    findings = check(modules, LAYERS_OF_PKG, [("pkg.low", "torch", "no torch down here")])
    assert [f.split(": ", 1)[1] for f in findings.undeclared] == [
        "imports torch, not on " + str(tmp_path / "pkg/low/__init__.py") + "'s 'May import:' line"
    ]
    a_py = tmp_path / "pkg/low/a.py"
    assert findings.forbidden == [f"{a_py}: imports torch (no torch down here)"]
    assert len(findings.docstrings) == 1
    assert str(tmp_path / "pkg/__init__.py") in findings.docstrings[0]


def test_a_long_module_is_found_and_a_short_one_is_not(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "pkg/long.py": "X = 1\n" * 11,
            "pkg/short.py": "X = 1\n" * 10,
        },
    )
    assert check(modules, (("pkg",),), (), max_lines=10).too_long == [
        f"{tmp_path / 'pkg/long.py'}: 11 lines (split past 10)"
    ]


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (
            "Owns x.\n\nMay import: torch, `benchmarks.harness.device`.",
            ("torch", "benchmarks.harness.device"),
        ),
        ("Owns x.\n\nMay import: nothing.", ()),
        ("Owns x.", None),
        ("Owns x.\n\nMay import: a,\n  b.c, d.\n\nMore text, not names.", ("a", "b.c", "d")),
    ],
)
def test_the_may_import_line_is_read(doc: str, expected: tuple[str, ...] | None) -> None:
    assert declared_imports(doc) == expected
