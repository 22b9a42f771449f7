"""One next-token question to an OpenAI-compatible endpoint, in token ids.

:class:`Endpoint` hides the difference between ``/v1/completions`` and ``/v1/chat/completions``
and between token-id and text prompts, and maps the token names the server returns back to ids
of the target tokenizer. The tracker and the capability probe talk only to it.

Token identity is a set of candidate ids, never a guess: an entry with ``bytes`` maps to the ids
with exactly those bytes; a name maps to the ids with that name and, unless the probe saw the
server name partial tokens exactly (``bytes:\\x..``), to every partial token a lossy naming gives
that name (llama-cpp-python names a space plus a lead byte ``" "``, like the space:
:attr:`~blackbox_mia.tokenizers.TokenCodec.lossy_names`); a name that is empty maps to every
partial token; a name the tokenizer does not know maps to ``None``, meaning "any token".

Legacy completions return ``top_logprobs`` as a dict keyed by name, so ids that share a name
share one entry, whose value may be any of theirs (llama-cpp-python keeps the lowest-ranked):
a candidate of a shared entry may hide above it, up to the largest listed value
(:meth:`NextToken.ambiguous`).

No request biases a token upward whose bytes end inside a character
(:func:`~blackbox_mia.tokenizers.base.ends_open`) unless the probe found that the server stops
at ``max_tokens`` even then (:attr:`Endpoint.open_bias`): llama-cpp-python keeps generating
while its output ends mid-character, and a bias that keeps favouring such a token runs it to
the end of its context, where it aborts. The one exception is :meth:`Endpoint.spell`, on servers
that honour a GBNF grammar (:attr:`Endpoint.grammar`): its grammar ends the output on a character.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...option_names import marked
from ...tokenizers import TokenCodec
from ...tokenizers.base import BYTES_PREFIX
from ...types import BlackboxMIAError
from .http.client import ApiClient
from .http.dialect import dialect_named
from .http.errors import ApiError, Fault
from .http.grammar import spelling_grammar

Candidates = frozenset[int] | None  # ids an entry may denote; None: unknown (any id)
ECHO = "echo"  # prompt log-probs from echo + logprobs (OpenAI's legacy completions)
PROMPT_LOGPROBS = "prompt_logprobs"  # prompt log-probs from vLLM's request field of that name


def may_be(ids: Candidates, token_id: int) -> bool:
    """Whether an entry with candidate ``ids`` may denote ``token_id``."""
    return ids is None or token_id in ids


def surely(ids: Candidates, token_id: int) -> bool:
    """Whether an entry with candidate ``ids`` denotes ``token_id`` and nothing else."""
    return ids is not None and ids == {token_id}


@dataclass(frozen=True)
class Listed:
    """One returned (token, log-prob) pair: candidate ids for the entry, log-prob in nats."""

    ids: Candidates
    logprob: float


@dataclass(frozen=True)
class NextToken:
    """The answer to one ``max_tokens = 1`` request at temperature 0.

    Attributes:
        sampled: candidate ids of the sampled (greedy) token (``None``: unknown).
        sampled_logprob: the log-prob the server reported for it (nats).
        top: the top-n list as returned (may hold the sampled token as an extra entry).
    """

    sampled: Candidates
    sampled_logprob: float
    top: tuple[Listed, ...]

    def find(self, token_id: int) -> float | None:
        """Reported log-prob of ``token_id`` when an entry denotes it for sure, else None."""
        for entry in self.top:
            if surely(entry.ids, token_id):
                return entry.logprob
        return None

    def ambiguous(self, token_id: int) -> float | None:
        """An upper bound (nats) on ``token_id``'s log-prob when an entry may, but need not, be it
        (None if none): the entry's value, or, for an entry several ids share, the largest listed
        value (a dict of names keeps one value per name: the others hide above it)."""
        values = [self.top_logprob if e.ids is None or len(e.ids) > 1 else e.logprob
                  for e in self.top if not surely(e.ids, token_id) and may_be(e.ids, token_id)]
        return max(values, default=None)

    @property
    def top_logprob(self) -> float:
        """The largest listed log-prob (the argmax's, when no bias was sent); the sampled
        token's when nothing is listed."""
        return max((e.logprob for e in self.top), default=self.sampled_logprob)


def with_bos(codec: TokenCodec, ids: Sequence[int], token_id_prompts: bool) -> list[int]:
    """The ids a request sends for a text's token ids: BOS first when ``codec`` has one and
    prompts go as ids (a text prompt is decoded, so a BOS would reach the model as its text)."""
    ids = [int(i) for i in ids]
    if codec.bos_id is not None and token_id_prompts:
        return [codec.bos_id] + ids
    return ids


class Endpoint:
    """Next-token and prompt-log-prob requests for prefixes given as token ids.

    Args:
        client: the async API client (cache, retries, limits, usage).
        codec: the target model's tokenizer.
        kind: ``"completions"`` or ``"chat"``: picks the :class:`~.dialect.Dialect`.
        token_id_prompts: send prompts as id lists (where the dialect can); otherwise as text.

    Attributes:
        client, codec: as given.
        dialect: the endpoint kind's dialect.
        token_id_prompts: whether prompts go as id lists (the probe sets it to what the server
            accepts).
        exact_names: the server names partial tokens exactly (the probe saw ``bytes:`` names), so
            names are looked up without lossy namings; False (the default) until the probe says so.
        partial_names_rendered: answers' entries named ``bytes:\\x..`` seen so far: evidence
            that the server names partial tokens exactly (the probe sets :attr:`exact_names`).
        open_bias: a positive bias may go on a token whose bytes end inside a character (the
            probe saw the server stop at ``max_tokens`` with such output); False (the default)
            until the probe says so: :meth:`may_bias` is False for such tokens and
            :meth:`next_tokens` refuses to send them.
        grammar: the server honours a GBNF ``grammar`` field without changing the log-probs it
            reports (the probe checked it), so :meth:`spell` may run; False until the probe says so.

    Raises:
        BlackboxMIAError: an unknown ``kind``, or a chat template (``client.config``) that
            cannot be loaded.
    """

    def __init__(self, client: ApiClient, codec: TokenCodec, kind: str, token_id_prompts: bool):
        self.dialect = dialect_named(kind, client.config.chat_template)
        self.client = client
        self.codec = codec
        self.token_id_prompts = token_id_prompts and self.dialect.token_id_prompts
        self.exact_names = False
        self.open_bias = False
        self.grammar = False
        self.partial_names_rendered = 0
        self.answered = 0  # requests answered through :meth:`_ask` (fresh or cached)

    @property
    def kind(self) -> str:
        """The endpoint kind: ``"completions"`` or ``"chat"``."""
        return self.dialect.name

    def sendable(self, prefix: Sequence[int]) -> bool:
        """Whether ``prefix`` reaches the model as exactly these tokens: always with token-id
        prompts; as text only when it decodes to whole characters that re-tokenize to ``prefix``."""
        if self.token_id_prompts:
            return True
        raw = b"".join(self.codec.token_bytes(i) for i in prefix)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:  # the prefix ends (or breaks) inside a character
            return False
        return self.codec.encode(text) == list(prefix)

    def may_bias(self, token_id: int) -> bool:
        """Whether a request may bias ``token_id`` upward (see :attr:`open_bias`)."""
        return self.open_bias or token_id not in self.codec.open_ids

    def _prompt(self, prefix: Sequence[int]) -> list[int] | str:
        if self.token_id_prompts:
            return list(map(int, prefix))
        return self.codec.decode(prefix)

    def candidates(self, entry: dict) -> Candidates:
        """Candidate ids of one returned entry (see the module docstring)."""
        name = entry["token"]
        if name.startswith(BYTES_PREFIX):
            self.partial_names_rendered += 1
        ids = self.codec.lookup(name, entry.get("bytes"), lossy=not self.exact_names)
        if ids:
            return frozenset(ids)
        if entry["token"] == "" and entry.get("bytes") is None:
            return self.codec.partial_ids
        return None

    async def next_token(
        self, prefix: Sequence[int], top_n: int, bias: dict[int, float] | None = None, attempts: int | None = None
    ) -> NextToken:
        """Greedy next token after ``prefix`` (temperature 0, one token), with top-``top_n`` log-probs
        (``top_n = 0``: the sampled token and its log-prob only); ``attempts``: as
        :meth:`ApiClient.request`.

        The client validates every answer, so a sampled token with a finite log-prob is present.

        Raises:
            ApiError: the request failed or the answer stayed invalid (see the client).
        """
        return (await self.next_tokens(prefix, 1, top_n, bias, attempts))[0]

    async def next_tokens(
        self, prefix: Sequence[int], k: int, top_n: int, bias: dict[int, float] | None = None,
        attempts: int | None = None,
    ) -> list[NextToken]:
        """The greedy continuation of ``prefix`` (temperature 0, up to ``k`` tokens), one answer
        per generated token: answer ``j`` is the next-token answer after ``prefix`` + the ``j``
        tokens generated before it (what the server reports there; the probe checks that it is
        that conditional before the tracker relies on it). Fewer than ``k`` when generation
        stops early (an end-of-text token). ``attempts``: as :meth:`ApiClient.request`.

        Raises:
            ApiError: the request failed or the answer stayed invalid (see the client).
            BlackboxMIAError: ``bias`` favours a token that :meth:`may_bias` forbids (nothing is
                sent: a tracker bug, not a server fault).
        """
        unsafe = [t for t, b in (bias or {}).items() if b > 0 and not self.may_bias(t)]
        if unsafe:
            raise BlackboxMIAError(
                f"refused to send a request biasing token {unsafe[0]} upward: its bytes end inside a character, and "
                "this server was not shown to stop at max_tokens then (it could generate to the end of its context)"
            )
        result = await self._ask(prefix, attempts=attempts, max_tokens=k, temperature=0.0, top_n=top_n, bias=bias)
        return [self._answer(entry) for entry in result["tokens"]]

    async def spell(self, prefix: Sequence[int], tokens: Sequence[int], bias: float) -> tuple[list[NextToken], str]:
        """The greedy continuation of ``prefix`` under a grammar that admits exactly the text of
        ``tokens`` (whole characters) and then printable ASCII, with ``bias`` nats on each of
        ``tokens``: ``max_tokens = len(tokens)``, temperature 0, the sampled token's log-prob per
        position (``bias`` 0: none sent). Safe for tokens that end inside a character where the
        server honours the grammar: after the spelled characters every token ends on one, so
        the server stops at ``max_tokens``.

        Returns:
            One answer per generated token (those past ``max_tokens`` too) and the generated text.

        Raises:
            BlackboxMIAError: ``tokens`` are not whole characters, or a positive ``bias`` would
                favour a token that ends inside a character while :attr:`grammar` is off
                (nothing is sent).
            ApiError: the request failed or the answer stayed invalid (see the client).
        """
        try:
            text = b"".join(self.codec.token_bytes(t) for t in tokens).decode("utf-8")
        except UnicodeDecodeError:
            raise BlackboxMIAError(f"refused to spell tokens {list(tokens)}: they are not whole characters") from None
        if bias > 0 and not self.grammar and any(t in self.codec.open_ids for t in tokens):
            raise BlackboxMIAError(f"refused to send a request biasing tokens {list(tokens)} upward: one ends inside "
                                   "a character, and this server was not shown to honour a grammar")
        result = await self._ask(prefix, max_tokens=len(tokens), temperature=0.0, top_n=1,
                                 bias={t: bias for t in tokens} if bias else None,
                                 extra={"grammar": spelling_grammar(text)})
        return [self._answer(entry) for entry in result["tokens"] + result["past_max_tokens"]], result["text"]

    async def counted_tokens(self, prefix: Sequence[int]) -> int | None:
        """How many tokens the server counts in ``prefix`` as this endpoint sends it
        (``usage.prompt_tokens`` of a one-token greedy request without log-probs); ``None`` when
        its answer reports no usage.

        Raises:
            ApiError: the request failed (see the client).
        """
        return (await self._ask(prefix, max_tokens=1, temperature=0.0, top_n=None))["usage"]["prompt_tokens"]

    async def _ask(self, prompt: Sequence[int], **options) -> dict:
        """``client.request`` for the prompt whose token ids are ``prompt``. A failure that
        outlasted the retries (``"transient"``: the server went away, timed out or kept
        answering 5xx) after earlier requests were answered is raised again naming the request's
        pattern (what a server that dies mid-run died on), and that the answers so far are
        cached, as the same exception type.

        Raises:
            ApiError: as the client raises it (see :meth:`ApiClient.request`).
        """
        try:
            answer = await self.client.request(self.dialect, self._prompt(prompt), **options)
        except ApiError as exc:
            if not exc.fault.outage or exc.fault.answered or not self.answered:  # answering, or never did
                raise
            bias = options.get("bias") or {}
            upward = [t for t, b in bias.items() if b > 0]
            pattern = (f"{len(prompt)} prompt tokens, max_tokens {options['max_tokens']}, "
                       f"{len(upward)} token(s) biased upward ({sum(t in self.codec.open_ids for t in upward)} ending "
                       f"inside a character), {len(bias) - len(upward)} downward"
                       + (", a grammar" if "grammar" in (options.get("extra") or {}) else "")
                       + (", echo" if options.get("echo") else ""))
            raise type(exc)(exc.status_code, f"{marked(exc)}. The server stopped answering during a request of this pattern: "
                                             f"{pattern}. Answers so far are cached (a rerun resumes)",
                            exc.fault, exc.detail) from exc
        self.answered += 1
        return answer

    def _answer(self, entry: dict) -> NextToken:
        """One generated entry as a :class:`NextToken` (the sampled token listed too)."""
        sampled, value = self.candidates(entry), float(entry["logprob"])
        top = tuple(Listed(self.candidates(e), float(e["logprob"])) for e in entry.get("top") or [])
        if not any(e.ids == sampled and e.logprob == value for e in top):
            top = top + (Listed(sampled, value),)
        return NextToken(sampled, value, top)

    async def generate(
        self,
        prompt: Sequence[int],
        max_new_tokens: int,
        temperature: float = 0.0,
        seed: int | None = None,
        top_n: int | None = 0,
    ) -> dict:
        """One generation request: up to ``max_new_tokens`` tokens after the text whose token ids
        are ``prompt`` (BOS is added as for the tracker's requests, see :func:`with_bos`).

        Completions send the ids (or, without token-id prompts, the decoded text); chat sends the
        decoded text as the user message.

        Args:
            prompt: the prompt text's token ids (no BOS).
            max_new_tokens: most tokens to generate (≥ 1).
            temperature: sampling temperature (0: greedy).
            seed: sent as the body's ``seed`` when given (sampling reproducible where the server
                honours it); part of the cache key.
            top_n: alternatives per generated token with their log-probs (0: the chosen token's
                log-prob only); ``None``: no log-probs.

        Returns:
            The client's validated answer: ``{"text", "tokens", "finish_reason", "usage",
            "cached", ...}`` (see :meth:`ApiClient.complete`; ``tokens`` is ``[]`` without
            log-probs).

        Raises:
            ApiError: invalid arguments, or the request failed or stayed invalid (see the client).
        """
        return await self._ask(with_bos(self.codec, prompt, self.token_id_prompts), max_tokens=max_new_tokens,
                               temperature=temperature, top_n=top_n, extra=None if seed is None else {"seed": seed})

    async def prompt_logprobs(
        self, ids: Sequence[int], top_n: int = 1, form: str = ECHO, bias: dict[int, float] | None = None
    ) -> tuple[list[float | None], NextToken]:
        """Log-probs of every prompt token (entry 0 has no conditional: None), and the answer for
        the position after the prompt (the one generated token), from one request.

        ``max_tokens = 1``, never 0: some servers read 0 as "unlimited".

        Args:
            ids: the prompt's token ids.
            top_n: alternatives asked for the generated position.
            form: :data:`ECHO` (``echo`` + ``logprobs``: the prompt's entries in the legacy
                ``logprobs``) or :data:`PROMPT_LOGPROBS` (vLLM's ``prompt_logprobs: 0``: per
                position the prompt token's id → log-prob, so identity is by id, not by name).
            bias: logit bias (nats by token id) on the generated position only (a forced
                read-out of the token after the prompt, in the same request); prompt positions'
                log-probs stay the model's own (tests check them against the white-box model).

        Raises:
            ApiError: the dialect has no echo (final), the server does not return
                ``prompt_logprobs`` (final), the request failed or the answer stayed invalid.
            ApiError: (fault ``"invalid"``) ``prompt_logprobs`` without one entry per prompt token,
                or an entry without the prompt's own token.
            BlackboxMIAError: echo without one entry per prompt token.
        """
        if form == PROMPT_LOGPROBS:
            result = await self._ask(ids, max_tokens=1, temperature=0.0, top_n=top_n, bias=bias,
                                      extra={PROMPT_LOGPROBS: 0})
            values = self._own_values(ids, result.get(PROMPT_LOGPROBS))
        else:
            result = await self._ask(ids, max_tokens=1, temperature=0.0, top_n=top_n, bias=bias, echo=True)
            echoed = result.get("prompt_tokens")
            if not echoed or len(echoed) != len(ids):
                raise BlackboxMIAError(
                    f"echo returned {len(echoed or [])} prompt log-probs for {len(ids)} prompt tokens"
                )
            values = [None if e.get("logprob") is None else float(e["logprob"]) for e in echoed]
        return values, self._answer(result["tokens"][0])

    def _own_values(self, ids: Sequence[int], rows: list | None) -> list[float | None]:
        """Each prompt token's own log-prob from normalised ``prompt_logprobs`` rows (see
        :func:`~.answers.read_completion`), found by its id."""
        if rows is None:
            raise ApiError(None, f"{self.client.url} does not return prompt_logprobs "
                                 "(not a vLLM server, or an old one)", Fault.FINAL)
        if len(rows) != len(ids):
            raise ApiError(None, f"prompt_logprobs has {len(rows)} entries for {len(ids)} prompt tokens", Fault.INVALID)
        values: list[float | None] = [None]
        for j in range(1, len(ids)):
            want = ids[j]
            for token, value, _ in rows[j] or ():
                if token == want:
                    values.append(value)
                    break
            else:
                raise ApiError(None, f"prompt_logprobs entry {j} does not list the prompt's token id {want}", Fault.INVALID)
        return values
