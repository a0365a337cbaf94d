"""The docs check: every name a reader may type or look up in README.md and docs/*.md exists.

A doc names seven kinds of things that the code can rename under it:

* `session`: `nox -s NAME` (a parametrized `nox -s "tests(transformers='5.24.0')"` counts as
  `tests`; `bench-<class>` matches any session of that shape): a session of noxfile.py, by its
  decorator's `name=` or its function name;
* `option`: `--name` anywhere in the text: an `add_argument` / `addoption` definition in our
  sources or in the pytest plugins the suite runs under (pytest, pytest-benchmark, xdist), or one
  of `EXTERNAL_OPTIONS` (another tool's, each with the tool);
* `variable`: `PHASEBENCH_*`: read or set somewhere in our sources (code, workflows, `.ci/run`);
* `path` and `link`: a repository path (`benchmarks/suite/rounds.py`, `matrix/*.yaml`,
  `device/fpstate.py`, `benchmarks/harness/{profiling,overhead}.py`): a tracked file or folder,
  or the tail of one; and every relative Markdown link target;
* `module`: `python -m benchmarks.ab`, and a dotted reference into our packages
  (`benchmarks.suite.rounds.Rounds`, `levels.location_at`): the module exists and defines the
  name;
* `name`: a snake_case name in code quotes (`decode_step_s`, `kv_*_bytes`, `thermal_<zone>_c`):
  a record field, option, function or key that appears in our sources as a string or an
  identifier (or as a key of a shipped matrix or model file), or one of `EXTERNAL_NAMES`.

`check` is a pure function of a document's text and a `CodeIndex`; `build_index` reads the
repository. Deliberately not checked: prose, numbers, and whether a sentence is true.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import itertools
import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

# Options of other tools that the docs show beside ours, each with the tool it belongs to.
EXTERNAL_OPTIONS: Mapping[str, str] = {
    "--target": "pip install (an overlay transformers for vs_optimum)",
    "--install": "xcode-select",
    "--token": "the GitHub runner's config.sh",
    "--runnergroup": "the GitHub runner's config.sh",
    "--unattended": "the GitHub runner's config.sh",
    "--input": "gh api (a request body from a file)",
    "--generate-hashes": "pip-compile (pip-tools: .github/requirements/gate.txt)",
    "--install-only": "nox (build a session's environment, run nothing)",
    "--disableupdate": "the GitHub runner's config.sh",
}

# Names in code quotes that are other tools' (not ours, so not in our sources), or notation.
EXTERNAL_NAMES: Mapping[str, str] = {
    "d_i": "docs/ab.md's notation for one pair's log-ratio, log(head_i / base_i)",
    "inv_freq": "transformers' RoPE buffer",
    "get_memory_footprint": "transformers' PreTrainedModel method",
    "get_kv_heads_per_rank": "a transformers tensor-parallel helper",
    "_init_weights": "transformers' per-module weight initialisation",
    "benchmark_serving": "vLLM's serving benchmark script",
    "generate_step": "mlx-lm's generation loop (mlx_lm.generate), whose prefill MLX cells copy",
    "min_tokens": "a vLLM sampling field transformers serve refuses (HTTP 422)",
    "integration_id": "GitHub's ruleset field (.github/rulesets/default-branch.json)",
    "inter_token_latency_s": "an llmperf result field",
    "end_to_end_latency_s": "an llmperf result field",
    "perf_event": "Linux perf events (pyperf's check)",
    "model.generate": "transformers' GenerationMixin.generate on a model object",
    "model.compile": "torch.nn.Module.compile on a model object",
}

# Only f-string shapes with a name's stem before the first `*` (`thermal_*_c`, `selfcheck.*`):
# `*_bytes` or `*` would let any misspelt field through.
SHAPE = re.compile(r"[a-z][a-z0-9_]{2,}[_.]\*[\w.*]*")
OPTION = re.compile(r"(?<![\w/.$-])--[a-zA-Z][\w-]*\*?")
OPTION_WORD = re.compile(r"--[a-zA-Z][\w-]*")
# An option in a workflow or shell script: a word of its own, not part of a longer word.
OPTION_IN_SCRIPT = re.compile(r"(?<![\w/.$-])--[a-zA-Z][\w-]*")
VARIABLE = re.compile(r"\bPHASEBENCH_[A-Z0-9_]*[A-Z0-9]\b(?:_\*)?")
SESSION = re.compile(r"nox -s\s+(\"[^\"]+\"|'[^']+'|[\w<>-]+)")
PYTHON_M = re.compile(r"python3? -m ([\w.]+)")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
SNAKE = re.compile(r"^_?[a-z][a-z0-9]*(?:_(?:[a-z0-9]+|\*|<[^>]+>))+$")
QUOTED_SNAKE = re.compile(r"\"(_?[a-z][a-z0-9]*(?:_[a-z0-9]+)+)\"")
# A path: segments joined by `/`, each a file-name-like word (globs and {a,b} allowed).
PATH = re.compile(r"(?<![\w./:$~<{-])(?:\.?[\w*{},<>.-]+/)+[\w*{},<>.-]*")
PATH_ROOTS = ("benchmarks/", "reports/", "tests/", "matrix/", "docs/", ".github/", ".ci/")
SOURCE_SUFFIXES = (".py", ".yaml", ".yml", ".md", ".j2", ".toml", ".js", ".css", ".png", ".sh")
FILE_SUFFIXES = (*SOURCE_SUFFIXES, ".json", ".jsonl", ".html", ".txt", ".log", ".stack")
# Paths the docs name that are outputs or live outside the repository, never tracked files.
NOT_REPOSITORY = (
    "pytest_benchmark/",  # a third-party package's source
    "out/",
    ".benchmarks/",
    ".phasebench/",
    ".nox/",
    "history/",  # the benchmark-history branch's layout
    "DIR/",
    "/",
    "~/",
    "$",
)


@dataclass(frozen=True)
class Problem:
    """One name a document uses that the code does not have."""

    doc: str
    line: int
    kind: str
    token: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.kind} `{self.token}` is not in the code"


@dataclass(frozen=True)
class CodeIndex:
    """What the repository defines, as the docs may name it."""

    sessions: frozenset[str]
    options: frozenset[str]
    variables: frozenset[str]
    files: frozenset[str]  # tracked paths, relative to the root, `/`-separated
    names: frozenset[str]
    patterns: frozenset[str]  # what f-strings write: `thermal_*_c`
    modules: Mapping[str, frozenset[str]]  # dotted module -> the names it defines at top level
    dirs: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        folders = {
            "/".join(parts[:i])
            for parts in (f.split("/") for f in self.files)
            for i in range(1, len(parts))
        }
        object.__setattr__(self, "dirs", frozenset(folders))


# --- reading a document ------------------------------------------------------------------------


def _lines(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line number, line, inside a fenced code block)."""
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        yield number, line, fenced


