"""``bbmia canary train``: train (or reuse) the canary model with planted members (GSM8K, Japanese,
or whole multi-problem documents)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..canary import CORPORA, DEFAULT_CORPUS, DOCUMENTS_CORPUS, CanaryConfig
from .app import app, echo_json_line, messages, user_errors
from .interrupts import INTERRUPTED_EXIT
from .options import with_dataclass_options

canary_app = typer.Typer(
    help="The canary model: a small GPT-2 trained on CPU with known members (planted GSM8K test problems, "
    "Japanese paragraphs with --corpus ja, multi-problem documents with --corpus documents, AQuA problems "
    "with --corpus aqua).",
    no_args_is_help=True,
)
app.add_typer(canary_app, name="canary")

# One command-line option per CanaryConfig field; the defaults come from the dataclass.
FIELD_HELP = {
    "corpus": f"training texts: {DEFAULT_CORPUS} (GSM8K test problems planted among train problems), ja "
    "(ja-debian-docs Japanese paragraphs split into members, non-members and background), "
    f"{DOCUMENTS_CORPUS} (documents of consecutive GSM8K test problems planted whole or in part, for bbmia documents) "
    "or aqua (AQuA test problems with their options planted among GSM8K train problems, for ts_guessing)",
    "n_background": "background items in the corpus (default per corpus: "
    + ", ".join(f"{name} {source.defaults['n_background']} {source.background_noun}" for name, source in CORPORA.items())
    + ")",
    "n_members": f"items planted in the corpus (label 1); {DOCUMENTS_CORPUS}: test documents planted whole "
    "(default per corpus: " + ", ".join(f"{name} {source.defaults['n_members']}" for name, source in CORPORA.items()) + ")",
    "n_nonmembers": f"other items of the same source, never trained on (label 0); {DOCUMENTS_CORPUS}: held-out "
    "test documents (default per corpus: "
    + ", ".join(f"{name} {source.defaults['n_nonmembers']}" for name, source in CORPORA.items()) + ")",
    "dup": f"copies of each member in the corpus; {DOCUMENTS_CORPUS}: the highest level, documents cycle through 1, 2, 4, ... dup",
    "seed": "seed of the splits, corpus order, weights and batches",
    "vocab_size": "BPE vocabulary size (tokens)",
    "n_layer": "transformer layers",
    "n_embd": "embedding width",
    "n_head": "attention heads",
    "block_size": "tokens per training window = model context",
    "epochs": "passes over the corpus (default per corpus: "
    + ", ".join(f"{name} {source.defaults['epochs']}" for name, source in CORPORA.items())
    + ")",
    "lr": "peak AdamW learning rate",
    "batch_size": "windows per step",
    "warmup_frac": "fraction of steps in linear warm-up",
    "min_lr_frac": "final learning rate as a fraction of --lr (cosine decay)",
    "weight_decay": "AdamW weight decay",
    "doc_items": f"{DOCUMENTS_CORPUS} only: consecutive GSM8K test problems per document (default 8)",
    "doc_partial": f"{DOCUMENTS_CORPUS} only: test documents with a quarter, half or three quarters planted (default 12)",
    "doc_validation": f"{DOCUMENTS_CORPUS} only: planted and held-out validation documents, each (default 8)",
    "chat_share": "chat fine-tuning examples per background item (0: a base model): background items cut into a "
    "user's text and the assistant's answer, rendered through ChatML with the client's --chat-template continuation "
    "messages; members stay raw text. Serve with bbmia serve --chat-template model",
}


with_config_options = with_dataclass_options(
    CanaryConfig,
    "config",
    {name: {"help": text, "rich_help_panel": "Canary configuration"} for name, text in FIELD_HELP.items()},
)


@canary_app.command()
@with_config_options
def train(
    out: Path | None = typer.Option(None, "--out", help="model directory (default: <cache>/canary/<config hash>)"),
    force: bool = typer.Option(
        False, "--force", help="retrain from the beginning, even when a complete canary or an interrupted training's checkpoint exists"
    ),
    cache_dir: Path | None = typer.Option(None, "--cache-dir", envvar="BBMIA_CACHE_DIR", help="cache root (default ./cache)"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress bar"),
    json_out: bool = typer.Option(False, "--json", help="make the last line of stdout a JSON summary"),
    *,
    config: CanaryConfig,
):
    """Train the canary model (or reuse a complete one) and print its directory and manifest.

    Interrupted (Ctrl-C, a killed process), training is checkpointed in DIR/checkpoint at every
    epoch's end and every 30 s: the same command resumes from there and trains the very model
    an uninterrupted run would have (--force starts over).

    Score it afterwards with: bbmia score DIR/canary_items.jsonl --local DIR; audit a document
    canary (--corpus documents) with: bbmia documents DIR/documents.jsonl --local DIR
    --calibration DIR/documents_validation.jsonl
    """
    from ..canary import (
        MANIFEST,
        canary_dir,
        ensure_canary,
        load_manifest,
        train_canary,
    )
    from ..canary.checkpoint import CHECKPOINT_SECONDS, checkpoint_dir, saved_progress

    with user_errors():
        config.validate()
        target = out if out is not None else canary_dir(config, cache_dir)
        reused = not force and (target / MANIFEST).is_file()
        log = messages(quiet=False)
        try:
            if force:
                path = train_canary(config, target, progress=not quiet, resume=False, log=log)
            else:
                path = ensure_canary(config, progress=not quiet, out_dir=target, log=log)
        except KeyboardInterrupt:
            saved = saved_progress(target, config)
            typer.secho(
                "interrupted before the first checkpoint: a rerun trains from the beginning" if saved is None else
                f"interrupted: {saved.steps_done} of {saved.steps_per_epoch * config.epochs} steps are saved in "
                f"{checkpoint_dir(target)} (checkpoints at every epoch's end and every {CHECKPOINT_SECONDS:g} s); "
                "rerun the same command to resume from there (--force starts over)",
                err=True,
            )
            raise typer.Exit(INTERRUPTED_EXIT) from None
        manifest = load_manifest(path)
        losses = ", ".join(f"{e['final']:.3f}" for e in manifest["loss_per_epoch"])
        typer.echo(f"canary model: {path}" + (" (already trained, reused; --force retrains)" if reused else ""))
        typer.echo(f"manifest: {path / MANIFEST}")
        typer.echo(
            f"training time: {manifest['train_seconds']:.1f} s, {manifest['n_trained_tokens']} tokens, "
            f"final loss per epoch: {losses} nats/token"
        )
        typer.echo(f"evaluate: bbmia score {path / manifest['items_file']} --local {path}", err=True)
        summary = {"path": str(path), "manifest": str(path / MANIFEST), "train_seconds": manifest["train_seconds"], "reused": reused}
        if "documents_file" in manifest:
            summary.update(documents=str(path / manifest["documents_file"]), validation=str(path / manifest["validation_file"]))
            typer.echo(
                f"audit the documents: bbmia documents {summary['documents']} --local {path} "
                f"--calibration {summary['validation']}",
                err=True,
            )
        if "chat" in manifest:
            context = manifest["chat"]["context_tokens"]
            summary["chat_context_tokens"] = context
            typer.echo(
                f"serve it as a chat model: bbmia serve {path} --chat-template model; audit it with "
                f"--endpoint chat --chat-template continuation --allow-chat-conditional --context-tokens {context} "
                "(the windows its chat examples were cut as)",
                err=True,
            )
        if json_out:
            echo_json_line(summary)
