"""What a valid answer of an OpenAI-compatible endpoint is, and its normalised form.

One validation step for every answer, fresh or read back from the cache (:func:`read_completion`,
:func:`read_chat`): the shape and types the result needs, every field the request asked for
(log-probs, ``top`` alternatives), and lengths that agree with each other and, with echo, with the
prompt. Every number is finite already: :func:`decode_answer` and the response cache decode with
:func:`~blackbox_mia.io.loads_finite` (NaN or an infinity anywhere fails). Generated entries past
``max_tokens`` are set apart under ``past_max_tokens`` (llama-cpp-python keeps generating while
its output ends inside a character): ``tokens`` holds at most ``max_tokens``. A failure is a
:class:`~.errors.Malformed` naming the first field that fails.
"""

from __future__ import annotations

from ....io import NonFiniteNumber, loads_finite
from .errors import Malformed, page_kind


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with "..." when cut."""
    return text if len(text) <= limit else text[:limit] + "..."


def _no_constant(name: str) -> float:
    """``parse_constant`` for :func:`json.loads`: ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON."""
    raise Malformed("the body", f"holds {name}, which is not JSON", corrupt=True)


def decode_answer(content: bytes) -> dict:
    """The JSON object in an HTTP body, UTF-8 (RFC 8259; a BOM is let through; the cache keeps the
    body as it came: :class:`~.cache.disk.JsonText`), every number finite
    (:func:`~blackbox_mia.io.loads_finite`); ``Malformed`` otherwise, naming the fault: final (not
    retried) when the body does not even start as JSON (an HTML page: a wrong URL), else corrupt
    (JSON cut short, a NaN)."""
    try:
        raw = loads_finite(content, parse_constant=_no_constant)
    except NonFiniteNumber as exc:  # a number too large for a double
        raise Malformed(exc.path.lstrip(".") or "the body", "is not a finite number (NaN or infinity)",
                        corrupt=True) from None
    except ValueError:  # not JSON, truncated JSON, not UTF-8
        page = page_kind(content)
        if page is not None:  # an HTML page, plain text: another server, not a glitch
            raise Malformed("the body", page, final=True) from None
        raise Malformed("the body", "expected a JSON object", content.decode("utf-8", "replace"),
                        corrupt=True) from None
    return _typed(raw, dict, "the body", "a JSON object")


def _typed(value: object, types: type | tuple[type, ...], where: str, what: str):
    if not isinstance(value, types):
        raise Malformed(where, f"expected {what}", value)
    return value


def _required(value: object, types: type | tuple[type, ...], where: str, what: str):
    if value is None:
        raise Malformed(where, "is missing")
    return _typed(value, types, where, what)


def _optional(value: object, types: type | tuple[type, ...], where: str, what: str):
    return None if value is None else _typed(value, types, where, what)


def _number(value: object, where: str) -> float:
    if isinstance(value, bool):
        raise Malformed(where, "expected a number", value)
    return float(_typed(value, (int, float), where, "a number"))


def token_count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def billed_tokens(raw: dict) -> tuple[int, int]:
    """(prompt, completion) tokens an answer's ``usage`` object reports (anything that is not a
    count: 0), for billing, invalid answers included."""
    reported = raw.get("usage")
    reported = reported if isinstance(reported, dict) else {}
    return token_count(reported.get("prompt_tokens")) or 0, token_count(reported.get("completion_tokens")) or 0


def _token_bytes(value: object, where: str) -> list[int] | None:
    if value is None:
        return None
    _typed(value, list, where, "a list of bytes")
    if not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in value):
        raise Malformed(where, "expected a list of bytes (0-255)", value)
    return list(value)


def _first_choice(raw: dict) -> dict:
    choices = _required(raw.get("choices"), list, "choices", "a list")
    if not choices:
        raise Malformed("choices", "is empty")
    return _typed(choices[0], dict, "choices[0]", "an object")


def _usage(raw: dict) -> dict:
    usage = raw.get("usage") if isinstance(raw.get("usage"), dict) else {}
    return {k: token_count(usage.get(k)) for k in ("prompt_tokens", "completion_tokens")}


def _by_logprob(top: list[dict]) -> list[dict]:
    return sorted(top, key=lambda e: -e["logprob"])


def _split_generated(generated: list[dict], max_tokens: int, where: str,
                     finish: str | None) -> tuple[list[dict], list[dict]]:
    """The generated entries up to ``max_tokens`` and those past it; at least one must be there
    (when ``max_tokens >= 1``), except in a longer run the model ended at once (``finish``
    ``"stop"``: an end-of-text token that the server does not list, as llama.cpp)."""
    if max_tokens >= 1 and not generated and not (max_tokens > 1 and finish == "stop"):
        raise Malformed(where, f"has no generated token (max_tokens={max_tokens})")
    return generated[:max_tokens], generated[max_tokens:]


def _missing_top(where: str, n_top: int, value: object) -> Malformed:
    return Malformed(where, f"expected at least one of the {n_top} requested alternatives", value)


def _prompt_count(payload: dict, usage: dict, n_entries: int) -> int:
    """How many of ``n_entries`` echoed entries are the prompt: ``usage.prompt_tokens``, else the
    length of a token-id prompt."""
    prompt = payload["prompt"]
    n_prompt = usage["prompt_tokens"] or (len(prompt) if isinstance(prompt, list) else None)
    if n_prompt is None:
        raise Malformed("usage.prompt_tokens", "is missing: the echoed prompt cannot be split off")
    if n_prompt > n_entries:
        raise Malformed("choices[0].logprobs.tokens", f"has {n_entries} entries, fewer than the {n_prompt} "
                                                       "prompt tokens")
    return n_prompt


def _legacy_entries(logprobs: object, payload: dict, usage: dict) -> tuple[list[dict], list[int] | None, int]:
    """Entries of legacy ``logprobs`` {tokens, token_logprobs, top_logprobs, text_offset}, their
    text offsets (``None`` if unusable) and how many of them are the echoed prompt."""
    where = "choices[0].logprobs"
    lp = _required(logprobs, dict, where, "an object")
    tokens = _required(lp.get("tokens"), list, f"{where}.tokens", "a list")
    values = _required(lp.get("token_logprobs"), list, f"{where}.token_logprobs", "a list")
    tops = lp.get("top_logprobs")
    tops = [None] * len(tokens) if tops is None else _typed(tops, list, f"{where}.top_logprobs", "a list")
    if not len(tokens) == len(values) == len(tops):
        raise Malformed(where, f"has tokens ({len(tokens)}), token_logprobs ({len(values)}) and "
                                f"top_logprobs ({len(tops)}) of different lengths")
    n_prompt = _prompt_count(payload, usage, len(tokens)) if payload.get("echo") else 0
    n_top = payload["logprobs"]
    entries = []
    for i, (token, value, top) in enumerate(zip(tokens, values, tops)):
        # the checks' messages name the field; they are formatted only for a value that fails
        listed = {} if top is None else _typed(top, dict, f"{where}.top_logprobs[{i}]", "an object or null")
        if n_top and i >= n_prompt and not listed:
            raise _missing_top(f"{where}.top_logprobs[{i}]", n_top, top)
        if type(token) is not str:
            _typed(token, str, f"{where}.tokens[{i}]", "a string")
        if type(value) is not float and not (i == 0 < n_prompt and value is None):
            # the first echoed token has no conditional: null is its only valid value
            value = _number(value, f"{where}.token_logprobs[{i}]")
        top_entries = []
        for name, listed_value in listed.items():
            if type(listed_value) is not float:
                listed_value = _number(listed_value, f"{where}.top_logprobs[{i}][{name!r}]")
            top_entries.append({"token": name, "bytes": None, "logprob": listed_value})
        entries.append({"token": token, "bytes": None, "logprob": value, "top": _by_logprob(top_entries)})
    offsets = lp.get("text_offset")
    if not (isinstance(offsets, list) and len(offsets) == len(tokens) and all(token_count(o) is not None for o in offsets)):
        offsets = None
    return entries, offsets, n_prompt


def read_completion(raw: dict, payload: dict) -> dict:
    """Validate a decoded ``/v1/completions`` answer (fresh or cached: decoded by
    :func:`decode_answer` or the response cache, so every number is finite) against its request
    body ``payload`` (without ``model``) and normalise it (see the module docstring).

    Returns:
        The dict :meth:`ApiClient.complete` returns, without ``cached``.

    Raises:
        Malformed: naming the first field that fails.
    """
    choice = _first_choice(_typed(raw, dict, "the body", "a JSON object"))
    text = _optional(choice.get("text"), str, "choices[0].text", "a string") or ""
    usage = _usage(raw)
    prompt, echo = payload["prompt"], bool(payload.get("echo"))
    tokens, past, prompt_tokens, offsets, n_prompt = [], [], None, None, 0
    if payload.get("logprobs") is not None:  # asked for: must be there (ignored when not asked for)
        tokens, offsets, n_prompt = _legacy_entries(choice.get("logprobs"), payload, usage)
        if echo:
            prompt_tokens, tokens = tokens[:n_prompt], tokens[n_prompt:]
        tokens, past = _split_generated(tokens, payload["max_tokens"], "choices[0].logprobs.tokens", _finish(choice))
    if echo and isinstance(prompt, str) and text.startswith(prompt):
        text = text[len(prompt):]
    elif echo and offsets is not None:  # cut the echoed prompt at the first generated token
        text = text[offsets[n_prompt]:] if n_prompt < len(offsets) else ""
    result = {"text": text, "tokens": tokens, "past_max_tokens": past, "prompt_tokens": prompt_tokens,
              "finish_reason": _finish(choice), "usage": usage}
    if payload.get("prompt_logprobs") is not None:  # vLLM's field: absent where the server ignores it
        result["prompt_logprobs"] = _prompt_logprobs(choice.get("prompt_logprobs"), payload, usage)
    return result


def _prompt_logprobs(value: object, payload: dict, usage: dict) -> list[list[list] | None] | None:
    """vLLM's ``choices[0].prompt_logprobs`` normalised: ``None`` when absent, else one entry per
    prompt token, ``None`` for the first (no conditional), then ``[[id, logprob, rank], ...]``
    (rank ``None`` when not given), as listed (the prompt's own token and the top k).

    Raises:
        Malformed: not a list of one entry per prompt token, or an entry that is not an object
            of token id → ``{"logprob": number, "rank": int, ...}``.
    """
    if value is None:
        return None
    where = "choices[0].prompt_logprobs"
    entries = _typed(value, list, where, "a list")
    prompt = payload["prompt"]
    n_prompt = len(prompt) if isinstance(prompt, list) else usage["prompt_tokens"]
    if n_prompt is not None and len(entries) != n_prompt:
        raise Malformed(where, f"has {len(entries)} entries for {n_prompt} prompt tokens")
    out: list[list[list] | None] = []
    for i, entry in enumerate(entries):
        if entry is None and i == 0:
            out.append(None)
            continue
        row = _listed_row(entry) if type(entry) is dict else None
        out.append(row if row is not None else _checked_row(entry, f"{where}[{i}]"))
    return out


def _listed_row(listed: dict) -> list[list] | None:
    """One ``prompt_logprobs`` entry as :func:`_prompt_logprobs` gives it, when every key is a
    token id and every item an object with a JSON number ``logprob``; else ``None`` (then
    :func:`_checked_row` names what is wrong). The fast path: the same rows as
    :func:`_checked_row`, without its per-item calls (127-token windows: most of the client's
    validation time)."""
    row = []
    for key, item in listed.items():  # a decoded JSON object's keys are strings
        if type(item) is not dict or not key.isdigit():
            return None
        logprob = item.get("logprob")
        if type(logprob) is not float:
            if type(logprob) is not int:  # bool is neither
                return None
            logprob = float(logprob)
        rank = item.get("rank")
        row.append([int(key), logprob, rank if type(rank) is int and rank >= 0 else None])
    return row


def _checked_row(entry: object, where: str) -> list[list]:
    """One ``prompt_logprobs`` entry, each field checked, as :func:`_prompt_logprobs` gives it.

    Raises:
        Malformed: not an object of token id → ``{"logprob": number, "rank": int, ...}``.
    """
    listed = _typed(entry, dict, where, "an object of token id -> log-prob")
    row = []
    for key, item in listed.items():
        at = f"{where}[{key!r}]"
        if not (isinstance(key, str) and key.isdigit()):
            raise Malformed(at, "expected a token id as key", key)
        item = _typed(item, dict, at, "an object")
        rank = item.get("rank")
        row.append([int(key), _number(item.get("logprob"), f"{at}.logprob"),
                    rank if token_count(rank) is not None else None])
    return row


def read_chat(raw: dict, payload: dict) -> dict:
    """Validate a decoded ``/v1/chat/completions`` answer (fresh or cached, every number finite)
    against its request body ``payload`` (without ``model``) and normalise it, as
    :func:`read_completion`.

    Raises:
        Malformed: naming the first field that fails.
    """
    choice = _first_choice(_typed(raw, dict, "the body", "a JSON object"))
    message = _required(choice.get("message"), dict, "choices[0].message", "an object")
    text = _optional(message.get("content"), str, "choices[0].message.content", "a string") or ""
    tokens, past = [], []
    if payload.get("logprobs"):  # asked for: must be there (ignored when not asked for)
        lp = _required(choice.get("logprobs"), dict, "choices[0].logprobs", "an object")
        items = _required(lp.get("content"), list, "choices[0].logprobs.content", "a list")
        n_top = payload.get("top_logprobs") or 0
        for i, item in enumerate(items):
            where = f"choices[0].logprobs.content[{i}]"
            item = _typed(item, dict, where, "an object")
            top = _optional(item.get("top_logprobs"), list, f"{where}.top_logprobs", "a list") or []
            if n_top and not top:
                raise _missing_top(f"{where}.top_logprobs", n_top, item.get("top_logprobs"))
            tokens.append({
                "token": _required(item.get("token"), str, f"{where}.token", "a string"),
                "bytes": _token_bytes(item.get("bytes"), f"{where}.bytes"),
                "logprob": _number(item.get("logprob"), f"{where}.logprob"),
                "top": _by_logprob([_alternative(t, f"{where}.top_logprobs[{j}]") for j, t in enumerate(top)]),
            })
        tokens, past = _split_generated(tokens, payload["max_tokens"], "choices[0].logprobs.content", _finish(choice))
    return {"text": text, "tokens": tokens, "past_max_tokens": past, "prompt_tokens": None,
            "finish_reason": _finish(choice), "usage": _usage(raw)}


def _alternative(entry: object, where: str) -> dict:
    entry = _typed(entry, dict, where, "an object")
    return {
        "token": _required(entry.get("token"), str, f"{where}.token", "a string"),
        "bytes": _token_bytes(entry.get("bytes"), f"{where}.bytes"),
        "logprob": _number(entry.get("logprob"), f"{where}.logprob"),
    }


def _finish(choice: dict) -> str | None:
    return _optional(choice.get("finish_reason"), str, "choices[0].finish_reason", "a string")
