"""Helpers for the validation-server tests (tests/unit/test_server*.py): start a server, POST to it,
prompts and top-n of the white-box log-probs. The ``backend``, ``codec``, ``name`` and ``raw_url``
fixtures are in conftest."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np

from blackbox_mia.emulator import ServerConfig, serve_in_background

from .conftest import gsm8k_questions


def _serve(backend, model, **overrides):
    return serve_in_background(ServerConfig(model=model, **overrides), backend)


def post_raw(url: str, path: str, body, key: str | None = None) -> tuple[int, bytes]:
    """POST JSON (or raw bytes) and return (status, raw response body)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def post(url: str, path: str, body, key: str | None = None) -> tuple[int, dict]:
    """POST JSON (or raw bytes) and return (status, decoded JSON body)."""
    status, raw = post_raw(url, path, body, key)
    return status, json.loads(raw)


def prefixes(backend, n: int) -> list[list[int]]:
    """[bos] + the first tokens of GSM8K questions, of varied lengths within the context."""
    return [[backend.bos_id] + backend.encode(q)[: 3 + 4 * i] for i, q in enumerate(gsm8k_questions(n))]


def top(row: np.ndarray, n: int) -> list[int]:
    return [int(i) for i in np.argsort(-row, kind="stable")[:n]]
