"""Building quanto's C++ extension before anything is timed, and refusing a stale build lock.

optimum-quanto compiles its unpack kernel (`quanto_cpp` on the CPU, `quanto_cuda`,
`quanto_mps`) with `torch.utils.cpp_extension.load` the first time a quantized tensor is
dequantized: about 1 to 2.5 minutes on a 2-core CPU, which would land in the first decode step
of a quanto cell. `ensure_quanto_built(device_type)` builds (or loads) it up front.

The build is guarded by torch's `FileBaton`: an empty file `<build dir>/lock` created with
O_EXCL, held open by the building process and removed when it finishes. A build that was
killed leaves the file behind, and every later load then waits for it forever. Before loading,
a lock file that no live process holds open (Linux: `/proc/<pid>/fd`) is reported as stale,
naming the file to delete; one held by a live build is waited for up to `wait_s` seconds. Where
`/proc` is absent (macOS) a lock still present after `wait_s` is reported the same way.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness.errors import KVError

_EXTENSIONS = {"cpu": "quanto_cpp", "cuda": "quanto_cuda", "mps": "quanto_mps"}
LOCK_NAME = "lock"  # torch.utils.cpp_extension: FileBaton(os.path.join(build_directory, "lock"))
DEFAULT_WAIT_S = 900.0  # a fresh CUDA build of quanto compiles Marlin kernels: many minutes
_POLL_S = 0.5
_PROC = Path("/proc")


def quanto_extension(device_type: str) -> Any:
    """quanto's registered extension object for `device_type` (its `build_directory`, `lib`)."""
    name = _EXTENSIONS.get(device_type)
    if name is None:
        raise KVError(f"quanto has no extension for device type {device_type!r}.")
    extensions = importlib.import_module("optimum.quanto.library.extensions")
    if not extensions.is_extension_available(name):
        raise KVError(
            f"quanto registered no {name} extension here (it registers it only where the "
            f"{device_type} backend is available); run quanto cells on this device elsewhere."
        )
    return extensions.get_extension(name)


def lock_holders(lock: Path, proc: Path = _PROC) -> list[int] | None:
    """Ids of live processes holding `lock` open, or None where `/proc` cannot tell."""
    if not proc.is_dir():
        return None
    target = lock.resolve()
    holders = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            links = list((entry / "fd").iterdir())
        except OSError:  # another user's process, or one that just ended
            continue
        for link in links:
            try:
                if Path(link.readlink()) == target:
                    holders.append(int(entry.name))
                    break
            except OSError:
                continue
    return holders


def wait_for_lock(
    lock: Path,
    *,
    wait_s: float,
    holders: Callable[[Path], list[int] | None] = lock_holders,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once `lock` is gone; raise KVError naming it when it is stale or outlives wait_s."""
    deadline_s = time.monotonic() + wait_s
    unheld_polls = 0
    while lock.exists():
        live = holders(lock)
        # A finishing build closes the file just before removing it: stale only when no
        # process has held it on two polls in a row.
        unheld_polls = unheld_polls + 1 if live == [] else 0
        if unheld_polls >= 2:
            raise KVError(
                f"quanto's extension build lock {lock} is held by no running process (a "
                f"killed build left it); delete it (rm {lock}) and run again."
            )
        if time.monotonic() >= deadline_s:
            who = f"process {live[0]}" if live else "an unknown process"
            raise KVError(
                f"quanto's extension build lock {lock} is still held by {who} after "
                f"{wait_s:.0f} s; if no build is running, delete it (rm {lock})."
            )
        sleep(_POLL_S)


def ensure_quanto_built(device_type: str = "cpu", *, wait_s: float = DEFAULT_WAIT_S) -> None:
    """Build or load quanto's extension for `device_type` now (before any timed round).

    Raises KVError naming the lock file when a killed build left it behind (instead of the
    endless wait inside torch), or when the build itself fails (compiler, ninja, nvcc).
    """
    extension = quanto_extension(device_type)
    if getattr(extension, "_lib", None) is not None:  # already loaded in this process
        return
    wait_for_lock(Path(extension.build_directory) / LOCK_NAME, wait_s=wait_s)
    try:
        extension.lib  # noqa: B018 - the property compiles (first time) and loads the library
    except Exception as error:  # a compiler or loader failure, whatever its type
        raise KVError(
            f"building quanto's {device_type} extension in {extension.build_directory} failed "
            f"({type(error).__name__}: {error}); check g++/clang++, ninja (and nvcc on CUDA)."
        ) from error


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmarks.harness.kvquant.quantobuild DEVICE`: build the extension now.

    The quantized benchmark sessions run it at install time (`noxfile.py`), so a fresh
    environment compiles quanto once there (~40 s on 2 cores), not inside the matrix's run.
    Exit 0: built or loaded; 1: the build failed (the quanto cells then fail with the same
    message, the others run); 2: quanto has no extension for that device here.
    """
    args = sys.argv[1:] if argv is None else argv
    device_type = args[0] if args else "cpu"
    try:
        quanto_extension(device_type)
    except (KVError, ImportError) as error:
        print(f"quanto extension for {device_type}: nothing to build ({error})", file=sys.stderr)
        return 2
    started_s = time.perf_counter()
    try:
        ensure_quanto_built(device_type)
    except KVError as error:
        print(f"quanto extension for {device_type}: {error}", file=sys.stderr)
        return 1
    print(f"quanto extension for {device_type}: ready in {time.perf_counter() - started_s:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
