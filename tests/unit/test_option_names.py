"""Messages name a setting by its Python argument to a caller of the library and by its flag on
the command line (blackbox_mia/option_names.py), from one marker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from blackbox_mia.audits.memorization import MemorizeConfig
from blackbox_mia.audits.sweep import SweepConfig
from blackbox_mia.audits.unlearning import UnlearningConfig
from blackbox_mia.cli import app
from blackbox_mia.option_names import FLAGS, as_arguments, as_flags, flag, for_command_line, named
from blackbox_mia.types import BlackboxMIAError

from .test_cli import assert_one_line_error, invoke

PACKAGE = Path(__file__).resolve().parents[2] / "blackbox_mia"


def test_one_marker_reads_as_an_argument_or_as_a_flag():
    message = f"{named('calibration_fraction')} needs {named('calibration')}"
    assert as_arguments(message) == "calibration_fraction= needs calibration="
    assert as_flags(message) == "--calibration-fraction needs --calibration"
    # a flag other than the argument's name, a value, a switch, a negated switch
    assert (as_arguments(named("reference_length")), as_flags(named("reference_length"))) == (
        "reference_length=", "--reference-tokens")
    assert (as_arguments(named("forget", "7")), as_flags(named("forget", "7"))) == ("forget='7'", "--forget 7")
    assert (as_arguments(named("reprobe", True)), as_flags(named("reprobe", True))) == ("reprobe=True", "--reprobe")
    assert (as_arguments(named("resume")), as_flags(named("resume"))) == ("resume=False", "--overwrite")
    with pytest.raises(ValueError):
        named("seed", 1, 2)


def test_str_of_an_error_names_arguments_and_the_command_line_flags():
    err = BlackboxMIAError(f"{named('target_fpr')} must be in (0, 1), got 2")
    assert str(err) == "target_fpr= must be in (0, 1), got 2"
    assert for_command_line(err) == "--target-fpr must be in (0, 1), got 2"
    assert for_command_line(ValueError("plain")) == "plain"


@pytest.mark.parametrize(("build", "python", "args", "command_line"), [
    (lambda: SweepConfig(dataset="gsm8k", calibration_fraction=0.5).validate(),
     "calibration_fraction= needs calibration=",
     ("sweep", "gsm8k", "--local", "no-model", "--calibration-fraction", "0.5"), "--calibration-fraction needs --calibration"),
    (lambda: UnlearningConfig(dataset="canary", flag_fraction=2.0).validate(),
     "flag_fraction= must lie in (0, 1), got 2.0",
     ("unlearning", "canary", "--before", "a", "--after", "b", "--flag-least-changed", "2"),
     "--flag-least-changed must lie in (0, 1), got 2.0"),
    (lambda: MemorizeConfig(dataset="canary", reference_length=0).validate(),
     "reference_length= must be an integer >= 1, got 0",
     ("memorize", "canary", "--local", "no-model", "--reference-tokens", "0"), "--reference-tokens must be an integer >= 1, got 0"),
])
def test_the_same_bad_setting_names_the_argument_in_python_and_the_flag_on_the_command_line(
        tmp_path, build, python, args, command_line):
    with pytest.raises(BlackboxMIAError) as err:
        build()
    assert str(err.value) == python
    result = invoke(*args, "--out", tmp_path / "out")
    assert_one_line_error(result, f"error: {command_line}")
    assert python.split()[0] not in result.output


def command_line_flags() -> set[str]:
    """Every option name of every bbmia command (hidden ones included)."""
    found: set[str] = set()
    pending = [typer.main.get_command(app)]
    while pending:
        command = pending.pop()
        pending.extend(getattr(command, "commands", {}).values())
        for param in command.params:
            found.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
    return found


def test_every_named_setting_is_a_flag_of_some_command():
    used = set()
    for path in PACKAGE.rglob("*.py"):
        used.update(re.findall(r"""\bnamed\(\s*["']([a-z_]+)["']""", path.read_text(encoding="utf-8")))
    used |= {"steps", "batch_size"}  # canary/unlearn.py names them in a loop
    assert {"calibration", "reference_length", "context", "resume", "max_logprobs_chat"} <= used
    flags = command_line_flags()
    assert {flag(name) for name in used | set(FLAGS)} - flags == set()