def _expand_braces(token: str) -> list[str]:
    """`a/{b,c}.py` -> `a/b.py`, `a/c.py` (one level, any number of groups)."""
    parts = re.split(r"\{([^{}]*)\}", token)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def _as_glob(token: str) -> str:
    return re.sub(r"<[^>]*>", "*", token)


def _matches(pattern: str, names: frozenset[str]) -> bool:
    if "*" not in pattern:
        return pattern in names
    return any(fnmatch.fnmatchcase(n, pattern) for n in names)


def _normalise(path: str) -> str:
    """`docs/../README.md` -> `README.md`."""
    parts: list[str] = []
    for part in path.split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


# --- the rules: each yields (kind, token) for what a line names and the index lacks -----------

Found = Iterator[tuple[str, str]]


def _sessions(line: str, index: CodeIndex) -> Found:
    for match in SESSION.finditer(line):
        name = match.group(1).strip("\"'").split("(")[0]  # tests(transformers='5.24.0')
        if not _matches(_as_glob(name), index.sessions):
            yield "session", match.group(1)


def _options(line: str, index: CodeIndex) -> Found:
    known = index.options | set(EXTERNAL_OPTIONS)
    for match in OPTION.finditer(line):
        token = match.group(0)
        if token.endswith(("*", "-")):  # `--fail-*`: a family of options
            ok = any(o.startswith(token.rstrip("*")) for o in known)
        else:  # pytest-benchmark defines f"--{prefix}storage": a shape
            ok = token in known or any(fnmatch.fnmatchcase(token, o) for o in known if "*" in o)
        if not ok:
            yield "option", token


