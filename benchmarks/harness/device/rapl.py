"""CPU package energy from Linux powercap (RAPL): `/sys/class/powercap/intel-rapl:N/energy_uj`.

Intel CPUs, and AMD Zen CPUs on recent kernels (through the same `intel-rapl` powercap driver),
expose one energy counter per package (socket) in microjoules. Only the top-level `package-*`
domains are read, summed over sockets: their sub-domains (`core`, `uncore`, `dram`) are parts of
or beside the package, `psys` is the whole platform, and the `intel-rapl-mmio` tree repeats the
package counter, so adding any of them would count energy twice or count something else. The
source is named by its domains, e.g. `rapl:package-0+package-1`.

Each counter wraps at `max_energy_range_uj`; a reading smaller than the previous one is taken
as one wrap (a window longer than a full range, minutes at full power, cannot be told apart and
is not expected between two reads around one benchmark's rounds).

Since Linux 5.10 `energy_uj` is readable by root only (the PLATYPUS power side channel), so an
unprivileged run usually gets `RaplUnavailable` with what to do. The module takes the sysfs root
as an argument, so tests build a fake tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

POWERCAP_ROOT = Path("/sys/class/powercap")
RAPL_UPDATE_PERIOD_S = 0.001
"""How often a RAPL energy-status counter advances: about every 1 ms (Intel SDM vol. 3B,
"Platform Specific Power Management Support"; measured with jitter by Hähnel et al., "Measuring
Energy Consumption for Short Code Paths Using RAPL", 2012). From the literature, not measured
here; `nox -s doctor` measures it on the machine."""
# Top-level package zones only: `intel-rapl:0`, not `intel-rapl:0:0` or `intel-rapl-mmio:0`.
_TOP_LEVEL = re.compile(r"^intel-rapl:\d+$")


@dataclass(frozen=True)
class RaplUnavailable:
    """Why no package energy can be read here (one line)."""

    reason: str


@dataclass(frozen=True)
class _Domain:
    name: str
    energy_file: Path
    max_range_uj: int


class RaplCounter:
    """Package energy summed over sockets, in joules since `open_rapl`; wraps are unrolled."""

    def __init__(self, domains: tuple[_Domain, ...], first: tuple[int, ...]) -> None:
        self._domains = domains
        self._last = list(first)
        self._total_uj = 0
        self.source = "rapl:" + "+".join(d.name for d in domains)

    def read_j(self) -> float | None:
        """Joules used by the packages since the counter was opened; None if a read fails."""
        for i, domain in enumerate(self._domains):
            raw = _read_int(domain.energy_file)
            if raw is None:
                return None
            delta = raw - self._last[i]
            if delta < 0:  # the counter wrapped at max_energy_range_uj
                delta += domain.max_range_uj + 1
            self._total_uj += delta
            self._last[i] = raw
        return self._total_uj / 1e6


def open_rapl(root: Path = POWERCAP_ROOT) -> RaplCounter | RaplUnavailable:
    """The package counters under `root`, read once (which checks permissions), or why not."""
    try:
        zones = sorted(p for p in root.iterdir() if _TOP_LEVEL.match(p.name))
    except OSError:
        return RaplUnavailable(f"no powercap RAPL interface ({root} not readable or absent)")
    domains: list[_Domain] = []
    for zone in zones:
        name = _read_text(zone / "name")
        if name is None or not name.startswith("package"):
            continue  # psys (the platform) or an unnamed zone: not a package counter
        max_range = _read_int(zone / "max_energy_range_uj")
        domains.append(_Domain(name, zone / "energy_uj", max_range if max_range else 2**32 - 1))
    if not domains:
        return RaplUnavailable(f"no RAPL package domain under {root} (this CPU exposes none)")
    first: list[int] = []
    for domain in domains:
        try:
            text = domain.energy_file.read_text(encoding="utf-8").strip()
        except PermissionError:
            return RaplUnavailable(
                f"permission denied reading {domain.energy_file} (root-only since Linux 5.10): "
                "run the suite as root, or let this user read it "
                "(sudo chmod o+r /sys/class/powercap/intel-rapl:*/energy_uj) on a trusted machine"
            )
        except OSError as error:
            return RaplUnavailable(f"cannot read {domain.energy_file}: {error.strerror}")
        if not text.isdigit():
            return RaplUnavailable(f"{domain.energy_file} holds {text!r}, not microjoules")
        first.append(int(text))
    return RaplCounter(tuple(domains), tuple(first))


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    return int(text) if text is not None and text.isdigit() else None
