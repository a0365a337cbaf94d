"""quanto's extension build: a stale lock is an error naming the file, never an endless wait.

The lock lives in the extension's build directory; the tests point quanto's real extension
object at a temporary one (nothing is compiled: every case stops before the build).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.harness.errors import KVError
from benchmarks.harness.kvquant import quantobuild
from benchmarks.harness.kvquant.quantobuild import (
    LOCK_NAME,
    ensure_quanto_built,
    lock_holders,
    wait_for_lock,
)

needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")


@pytest.fixture
def extension_in(monkeypatch, tmp_path):
    """quanto's CPU extension object, unloaded, building into `tmp_path`."""
    pytest.importorskip("optimum.quanto", reason="optimum-quanto is not installed")
    extension = quantobuild.quanto_extension("cpu")
    monkeypatch.setattr(extension, "build_directory", str(tmp_path))
    monkeypatch.setattr(extension, "_lib", None)
    return extension


@needs_proc
def test_a_lock_no_process_holds_is_stale_and_named(extension_in, tmp_path):
    lock = tmp_path / LOCK_NAME
    lock.touch()  # what a killed build leaves behind
    with pytest.raises(KVError, match="held by no running process") as raised:
        ensure_quanto_built("cpu", wait_s=60)
    assert f"rm {lock}" in str(raised.value)
    assert lock.exists()  # reported, not deleted behind the user's back


@needs_proc
def test_a_lock_a_live_build_holds_is_waited_for_then_reported(extension_in, tmp_path):
    lock = tmp_path / LOCK_NAME
    fd = os.open(lock, os.O_CREAT | os.O_EXCL)  # as torch's FileBaton holds it while building
    try:
        assert os.getpid() in (lock_holders(lock) or [])
        with pytest.raises(KVError, match=f"still held by process {os.getpid()} after 0 s"):
            ensure_quanto_built("cpu", wait_s=0.2)
    finally:
        os.close(fd)
    assert lock_holders(lock) == []


def test_a_lock_released_while_waiting_lets_the_build_go_on(tmp_path):
    lock = tmp_path / LOCK_NAME
    lock.touch()
    sleeps = []

    def holder(path):
        return [12345]  # a live build, until the second poll removes the lock

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 2:
            lock.unlink()

    wait_for_lock(lock, wait_s=60, holders=holder, sleep=sleep)
    assert len(sleeps) == 2


def test_without_proc_a_lock_that_outlives_the_wait_is_reported(tmp_path):
    lock = tmp_path / LOCK_NAME
    lock.touch()
    with pytest.raises(KVError, match="still held by an unknown process"):
        wait_for_lock(lock, wait_s=0.0, holders=lambda path: None, sleep=lambda s: None)


def test_a_loaded_extension_is_not_checked_again(monkeypatch, tmp_path):
    pytest.importorskip("optimum.quanto", reason="optimum-quanto is not installed")
    extension = quantobuild.quanto_extension("cpu")
    monkeypatch.setattr(extension, "build_directory", str(tmp_path))
    monkeypatch.setattr(extension, "_lib", object())
    (tmp_path / LOCK_NAME).touch()
    ensure_quanto_built("cpu", wait_s=0)  # returns at once: the library is already loaded


def test_the_install_step_says_built_failed_or_nothing_to_build(monkeypatch, capsys):
    """`python -m ...quantobuild DEVICE` (the quantized sessions' install step): its exit code
    tells nox whether the build failed (1) or there was nothing to build (2)."""
    pytest.importorskip("optimum.quanto", reason="optimum-quanto is not installed")
    assert quantobuild.main(["tpu"]) == 2
    assert "nothing to build" in capsys.readouterr().err

    def broken(device_type, **_):
        raise KVError(f"building quanto's {device_type} extension failed (no g++)")

    monkeypatch.setattr(quantobuild, "ensure_quanto_built", broken)
    assert quantobuild.main(["cpu"]) == 1
    assert "no g++" in capsys.readouterr().err
    monkeypatch.setattr(quantobuild, "ensure_quanto_built", lambda device_type, **_: None)
    assert quantobuild.main(["cpu"]) == 0
    assert "quanto extension for cpu: ready" in capsys.readouterr().out
