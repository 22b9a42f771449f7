"""Which fields of a record are an item's text, label and id, and how a dataset spec names them.

A spec may carry its field names after a ``?``, as a backend spec carries its settings:
``data.csv?text_field=body&label_field=is_member&id_field=uid`` (any of the three, in any order). The commands'
``--text-field``, ``--label-field`` and ``--id-field`` set them for the DATASET argument
(:func:`with_fields`), so that a run's configuration records one spec that says everything.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from urllib.parse import parse_qsl, urlencode

from ..option_names import named
from ..types import BlackboxMIAError


@dataclass(frozen=True)
class Fields:
    """The record fields (columns) an item is read from; ``None``: the default.

    Attributes:
        text_field: the text field (default ``text``, else ``input``); it must be in every record.
        label_field: the membership label field, 0, 1 or null (default ``label``, optional; a field
            named here must be present).
        id_field: the id field, a string or an integer (default ``id``, optional: ``{stem}-{i}``).
    """

    text_field: str | None = None
    label_field: str | None = None
    id_field: str | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise BlackboxMIAError(f"{named(f.name)} must be a column name, got {value!r}")

    def query(self) -> str:
        """The spec's ``?`` part for the fields given (``""`` when none is), keys in field order."""
        given = [(f.name, getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) is not None]
        return urlencode(given)


def split_fields(spec: str) -> tuple[str, Fields]:
    """``("data.csv", Fields(text_field="body"))`` from ``"data.csv?text_field=body"``: a spec's source and
    the fields its ``?`` part names (all default without one).

    Raises:
        BlackboxMIAError: a key other than ``text_field``, ``label_field``, ``id_field``, a key given twice, or an
            empty value.
    """
    source, mark, query = spec.partition("?")
    if not mark:
        return spec, Fields()
    pairs = parse_qsl(query, keep_blank_values=True)
    known = [f.name for f in fields(Fields)]
    given: dict[str, str] = {}
    for key, value in pairs:
        if key not in known:
            raise BlackboxMIAError(f"{spec}: unknown dataset field {key!r} after '?' (known: {', '.join(known)})")
        if key in given:
            raise BlackboxMIAError(f"{spec}: dataset field {key!r} given twice")
        given[key] = value
    return source, Fields(**given)


def with_fields(spec: str, given: Fields) -> str:
    """``spec`` with the fields of ``given`` added to those its ``?`` part names (the command
    line's ``--text-field`` and friends on its DATASET).

    Raises:
        BlackboxMIAError: a field named both ways with two names, or a malformed ``?`` part.
    """
    source, own = split_fields(spec)
    merged = own
    for f in fields(Fields):
        value, already = getattr(given, f.name), getattr(own, f.name)
        if value is None:
            continue
        if already is not None and already != value:
            raise BlackboxMIAError(f"{named(f.name)} {value!r} and the spec's {f.name}={already!r} differ: "
                                   "give one of them")
        merged = replace(merged, **{f.name: value})
    query = merged.query()
    return f"{source}?{query}" if query else source
