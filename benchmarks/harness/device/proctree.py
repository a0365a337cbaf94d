"""A process tree remembered as it is seen, and ended with it all (tp ranks, serving servers).

A child that outlives its parent is re-parented and no longer shows under the root, so every
process seen is remembered by pid (`poll`); `end` sends SIGTERM to those still alive, then
SIGKILL to what is left after the grace period. psutil refuses to signal a pid reused since it
was seen, so remembering never kills a stranger.
"""

from __future__ import annotations

import signal

import psutil


class ProcessTree:
    """Every process under `root_pid`, remembered as it is seen."""

    def __init__(self, root_pid: int) -> None:
        self.root = psutil.Process(root_pid)
        self.seen: dict[int, psutil.Process] = {root_pid: self.root}

    def poll(self) -> None:
        """Remember the root's descendants now (the root gone: those seen stay remembered)."""
        try:
            for child in self.root.children(recursive=True):
                self.seen.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass

    def alive(self) -> list[psutil.Process]:
        """The processes seen that still run (zombies are done)."""
        out = []
        for process in self.seen.values():
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    out.append(process)
            except psutil.NoSuchProcess:
                continue
        return out

    def end(self, grace_s: float) -> None:
        """SIGTERM every live process seen, SIGKILL what is left after `grace_s`."""
        self.poll()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            targets = self.alive()
            for process in targets:
                try:
                    process.send_signal(sig)  # psutil refuses a pid reused since it was seen
                except psutil.NoSuchProcess:
                    continue
            psutil.wait_procs(targets, timeout=grace_s)