def _variables(line: str, index: CodeIndex) -> Found:
    for match in VARIABLE.finditer(line):
        token = match.group(0)
        prefix = token.removesuffix("*")
        if not (token in index.variables or (token != prefix and _any_prefix(prefix, index))):
            yield "variable", token


def _any_prefix(prefix: str, index: CodeIndex) -> bool:
    return any(v.startswith(prefix) for v in index.variables)


def _runnable_modules(line: str, index: CodeIndex) -> Found:
    for match in PYTHON_M.finditer(line):
        module = match.group(1).rstrip(".")
        if module.split(".", 1)[0] in ("benchmarks", "reports") and not _module_ok(
            module, index, runnable=True
        ):
            yield "module", module


def _links(line: str, index: CodeIndex, doc: str) -> Found:
    for match in LINK.finditer(line):
        target = match.group(1)
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        resolved = _normalise((Path(doc).parent / target).as_posix())
        if resolved not in index.files and resolved not in index.dirs:
            yield "link", target


def _paths(line: str, index: CodeIndex) -> Found:
    for match in PATH.finditer(line):
        token = match.group(0).rstrip(".,;:)")
        if _is_repository_path(token) and not _path_ok(token, index):
            yield "path", token


def _spans(line: str, index: CodeIndex, fenced: bool) -> Found:
    """Dotted references and snake_case names in code quotes; quoted names in code blocks."""
    if fenced:
        for word in QUOTED_SNAKE.findall(line):
            if not _name_ok(word, index):
                yield "name", word
        return
    for match in CODE_SPAN.finditer(line):
        span = match.group(1).strip()
        token = span.split("(")[0].rstrip(":")
        if (
            _is_our_dotted(token, index)
            and not _module_ok(token, index, runnable=False)
            and token not in index.names  # a dotted name the code writes: `cpu.governor`
            and token not in EXTERNAL_NAMES
        ):
            yield "module", token
        words = [token] if SNAKE.match(token) else QUOTED_SNAKE.findall(span)
        for word in words:
            if not _name_ok(word, index):
                yield "name", word


def _path_ok(token: str, index: CodeIndex) -> bool:
    everything = index.files | index.dirs
    for candidate in (_as_glob(t).rstrip("/") for t in _expand_braces(token)):
        if _matches(candidate, everything):
            continue
        if not candidate.startswith(PATH_ROOTS) and _matches("*/" + candidate, everything):
            continue  # `device/fpstate.py`: the tail of a tracked path
        return False
    return True


def _is_repository_path(token: str) -> bool:
    """Whether a `/`-token names a file or folder of ours (rather than an output, a URL, ...)."""
    if token.startswith(NOT_REPOSITORY) or "://" in token or "/" not in token:
        return False
    if any(seg.isupper() or seg in ("..", ".") for seg in token.split("/") if seg):
        return False  # DIR/ab.json, FILE/..., relative walks
    if token.startswith(PATH_ROOTS):
        return True
    return token.rstrip("/").rsplit("/", 1)[-1].endswith(SOURCE_SUFFIXES)


