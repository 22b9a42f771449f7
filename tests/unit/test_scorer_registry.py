"""The scorer registry: a new scorer is one file (its module registers itself and the package
imports every module of its folder), and a name is registered once."""

import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

import blackbox_mia
from blackbox_mia.scorers.base import REGISTRY, Scorer, register_scorer

NEW_SCORER = textwrap.dedent('''
    """A test scorer: the mean log-prob of the first two tokens."""
    from dataclasses import dataclass

    from .base import Scorer, register_scorer
    from .bounded import Bounded


    @register_scorer
    @dataclass(frozen=True)
    class FirstTwo(Scorer):
        name = "first_two"

        def score(self, text, lp, aux):
            return Bounded.exact(float(lp.logprobs[:2].mean()))
''')


def test_a_new_scorer_is_one_file(tmp_path):
    package = Path(blackbox_mia.__file__).parent
    shutil.copytree(package, tmp_path / "blackbox_mia", ignore=shutil.ignore_patterns("data", "__pycache__"))
    (tmp_path / "blackbox_mia" / "scorers" / "first_two.py").write_text(NEW_SCORER)
    probe = textwrap.dedent('''
        import numpy as np
        from blackbox_mia.scorers import parse_scorers
        from blackbox_mia.types import Provenance, TokenLogprobs
        lp = TokenLogprobs(np.arange(3), ["t"] * 3, np.array([-1.0, -3.0, -8.0]), (0,), Provenance("test", "none", "fixed", True))
        (scorer,) = parse_scorers("first_two")
        print(scorer.label, scorer.score("t", lp, []).value)
    ''')
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["first_two", "-2.0"]  # (-1 - 3) / 2 nats/token


def test_a_name_is_registered_once():
    @dataclass(frozen=True)
    class Loss2(Scorer):
        name = "loss"

        def score(self, text, lp, aux):
            raise AssertionError

    with pytest.raises(ValueError, match="two scorers named 'loss'"):
        register_scorer(Loss2)
    assert REGISTRY["loss"] is not Loss2
