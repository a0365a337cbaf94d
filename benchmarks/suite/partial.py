"""The run so far as a history file marked partial, so a killed run keeps the cells it finished.

Registered by `benchmarks/suite/configure.py` (written after every test) and
`benchmarks/conftest.py` (the complete run's file is never marked). Deliberately not here: the
timed rounds (`rounds`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pytest_benchmark.utils import safe_dumps


class PartialHistory:
    """The run so far as a history file marked partial, rewritten after every finished test.

    pytest-benchmark writes history only when the session ends, so a run killed by a CI time
    limit (SIGTERM, SIGKILL), a Ctrl-C or a crash would lose every cell it finished. After each
    test, this writes what pytest-benchmark would save at that moment (same hooks, same
    machine and commit info) with `machine_info.phasebench.partial = true` (the COMMON
    contract: a partial file holds only the cells that finished; it is never a complete run),
    atomically: a temporary file, then a rename. It takes the number pytest-benchmark would
    give the next file; at a normal end pytest-benchmark saves the complete run under the
    following number and `discard` removes the partial one. Nothing is written when the run
    saves no history (no autosave/save, `--benchmark-disable`, xdist).
    """

    def __init__(self, config: pytest.Config) -> None:
        self._config = config
        self._path: Path | None = None
        self._written = 0
        self._infos: tuple[dict[str, Any], dict[str, Any]] | None = None

    def _session(self) -> Any:
        session = getattr(self._config, "_benchmarksession", None)
        if session is None or session.disabled or session.storage is None:
            return None
        return session if (session.save or session.autosave) else None

    def write(self) -> Path | None:
        """Write the finished benchmarks so far (when there are new ones); the path, or None."""
        session = self._session()
        if session is None:
            return None
        done = [b for b in session.benchmarks if not b.has_error]
        if len(done) == self._written:
            return self._path
        hook = self._config.hook
        if self._infos is None:
            machine_info = session.get_machine_info()
            commit_info = hook.pytest_benchmark_generate_commit_info(config=self._config)
            hook.pytest_benchmark_update_commit_info(config=self._config, commit_info=commit_info)
            self._infos = (machine_info, commit_info)
        if self._path is None:
            name = session.save or session.autosave
            self._path = Path(session.storage.get(f"{session.storage._next_num}_{name}.json"))
        output = hook.pytest_benchmark_generate_json(
            config=self._config,
            benchmarks=done,
            include_data=session.save_data,
            machine_info=copy.deepcopy(self._infos[0]),
            commit_info=copy.deepcopy(self._infos[1]),
        )
        hook.pytest_benchmark_update_json(config=self._config, benchmarks=done, output_json=output)
        mark_partial(output)
        temporary = self._path.with_name(f".{self._path.name}.tmp")
        try:
            temporary.write_text(safe_dumps(output, ensure_ascii=True, indent=4), "utf-8")
            temporary.replace(self._path)  # atomic on POSIX and Windows
        finally:  # a Ctrl-C mid-write leaves the previous partial file, never a torn one
            temporary.unlink(missing_ok=True)
        self._written = len(done)
        return self._path

    def discard(self) -> None:
        """Remove the partial file (the complete run has been saved under its own number)."""
        if self._path is not None and self._path.exists():
            self._path.unlink()


def mark_partial(output_json: dict[str, Any]) -> None:
    """Flag a history file as holding only the cells that finished (`phasebench.partial`)."""
    output_json.setdefault("machine_info", {}).setdefault("phasebench", {})["partial"] = True
