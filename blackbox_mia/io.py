"""Writing results safely: strict JSON (no bare NaN/Infinity) and atomic replacement of JSON files;
and, for JSON read back (answers, cache rows), :func:`loads_finite` (every number finite).

Every JSON file the runner and the command line write (``<out>.config.json``, summaries) goes
through :func:`write_json_atomic`: a reader, or a run killed mid-write, sees either the old file
or the new one, never half of one. Every JSON Lines row goes through :func:`json_line`. An atomic
write gets the mode any other file of the run gets (:func:`new_file_mode`: 0644 under the usual
umask), not the 0600 of a temporary file: a run's reports, rows and figures are all readable alike.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import orjson

from .types import BlackboxMIAError


class NonFiniteNumber(ValueError):
    """Decoded JSON holds NaN or an infinity at ``path`` (:func:`nonfinite_path`'s form)."""

    def __init__(self, path: str):
        super().__init__(f"NaN or an infinity at {path or 'the top'}")
        self.path = path


def loads_finite(data: bytes, parse_constant: Callable[[str], object] | None = None) -> object:
    """JSON text (UTF-8, a BOM allowed) decoded, every number finite: orjson, which refuses NaN,
    infinities and numbers too large for a double, in a third of the standard library's time;
    what orjson refuses goes to the standard library (``parse_constant`` for its ``NaN`` and
    ``Infinity``, which it lets through by default: a BOM, an integer past 64 bits, the precise
    fault), whose result is then checked.

    Raises:
        NonFiniteNumber: a number that is NaN or infinite.
        UnicodeDecodeError, json.JSONDecodeError: not UTF-8 JSON.
        Exception: what ``parse_constant`` raises.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    value = json.loads(data.decode("utf-8-sig"), parse_constant=parse_constant)  # None: the default
    where = nonfinite_path(value)
    if where is not None:
        raise NonFiniteNumber(where)
    return value


JSON_TYPES = ((bool, "a boolean"), (int, "a number"), (float, "a number"), (str, "a string"), (list, "an array"),
              (dict, "an object"))


def json_type(value: object) -> str:
    """What a parsed JSON value is, as a message says it to someone who wrote the JSON:
    ``"null"``, ``"a boolean"``, ``"a number"``, ``"a string"``, ``"an array"``, ``"an object"``
    (else the Python type's name)."""
    if value is None:
        return "null"
    return next((name for kind, name in JSON_TYPES if isinstance(value, kind)), type(value).__name__)


def nonfinite_path(value: object) -> str | None:
    """The path (``.choices[0].logprobs.token_logprobs[3]``) of the first NaN or infinity in a
    decoded JSON value, or ``None`` when every number is finite."""
    if isinstance(value, float):
        return None if math.isfinite(value) else ""
    if isinstance(value, dict):
        items, form = value.items(), ".{}"
    elif isinstance(value, list):
        items, form = enumerate(value), "[{}]"
    else:
        return None
    for name, item in items:
        path = nonfinite_path(item)
        if path is not None:
            return form.format(name) + path
    return None


def dumps_strict(obj, what: str, **kwargs) -> str:
    """``json.dumps(obj, allow_nan=False, **kwargs)``.

    Args:
        obj: a JSON-ready value (dicts, lists, str, int, float, bool, None).
        what: what is being written, for the error message (a path, ``"row 'gsm8k-test-3'"``).
        **kwargs: passed to :func:`json.dumps` (``indent``, ``sort_keys``...).

    Raises:
        BlackboxMIAError: ``obj`` holds NaN or ±Infinity, which JSON cannot represent.
        TypeError: ``obj`` holds a value of a type JSON does not know (a programming error).
    """
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError as exc:
        raise BlackboxMIAError(f"{what}: refusing to write NaN or Infinity as JSON ({exc})") from exc


def json_line(obj, what: str) -> str:
    """One JSON Lines row: compact strict JSON (see :func:`dumps_strict`) plus ``"\\n"``.

    Raises:
        BlackboxMIAError: ``obj`` holds NaN or ±Infinity.
    """
    return dumps_strict(obj, what) + "\n"


def new_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: ``0o666`` less the process's umask.

    The umask is read from ``/proc/self/status`` where there is one (Linux); elsewhere it is
    set and restored at once (``os.umask`` has no read-only form)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            umask = next((int(line.split()[1], 8) for line in f if line.startswith("Umask:")), None)
    except OSError:
        umask = None
    if umask is None:
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically: a temporary file in the same directory,
    flushed and fsynced, then :func:`os.replace` over ``path`` (parents are created). A reader,
    or a run killed mid-write, sees the old file or the new one, never a mix. The file gets the
    mode of any new file (:func:`new_file_mode`).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        BlackboxMIAError: the file cannot be written (the old file, if any, is left as it was).
    """
    path = Path(path)
    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
        ) as f:
            tmp_name = f.name
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp_name, new_file_mode())  # a temporary file is created 0600
        os.replace(tmp_name, path)
        tmp_name = None
    except OSError as exc:
        raise BlackboxMIAError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        if tmp_name is not None:
            Path(tmp_name).unlink(missing_ok=True)
    return path


def write_json_atomic(path: str | Path, obj, indent: int | None = 2, sort_keys: bool = True) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically (see :func:`write_text_atomic`).

    Args:
        path: destination file.
        obj: a JSON-ready value; NaN and ±Infinity are refused.
        indent: spaces per indentation level (``None``: one line).
        sort_keys: sort object keys.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        BlackboxMIAError: ``obj`` holds NaN or ±Infinity (nothing is written), or the file
            cannot be written (the old file, if any, is left as it was).
    """
    text = dumps_strict(obj, str(path), indent=indent, sort_keys=sort_keys, ensure_ascii=False)
    return write_text_atomic(path, text + "\n")


def read_json_object(path: str | Path, what: str) -> dict:
    """The JSON object stored in ``path``.

    Args:
        path: a JSON file.
        what: what the file is, for error messages (``"run configuration"``).

    Raises:
        BlackboxMIAError: the file is missing or unreadable, is not valid JSON, or holds
            something other than an object (a list, a number...).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BlackboxMIAError(f"cannot read {what} {path}: {exc}") from exc
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BlackboxMIAError(f"{path}:{exc.lineno}: malformed JSON in {what} ({exc.msg})") from exc
    if not isinstance(obj, dict):
        raise BlackboxMIAError(f"{path}: {what} must be a JSON object, got {json_type(obj)}")
    return obj


def config_mismatch(old, new) -> str | None:
    """The first setting in which two run configurations differ, for a refusal to resume.

    Both are compared as they read back from JSON (tuples are lists; ``1 == 1.0`` as in
    Python), key by key in sorted order, depth first, so the message names the innermost
    differing setting.

    Args:
        old: the configuration saved beside earlier results (a JSON value).
        new: the configuration of this run.

    Returns:
        ``None`` when they are equal, else one line such as
        ``"backends.target.model: 'cache/canary/a' before, 'cache/canary/b' now"`` (a setting
        present on one side only shows ``absent`` on the other).

    Raises:
        TypeError: a value JSON cannot hold (a programming error).

    Example:
        >>> config_mismatch({"k": 1, "s": {"w": 2}}, {"k": 1, "s": {"w": 3}})
        's.w: 2 before, 3 now'
    """
    return _first_difference(json.loads(json.dumps(old)), json.loads(json.dumps(new)), "")


def _first_difference(old, new, where: str) -> str | None:
    """:func:`config_mismatch` of two JSON values found at the dotted path ``where``."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            inner = f"{where}.{key}" if where else key
            if key not in old or key not in new:
                shown = ["absent" if key not in side else repr(side[key]) for side in (old, new)]
                return f"{inner}: {shown[0]} before, {shown[1]} now"
            found = _first_difference(old[key], new[key], inner)
            if found is not None:
                return found
        return None
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            found = _first_difference(a, b, f"{where}[{i}]")
            if found is not None:
                return found
        return None
    return None if old == new else f"{where or 'configuration'}: {old!r} before, {new!r} now"


def check_saved_config(config_path: Path, config, what: str, results: Path, hint: str, partial: bool = False) -> None:
    """Refuse to resume ``results`` unless the configuration saved at ``config_path`` equals
    ``config`` (as :func:`config_mismatch` compares them; ``partial``: only in the top-level
    keys ``config`` has, a part of the configuration known early).

    Args:
        config_path: the JSON configuration saved beside ``results``.
        config: this run's configuration.
        what: what the file holds, for messages (``"run configuration"``).
        results: the results file being resumed, named in the message.
        hint: what the user can do (:data:`~blackbox_mia.results_file.OVERWRITE_HINT`).

    Raises:
        BlackboxMIAError: no saved configuration, an unreadable one, or one that differs
            (the message names the first differing setting with both values).
    """
    if not config_path.exists():
        raise BlackboxMIAError(f"{results} holds rows but no {config_path.name} says how they were made; {hint}")
    saved = read_json_object(config_path, what)
    difference = config_mismatch({key: saved.get(key) for key in config} if partial else saved, config)
    if difference is not None:
        raise BlackboxMIAError(f"{results} was written with another configuration ({difference}; see {config_path}); {hint}")
