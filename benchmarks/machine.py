"""The machine a benchmark ran on, for its summary line: the CPU's model name, its cores, the
load average and the platform, so that a figure is never quoted without where it was measured."""

from __future__ import annotations

import os
import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")  # Linux's CPU description (absent elsewhere: the platform's own name)


def cpu_model(cpuinfo: Path = CPUINFO) -> str:
    """The first ``model name`` of ``cpuinfo`` (Linux), else :func:`platform.processor`, else
    ``"unknown"``."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict:
    """``{"cpu", "cores", "load_avg", "platform"}``: the CPU's model name (:func:`cpu_model`), the
    logical CPUs this process may use, the 1-, 5- and 15-minute load averages now, and
    :func:`platform.platform`."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu_model(), "cores": cores, "load_avg": [round(x, 2) for x in os.getloadavg()],
            "platform": platform.platform()}
