"""The docs check (issue 46): every `nox -s` session, `--option`, `PHASEBENCH_*` variable,
repository path, module and field name that README.md and docs/*.md write exists in the code,
so the next rename fails a test, not a reader. The rules and the allowlists, each entry with its
reason: tests/docs_check.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.docs_check import (
    EXTERNAL_NAMES,
    EXTERNAL_OPTIONS,
    CodeIndex,
    Problem,
    build_index,
    check,
    code_names,
    defined_options,
    documents,
    noxfile_sessions,
)

ROOT = Path(__file__).resolve().parents[1]

# Stale names in docs other issues own at the time of writing; the coordinator fixes them when
# merging and deletes the entry (the second test fails until then, so the list cannot rot).
KNOWN_STALE: dict[tuple[str, str, str], str] = {}


@pytest.fixture(scope="module")
def index() -> CodeIndex:
    return build_index(ROOT)


@pytest.fixture(scope="module")
def problems(index: CodeIndex) -> list[Problem]:
    found: list[Problem] = []
    for doc in documents(ROOT):
        found += check(doc.relative_to(ROOT).as_posix(), doc.read_text(encoding="utf-8"), index)
    return found


def test_every_name_the_docs_write_exists_in_the_code(problems):
    found = [p for p in problems if (p.doc, p.kind, p.token) not in KNOWN_STALE]
    assert not found, "\n".join(str(p) for p in found)


def test_every_known_stale_entry_is_still_stale(problems):
    reported = {(p.doc, p.kind, p.token) for p in problems}
    fixed = [key for key in KNOWN_STALE if key not in reported]
    assert not fixed, f"fixed in the docs, so delete from KNOWN_STALE: {fixed}"


# Each line: a misspelt name of one kind, then the right one, which must pass.
SYNTHETIC = """\
Run `nox -s bench-cpux`, then `nox -s bench-cpu` or `nox -s "tests(transformers='5.24.0')"`.
Pass `--matrx FILE` to pytest; `--matrix FILE` is the option.
pytest-benchmark's `--benchmark-storag` is not `--benchmark-storage`.
Set `PHASEBENCH_TORCHX`; the variable is `PHASEBENCH_TORCH`.
The rounds live in `benchmarks/suite.py`, now `benchmarks/suite/rounds.py` and `device/fpstate.py`.
The record holds `decode_step_ms`, really `decode_step_s`, `kv_*_bytes` and `thermal_<zone>_c`.
Run `python -m benchmarks.abx`, that is `python -m benchmarks.ab`.
See `benchmarks.suite.Rounds`, that is `benchmarks.suite.rounds.Rounds` (`levels.location_at`).
Links: [gone](nowhere.md), [here](suite.md).
"""
MISSPELT = {
    ("session", "bench-cpux"),
    ("option", "--matrx"),
    ("option", "--benchmark-storag"),
    ("variable", "PHASEBENCH_TORCHX"),
    ("path", "benchmarks/suite.py"),
    ("name", "decode_step_ms"),
    ("module", "benchmarks.abx"),
    ("module", "benchmarks.suite.Rounds"),
    ("link", "nowhere.md"),
}


def test_a_misspelt_name_of_every_kind_is_reported_and_the_right_one_is_not(index):
    found = {(p.kind, p.token) for p in check("docs/synthetic.md", SYNTHETIC, index)}
    assert found == MISSPELT


def test_a_misspelt_option_in_a_real_doc_fails_the_check(index):
    """The check on the real docs is not vacuous: one misspelling in suite.md is caught."""
    text = (ROOT / "docs" / "suite.md").read_text(encoding="utf-8")
    assert "`--allow-slow-dtypes`" in text
    broken = text.replace("`--allow-slow-dtypes`", "`--allow-slow-dtype`", 1)
    found = check("docs/suite.md", broken, index)
    assert [(p.kind, p.token) for p in found] == [("option", "--allow-slow-dtype")]


def _fake_index(**fields: object) -> CodeIndex:
    empty: dict[str, object] = {
        "sessions": frozenset(),
        "options": frozenset(),
        "variables": frozenset(),
        "files": frozenset({"docs/suite.md"}),
        "names": frozenset(),
        "patterns": frozenset(),
        "modules": {},
    }
    return CodeIndex(**{**empty, **fields})  # type: ignore[arg-type]


def test_the_rules_read_the_index_not_a_fixed_list():
    doc = "`nox -s fly`, `--wings`, `PHASEBENCH_SKY`, `wing_span_m`, `birds/owl.py`"
    assert len(check("docs/x.md", doc, _fake_index())) == 5
    known = _fake_index(
        sessions=frozenset({"fly"}),
        options=frozenset({"--wings"}),
        variables=frozenset({"PHASEBENCH_SKY"}),
        names=frozenset({"wing_span_m"}),
        files=frozenset({"benchmarks/birds/owl.py"}),
    )
    assert check("docs/x.md", doc, known) == []


def test_sessions_options_and_names_are_read_from_the_source():
    nox = (
        "import nox\n@nox.session(name='bench-cpu', venv_params=[])\ndef bench_cpu(s): ...\n"
        "@nox.session\n@nox.parametrize('v', ['1'])\ndef tests(s, v): ...\n"
        "def helper(): ...\n"
    )
    assert noxfile_sessions(nox) == frozenset({"bench-cpu", "tests"})
    source = ast.parse(
        '"""Docs mention `ghost_field_s`."""\n'
        "p.add_argument('--pairs', '-p')\n"
        "group.addoption(f'--{prefix}storage')\n"
        "record = {'decode_step_s': 1.0, f'thermal_{zone}_c': 2}\n"
    )
    assert defined_options(source) == {"--pairs", "--*storage"}
    names, patterns = code_names(source)
    assert "decode_step_s" in names
    assert "ghost_field_s" not in names  # a docstring is prose, not the code writing a field
    assert "thermal_*_c" in patterns


def test_every_allowlist_entry_is_needed(index):
    """An allowlisted option or name must appear in the docs and must not be ours."""
    text = "\n".join(doc.read_text(encoding="utf-8") for doc in documents(ROOT))
    for option in EXTERNAL_OPTIONS:
        assert option in text, f"{option} is allowlisted but no doc names it"
        assert option not in index.options, f"{option} is ours: drop it from EXTERNAL_OPTIONS"
    for name in EXTERNAL_NAMES:
        assert f"`{name}" in text, f"{name} is allowlisted but no doc names it"
        assert name not in index.names, f"{name} is in the code: drop it from EXTERNAL_NAMES"