def _module_ok(dotted: str, index: CodeIndex, runnable: bool) -> bool:
    """`python -m X` (runnable) or a dotted reference `pkg.mod.name` into our code."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        found = [
            m for m in index.modules if m == prefix or (not runnable and m.endswith("." + prefix))
        ]
        if not found:
            continue
        if runnable:  # a package needs a __main__; a module runs as it is
            return cut == len(parts) and any(
                m + ".__main__" in index.modules
                or not any(other.startswith(m + ".") for other in index.modules)
                for m in found
            )
        if cut == len(parts):
            return True
        attribute = parts[cut]
        return any(
            attribute in index.modules[m] or f"{m}.{attribute}" in index.modules for m in found
        )
    return False


def _is_our_dotted(token: str, index: CodeIndex) -> bool:
    if not re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", token):
        return False
    if "." + token.rsplit(".", 1)[-1] in FILE_SUFFIXES:
        return False  # index.html, ab.json
    first = token.split(".", 1)[0]
    basenames = {m.rsplit(".", 1)[-1] for m in index.modules}
    return first in ("benchmarks", "reports") or first in basenames


def _name_ok(token: str, index: CodeIndex) -> bool:
    if token in EXTERNAL_NAMES:
        return True
    pattern = _as_glob(token)
    if pattern in index.patterns or _matches(pattern, index.names):
        return True
    # `itl_chunk_*`: a family whose names a helper builds from the stem it is given
    # (`_percentiles("itl_chunk", ...)` writes `itl_chunk_p50_s`, ...): the stem is in the code.
    if token.endswith("_*") and token.count("*") == 1 and token[:-2] in index.names:
        return True
    return "*" not in pattern and any(fnmatch.fnmatchcase(pattern, p) for p in index.patterns)


def check(doc: str, text: str, index: CodeIndex) -> list[Problem]:
    """Every session, option, variable, path, module and name in `text` that `index` lacks;
    `doc` is the document's path from the repository root (links resolve against it)."""
    problems: list[Problem] = []
    for number, line, fenced in _lines(text):
        found = itertools.chain(
            _sessions(line, index),
            _options(line, index),
            _variables(line, index),
            _runnable_modules(line, index),
            _links(line, index, doc),
            _paths(line, index),
            _spans(line, index, fenced),
        )
        for kind, token in dict.fromkeys(found):
            problems.append(Problem(doc, number, kind, token))
    return problems


# --- reading the repository --------------------------------------------------------------------


def tracked_files(root: Path) -> frozenset[str]:
    """Files git knows (tracked, and new ones it does not ignore)."""
    done = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return frozenset(p for p in done.stdout.splitlines() if (root / p).exists())


