"""``bbmia serve``: an OpenAI-compatible validation server backed by a local model."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Annotated

import typer

from ..backends.api.http.wire import MAX_LOGPROBS_COMPLETIONS, MAX_TOP_LOGPROBS_CHAT
from ..types import BlackboxMIAError
from .app import app, user_errors


# The options, by concept, as module-level types (the command's signature names them).
# Where it listens and who it answers:
Model = Annotated[str | None, typer.Argument(metavar="MODEL", show_default=False, help="local Hugging Face model "
                                             "(directory or hub name), given first as in 'vllm serve MODEL'")]
ModelOption = Annotated[str | None, typer.Option("--model", hidden=True, help="the model (same as MODEL)")]
Host = Annotated[str, typer.Option(help="interface to bind (anything but loopback exposes the model)")]
Port = Annotated[int, typer.Option(help="TCP port; 0 picks a free one")]
ApiKey = Annotated[str | None, typer.Option("--api-key", envvar="BBMIA_SERVER_KEY", show_envvar=True,
                                            help="bearer token clients must send (never printed)")]
ServedName = Annotated[str | None, typer.Option("--served-name", help="model name clients send (default: MODEL)")]
# What it reports:
LogprobsMode = Annotated[str, typer.Option(
    "--logprobs-mode", help="raw: reported log-probs ignore logit_bias (OpenAI since 2024, vLLM default); "
    "processed: log_softmax(logits + bias) (vLLM processed_logprobs, pre-2024 OpenAI)")]
Echo = Annotated[bool, typer.Option("--echo/--no-echo", help="allow echo + logprobs (prompt log-probs)")]
Logprobs = Annotated[bool, typer.Option("--logprobs/--no-logprobs", help="return log-probs at all")]
MaxLogprobs = Annotated[int, typer.Option("--max-logprobs", help="largest 'logprobs' (top-n) on /v1/completions")]
MaxTopLogprobs = Annotated[int, typer.Option("--max-top-logprobs", help="largest 'top_logprobs' on chat")]
LogprobPrecision = Annotated[str | None, typer.Option(
    "--logprob-precision", help="round reported log-probs to bfloat16, float16 or float32 (as hosted models that "
    "return values like -22.125); default: as computed")]
Nondeterministic = Annotated[float, typer.Option(
    "--nondeterministic", metavar="SIGMA", help="Gaussian noise of SIGMA nats on every logit, drawn afresh per "
    "request (seeded): identical requests get different log-probs, as on servers with batch-dependent kernels; "
    "0 = deterministic")]
JitterSeed = Annotated[int, typer.Option("--jitter-seed", help="seed of the --nondeterministic and --shape-noise noise")]
ShapeNoise = Annotated[float, typer.Option(
    "--shape-noise", metavar="NATS", help="every logit of a generated position moves by up to NATS with the "
    "request's shape (its prompt length; seeded): identical requests agree, a context read inside a longer run "
    "differs, as llama.cpp's batch-dependent quantized kernels; 0 = none")]
# What requests it accepts, and how it reads them:
TokenIdPrompts = Annotated[bool, typer.Option("--token-id-prompts/--no-token-id-prompts",
                                              help="accept completions prompts given as token ids")]
TokenIdRefusalStatus = Annotated[int | None, typer.Option(
    "--token-id-refusal-status", help="HTTP status refusing token-id prompts under --no-token-id-prompts (default "
    "400); 500 emulates a server that fails on them")]
EmptyPartialNames = Annotated[bool, typer.Option(
    "--empty-partial-names",
    help="name tokens that are part of a multi-byte character \"\" (vLLM, OpenAI chat) instead of bytes:\\xNN")]
ZeroMaxTokensUnlimited = Annotated[bool, typer.Option("--zero-max-tokens-unlimited",
                                                      help="max_tokens 0 generates to the end of the context")]
ChatTemplate = Annotated[str | None, typer.Option(
    "--chat-template", help="chat template: 'model' (the tokenizer's own, ChatML when it has none), 'chatml', "
    "'default' (<|user|>...<|assistant|>), or a file: a Jinja chat template or a text with {content}; default: "
    "messages concatenated as is")]
Vllm = Annotated[bool, typer.Option("--vllm", help="answer as vLLM: prompt_logprobs (one request per text), echo "
                                    "built from them, stop_reason, /tokenize adding special tokens by default")]
TextBos = Annotated[bool, typer.Option("--text-bos/--no-text-bos",
                                       help="prepend BOS to text prompts (as vLLM/llama.cpp for Llama models)")]
MaxBodyBytes = Annotated[int | None, typer.Option(
    "--max-body-bytes", help="largest request body in bytes, bigger ones get 413 (default 1 MiB)")]
MaxTokenizeChars = Annotated[int | None, typer.Option(
    "--max-tokenize-chars", help="longest text /tokenize tokenizes, in characters; longer ones get 400 (default 1 Mi)")]
# How it computes:
BatchWindowMs = Annotated[float, typer.Option("--batch-window-ms", help="micro-batching window in ms (0 = off)")]
MaxBatch = Annotated[int, typer.Option("--max-batch", help="most requests per forward pass")]
Device = Annotated[str | None, typer.Option(help="cuda, cpu, ... (default: CUDA when available)")]
Dtype = Annotated[str, typer.Option(help="float32, bfloat16, float16 or auto")]
Threads = Annotated[int | None, typer.Option(
    "--threads", "--cpu-threads", help="torch CPU threads (default: the cores free of load, at most 4)")]


@app.command()
def serve(
    model: Model = None, model_option: ModelOption = None, host: Host = "127.0.0.1", port: Port = 8000,
    api_key: ApiKey = None, served_name: ServedName = None,
    logprobs_mode: LogprobsMode = "raw", echo: Echo = True, logprobs: Logprobs = True,
    max_logprobs: MaxLogprobs = MAX_LOGPROBS_COMPLETIONS, max_top_logprobs: MaxTopLogprobs = MAX_TOP_LOGPROBS_CHAT,
    token_id_prompts: TokenIdPrompts = True, token_id_refusal_status: TokenIdRefusalStatus = None,
    empty_partial_names: EmptyPartialNames = False, zero_max_tokens_unlimited: ZeroMaxTokensUnlimited = False,
    chat_template: ChatTemplate = None, vllm: Vllm = False, text_bos: TextBos = False,
    max_body_bytes: MaxBodyBytes = None, max_tokenize_chars: MaxTokenizeChars = None,
    logprob_precision: LogprobPrecision = None,
    nondeterministic: Nondeterministic = 0.0, jitter_seed: JitterSeed = 0, shape_noise: ShapeNoise = 0.0,
    batch_window_ms: BatchWindowMs = 2.0, max_batch: MaxBatch = 64, device: Device = None, dtype: Dtype = "auto",
    threads: Threads = None,
):
    """Serve a local model behind /v1/completions, /v1/chat/completions, /v1/models, /tokenize.

    Validates the black-box tracker against known white-box log-probs. By default text prompts
    are tokenized without BOS and chat messages are concatenated without a chat template
    (--text-bos and --chat-template emulate servers that do otherwise). Prints the base URL,
    then runs until Ctrl-C or SIGTERM.
    """
    with user_errors():
        from ..emulator import ServerConfig, load_chat_template
        from ..emulator.listen import check_bindable

        config = ServerConfig(
            model=_one_model(model, model_option), host=host, port=port, api_key=api_key, served_name=served_name,
            logprobs_mode=logprobs_mode, echo=echo, logprobs=logprobs,
            max_logprobs_completions=max_logprobs, max_logprobs_chat=max_top_logprobs,
            token_id_prompts=token_id_prompts, empty_partial_names=empty_partial_names,
            zero_max_tokens_unlimited=zero_max_tokens_unlimited,
            chat_template=None if chat_template is None else load_chat_template(chat_template),
            vllm=vllm, text_bos=text_bos, logprob_precision=logprob_precision, nondeterministic=nondeterministic,
            jitter_seed=jitter_seed, shape_noise=shape_noise, batch_window_ms=batch_window_ms, max_batch=max_batch,
            device=device, dtype=dtype, threads=threads,
            **{name: value for name, value in (("token_id_refusal_status", token_id_refusal_status),
                                               ("max_body_bytes", max_body_bytes),
                                               ("max_tokenize_chars", max_tokenize_chars)) if value is not None},
        )
        check_bindable(host, port)  # a busy port fails now, not after the model has loaded
        _warn_if_exposed(host, api_key)
        try:
            asyncio.run(_serve_until_interrupted(config))
        except KeyboardInterrupt:
            typer.echo("stopped", err=True)


def _warn_if_exposed(host: str, api_key: str | None) -> None:
    """A warning on stderr when ``host`` is not a loopback interface (the model is on the network)."""
    from ..emulator import is_loopback

    if not is_loopback(host):
        typer.secho(f"warning: binding {host} exposes the model to the network"
                    + ("" if api_key else "; set --api-key / BBMIA_SERVER_KEY"), fg=typer.colors.YELLOW, err=True)


def _one_model(positional: str | None, option: str | None) -> str:
    """The model to serve, given as ``MODEL`` (as ``vllm serve MODEL``) or ``--model`` (kept).

    Raises:
        BlackboxMIAError: neither, or two different models.
    """
    if positional and option and positional != option:
        raise BlackboxMIAError(f"two models given: {positional!r} and --model {option!r}; give one")
    if not (positional or option):
        raise BlackboxMIAError("the model to serve is missing: give it as bbmia serve MODEL (a directory or hub name)")
    return positional or option


async def _serve_until_interrupted(config) -> None:
    from ..emulator import ValidationServer

    server = ValidationServer(config)
    try:
        base_url = await server.start()
        typer.echo(base_url)
        auth = "bearer key required (not shown)" if config.api_key else "no key required"
        typer.echo(
            f"serving {config.name!r}: logprobs {config.logprobs_mode}, echo {'on' if config.echo else 'off'}, "
            f"logprobs {'on' if config.logprobs else 'off'}"
            + (f", rounded to {config.logprob_precision}" if config.logprob_precision else "")
            + (f", noise σ {config.nondeterministic:g} nats per request" if config.nondeterministic else "")
            + f", {auth}; Ctrl-C or SIGTERM stops",
            err=True,
        )
        stop = asyncio.Event()
        with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows event loops
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        typer.echo("stopped", err=True)
    finally:
        await server.stop()
