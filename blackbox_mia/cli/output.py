"""The machine-readable last line of a command's stdout."""

from __future__ import annotations

import sys


def echo_json_line(obj) -> None:
    """Print ``obj`` as one JSON line on stdout (the machine-readable last line).

    Raises:
        BlackboxMIAError: ``obj`` holds NaN or ±Infinity (JSON has no such numbers).
    """
    from ..io import dumps_strict

    sys.stdout.write(dumps_strict(obj, "JSON output", sort_keys=True) + "\n")
    sys.stdout.flush()
