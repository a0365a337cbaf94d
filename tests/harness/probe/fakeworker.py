"""A stand-in for `benchmarks.harness.probe.worker` that misbehaves on purpose (tests only).

`python fakeworker.py MODE`: `dead` exits at once (a message on stderr); `hang-start` never
prints its start-up line; `hang-second-point` prints a valid start-up line, answers the first
point with fixed figures and never answers the second.
"""

from __future__ import annotations

import json
import sys
import time

INFO = {
    "op": "info",
    "threads": 1,
    "dtype": "float32",
    "default_dtype": "float32",
    "flush_denormal": False,
    "torch": "fake",
    "pid": 0,
    "kinds": [
        {"kind": kind, "device": "cpu", "description": "fake", "dtype": "float32"}
        for kind in ("memory", "compute")
    ],
}
POINT = {"op": "point", "calls_s": {"memory": [0.01, 0.011, 0.012], "compute": [0.002] * 3}}


def main(mode: str) -> int:
    if mode == "dead":
        sys.stderr.write("fake worker: dying on purpose\n")
        return 3
    if mode == "hang-start":
        time.sleep(600)
        return 0
    print(json.dumps(INFO), flush=True)
    sys.stdin.readline()
    print(json.dumps(POINT), flush=True)
    sys.stdin.readline()
    time.sleep(600)  # hung: the parent's timeout must end this
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
