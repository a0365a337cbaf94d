"""The one error type of the reports area: bad input that the user can fix.

Every CLI in the project treats its input errors alike (print one line, exit 2), but `reports`
never imports `benchmarks` (it installs without torch), so this is a base of its own rather than
a `PhasebenchError`. Unreadable history files are *not* errors: the loader names and skips them
(see `history.load.SkippedFile`).
"""

from __future__ import annotations


class ReportError(Exception):
    """A reports CLI argument or input file cannot be used; the message says which and the fix."""