def noxfile_sessions(source: str) -> frozenset[str]:
    """Session names of a noxfile: `@nox.session(name=...)`, else the function's name."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if not (isinstance(target, ast.Attribute) and target.attr == "session"):
                continue
            name = node.name
            if isinstance(decorator, ast.Call):
                for keyword in decorator.keywords:
                    if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                        name = str(keyword.value.value)
            names.add(name)
    return frozenset(names)


def defined_options(tree: ast.AST) -> set[str]:
    """`--options` defined by `add_argument(...)` / `addoption(...)` calls."""
    options: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if called in ("add_argument", "addoption", "_addoption"):
            for arg in node.args:
                if isinstance(arg, ast.Constant) and str(arg.value).startswith("--"):
                    options.add(str(arg.value))
                elif isinstance(arg, ast.JoinedStr) and _pattern(arg).startswith("--"):
                    options.add(_pattern(arg))  # pytest-benchmark's f"--{prefix}storage"
    return options


def passed_options(tree: ast.AST) -> set[str]:
    """`--options` the code passes to another program (a string constant that is one option,
    e.g. `transformers serve`'s `"--continuous-batching"`): the option exists where we call it."""
    docstrings = _docstrings(tree)
    return {
        str(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and OPTION_WORD.fullmatch(node.value.split("=", 1)[0])
    }


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes: prose about a name is not the code writing it."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _pattern(node: ast.JoinedStr) -> str:
    """`f"thermal_{key}_c"` -> `thermal_*_c`: the shape of the names an f-string writes."""
    return "".join(
        str(v.value) if isinstance(v, ast.Constant) else "*" for v in node.values
    ).replace("**", "*")


def code_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """Identifiers, the words of string constants (record keys, dotted check names), and the
    patterns of f-strings, docstrings left out."""
    names: set[str] = set()
    patterns: set[str] = set()
    docstrings = _docstrings(tree)
    formatted: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            patterns.add(_pattern(node))
            formatted.update(id(v) for v in node.values)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg):
            names.add(str(node.arg))
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[-1])
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and id(node) not in formatted
        ):
            names.update(re.findall(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*", node.value))
            names.update(re.findall(r"[A-Za-z_][\w]*", node.value))
    return names, patterns


def top_level_names(tree: ast.Module) -> frozenset[str]:
    """What `module.NAME` can reach: definitions, assignments and imports at module level."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def _plugin_sources() -> list[Path]:
    """The sources of the pytest plugins the suite's options live beside."""
    found: list[Path] = []
    for package in ("_pytest", "pytest_benchmark", "xdist"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                found.extend(Path(location).rglob("*.py"))
    return found


def _yaml_keys(value: object) -> Iterator[str]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield str(key)
            yield from _yaml_keys(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _yaml_keys(inner)


def build_index(root: Path) -> CodeIndex:
    """Read the repository at `root` into a `CodeIndex`."""
    files = tracked_files(root)
    options: set[str] = set()
    names: set[str] = set()
    patterns: set[str] = set()
    modules: dict[str, frozenset[str]] = {}
    variables: set[str] = set()
    for path in sorted(files):
        if path.startswith("docs/") or path.endswith((".md", ".png")):
            continue  # what the docs say is not what the code defines
        text = (root / path).read_text(encoding="utf-8", errors="replace")
        if path.startswith("tests/"):
            # The docs name tests (`test_decode_bytes_...`); nothing else of a test counts.
            if path.endswith(".py"):
                names.update(re.findall(r"^\s*def (test_\w+)", text, flags=re.MULTILINE))
            continue
        variables.update(VARIABLE.findall(text))
        if path.endswith(".py"):
            tree = ast.parse(text, filename=path)
            options |= defined_options(tree) | {o.split("=", 1)[0] for o in passed_options(tree)}
            found, shapes = code_names(tree)
            names |= found
            patterns |= shapes
            if path.startswith(("benchmarks/", "reports/")):
                dotted = path[: -len(".py")].replace("/", ".").removesuffix(".__init__")
                modules[dotted] = top_level_names(tree)
                names.add(dotted.rsplit(".", 1)[-1])  # `noise_model`: a module named alone
        elif path.endswith((".j2", ".yml")) or path == ".ci/run":
            names.update(re.findall(r"[A-Za-z_]\w*", text))  # templates, workflows
            options.update(OPTION_IN_SCRIPT.findall(text))  # what their commands pass
        elif path.endswith(".sh"):
            options.update(OPTION_IN_SCRIPT.findall(text))  # a script's own options and calls
        elif path.startswith("matrix/") and path.endswith(".yaml"):
            names.update(_yaml_keys(yaml.safe_load(text)))
    for plugin in _plugin_sources():
        options |= defined_options(ast.parse(plugin.read_text(encoding="utf-8")))
    sessions = noxfile_sessions((root / "noxfile.py").read_text(encoding="utf-8"))
    return CodeIndex(
        sessions=sessions,
        options=frozenset(options),
        variables=frozenset(v for v in variables if not v.endswith("_*")),
        files=files,
        names=frozenset(names),
        patterns=frozenset(p for p in patterns if SHAPE.fullmatch(p)),
        modules=modules,
    )


def documents(root: Path) -> list[Path]:
    """README.md and every docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]
