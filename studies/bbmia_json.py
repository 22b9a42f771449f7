"""Run a ``bbmia`` command the way a user does and read its ``--json`` summary (for the scripts)."""

from __future__ import annotations

import json
import subprocess
import sys


def bbmia(*args: str) -> dict:
    """Run ``bbmia ARGS --json`` and return the JSON object on the last line of its stdout.

    Raises:
        SystemExit: the command failed (its stderr is shown).
    """
    done = subprocess.run(["bbmia", *args, "--json"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit(f"bbmia {' '.join(args)} exited with {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])
