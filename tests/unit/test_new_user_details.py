"""Smaller things a new user meets (issue 51, item 9): ``bbmia --version``, ..."""

from __future__ import annotations

import re

from blackbox_mia import __version__
from tests.tools.doc_commands import ROOT

from .test_cli import invoke


def test_version_prints_the_packages_version_and_exits_0():
    result = invoke("--version")
    assert result.exit_code == 0 and result.output == f"bbmia {__version__}\n"
    declared = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)[1]
    assert __version__ == declared
