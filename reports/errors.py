"""The one error type of the reports area: bad input that the user can fix.

`ReportError` joins phasebench's error hierarchy (`benchmarks.harness.errors`, a module with no
imports) so that every CLI in the project treats it alike: print one line, exit 2. Unreadable
history files are *not* errors: the loader names and skips them (see `history.SkippedFile`).
"""

from __future__ import annotations

from benchmarks.harness.errors import PhasebenchError


class ReportError(PhasebenchError):
    """A reports CLI argument or input file cannot be used; the message says which and the fix."""
