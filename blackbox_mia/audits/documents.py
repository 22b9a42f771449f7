"""``bbmia documents``: how much of each document did the model see? (Shi et al. 2024, §5.)

Every document is cut into chunks of N words (or tokens; :mod:`blackbox_mia.text.chunk`), every
chunk is scored once by one scorer (default Min-K%), a threshold is chosen on the chunks of
labelled validation documents (members / non-members: by target FPR, the conformal rule of
:func:`~blackbox_mia.evaluation.calibrate`, or the paper's max-accuracy rule), and each document
gets its contamination rate: the share of its chunks flagged, with a Wilson 95% CI, and the rate
corrected for the threshold's FPR and TPR (Rogan & Gladen 1978) with a bootstrap 95% CI that
carries the uncertainty of the document's share (Jeffreys) and of the FPR and TPR (validation
documents resampled: :class:`~blackbox_mia.evaluation.documents.CalibrationBootstrap`). Documents are ranked (the
paper's Table 2) and their rates drawn as a histogram (their Figure 4); when the documents carry
labels, the AUC of the rate over documents is reported with a bootstrap CI.

Files in the output folder: ``scores.jsonl`` and ``calibration_scores.jsonl`` (the runner's
resumable rows, one per chunk, id ``<doc_id>#<chunk index>``; each with ``.config.json``),
``chunks.jsonl`` (per chunk: doc_id, chunk, start, end, n_units, score, flagged),
``rates.png``, ``documents.json`` and ``documents.md``.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..backends.base import Backend
from ..config import check_number
from ..spend.guard import guard_groups
from ..datasets import Item
from ..datasets.formats import parse_label
from ..datasets.registry import read_jsonl
from ..evaluation import RULES, Threshold, auc, bootstrap_ci, calibrate
from ..evaluation.documents import (
    CalibrationBootstrap,
    document_rate,
    plot_document_rates,
    rank_documents,
)
from ..io import json_line, json_type, write_text_atomic
from ..option_names import named
from ..runner import run_config, score_items
from ..scorers import Scorer, parse_scorer
from ..scorers.bounded import DEFAULT_TOLERANCE_NATS, check_tolerance
from ..text import DEFAULT_SEGMENTER, Segmenter, get_segmenter
from ..text.chunk import (
    Chunk,
    chunk_tokens,
    chunk_words,
    min_chunk_units,
    sample_chunks,
)
from ..tokenizers import TokenCodec
from ..types import BlackboxMIAError
from .common import (
    SCORES_FILE,
    AuditResult,
    Log,
    publish,
    quiet,
    score_column,
)

CALIBRATION_SCORES_FILE = "calibration_scores.jsonl"
CHUNKS_FILE = "chunks.jsonl"
DEFAULT_CHUNK_WORDS = 512  # Shi et al. 2024 §5: 512-word snippets


@dataclass(frozen=True)
class DocumentsConfig:
    """Configuration of one document audit (saved in the report).

    Attributes:
        docs: the documents: a folder of ``.txt`` files (doc_id = file stem) or a JSONL with
            ``doc_id`` and ``text`` (optional ``label``: 1 member, 0 non-member, for the AUC).
        calibration: labelled validation documents, same formats (``label`` required).
        scorer: one scorer spec.
        chunk_words: N words per chunk (of ``segmenter``), or None with ``chunk_tokens``.
        chunk_tokens: N tokens per chunk (of the target's tokenizer), or None.
        segmenter: what a word is (``whitespace``, ``chars``, ``japanese``, ``auto``).
        chunks_per_doc: a seeded sample of at most this many chunks per document (None = all).
        rule: threshold rule, one of ``evaluation.RULES``.
        target_fpr: the FPR asked for by rule ``fpr`` (fraction).
        seed: seed of the chunk sample and of the bootstrap.
        n_boot: bootstrap resamples of the AUC-over-documents CI and of the corrected rates' CIs
            (0: neither CI).
        resume: keep the rows already in the score files (same configuration).
        score_tolerance: nats; a score resting on log-prob means known less precisely is null
            (:meth:`~blackbox_mia.results.ScoredText.from_scores`).
    """

    docs: str
    calibration: str
    scorer: str = "min_k"
    chunk_words: int | None = DEFAULT_CHUNK_WORDS
    chunk_tokens: int | None = None
    segmenter: str = DEFAULT_SEGMENTER
    chunks_per_doc: int | None = None
    rule: str = "fpr"
    target_fpr: float = 0.05
    seed: int = 0
    n_boot: int = 1000
    resume: bool = True
    score_tolerance: float = DEFAULT_TOLERANCE_NATS

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for impossible or contradictory options."""
        check_tolerance(self.score_tolerance)
        if (self.chunk_words is None) == (self.chunk_tokens is None):
            raise BlackboxMIAError(f"choose one chunk size: {named('chunk_words')} or {named('chunk_tokens')}")
        if self.chunk_words is not None:
            check_number(named("chunk_words"), self.chunk_words, at_least=1, integer=True)
        if self.chunk_tokens is not None:
            check_number(named("chunk_tokens"), self.chunk_tokens, at_least=1, integer=True)
        if self.chunks_per_doc is not None:
            check_number(named("chunks_per_doc"), self.chunks_per_doc, at_least=1, integer=True)
        if self.rule not in RULES:
            raise BlackboxMIAError(f"unknown {named('rule')} {self.rule!r}; choose from {', '.join(RULES)}")
        if not 0 < self.target_fpr < 1:
            raise BlackboxMIAError(f"{named('target_fpr')} must be in (0, 1), got {self.target_fpr}")
        check_number(named("seed"), self.seed, at_least=0, integer=True)
        check_number(named("n_boot"), self.n_boot, at_least=0, integer=True)

    @property
    def unit(self) -> str:
        """``"words"`` or ``"tokens"``: what a chunk's size counts."""
        return "words" if self.chunk_words is not None else "tokens"

    @property
    def size(self) -> int:
        """N, units per chunk."""
        return self.chunk_words if self.chunk_words is not None else self.chunk_tokens


@dataclass(frozen=True)
class Document:
    """One document: its id, its text, its label (1 member, 0 non-member, None unknown)."""

    doc_id: str
    text: str
    label: int | None = None


def load_documents(spec: str) -> tuple[list[Document], dict]:
    """The documents of a folder of ``.txt`` files (UTF-8; doc_id = the file's stem, sorted,
    no label) or of a JSONL file (``doc_id``, ``text``, optional ``label``), and their metadata
    ``{"name", "source", "sha256"}`` (sha256 of the file, or of the folder's names and bytes).

    Raises:
        BlackboxMIAError: no such path, a folder without ``.txt`` files, an unreadable file, a
            blank text, a missing or non-string ``doc_id``/``text``, a bad label, a repeated doc_id.
    """
    path = Path(spec).expanduser()
    docs: list[Document] = []
    digest = hashlib.sha256()
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".txt" and p.is_file())
        if not files:
            raise BlackboxMIAError(f"{path}: a documents folder needs .txt files (doc_id = file name without .txt); none there")
        for file in files:
            try:
                data = file.read_bytes()
                text = data.decode("utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise BlackboxMIAError(f"cannot read {file} as UTF-8 text: {exc}") from exc
            digest.update(file.name.encode("utf-8") + b"\0" + data + b"\0")
            docs.append(Document(file.stem, text))
    elif path.is_file():
        for number, obj in read_jsonl(path):
            where = f"{path}:{number}"
            doc_id, text = obj.get("doc_id"), obj.get("text")
            if not isinstance(doc_id, str) or not doc_id:
                raise BlackboxMIAError(f"{where}: 'doc_id' must be a non-empty string, got {doc_id!r}")
            if not isinstance(text, str):
                raise BlackboxMIAError(f"{where}: 'text' must be a string, got {json_type(text)}")
            docs.append(Document(doc_id, text, parse_label(obj.get("label"), where)))
        digest.update(path.read_bytes())
        if not docs:
            raise BlackboxMIAError(f"{path}: no document (every line is blank)")
    else:
        raise BlackboxMIAError(f"no such documents folder or JSONL file: {path}")
    seen: set[str] = set()
    for doc in docs:
        if not doc.text.strip():
            raise BlackboxMIAError(f"{path}: document {doc.doc_id!r} is empty")
        if doc.doc_id in seen:
            raise BlackboxMIAError(f"{path}: doc_id {doc.doc_id!r} repeats; every document needs its own id")
        seen.add(doc.doc_id)
    return docs, {"name": str(spec), "source": str(path), "sha256": digest.hexdigest()}


@dataclass(frozen=True)
class DocumentChunks:
    """One document cut: its chunks before sampling (``n_chunks``) and the sampled ``chunks``."""

    document: Document
    n_chunks: int
    chunks: list[Chunk]

    def items(self) -> list[Item]:
        """The sampled chunks as runner items: id ``<doc_id>#<chunk index>``, the document's label."""
        return [Item(f"{self.document.doc_id}#{c.index}", c.text, self.document.label,
                     {"doc_id": self.document.doc_id, "chunk": c.index}) for c in self.chunks]


def cut_documents(docs: list[Document], config: DocumentsConfig, segmenter: Segmenter | None,
                  codec: TokenCodec | None) -> list[DocumentChunks]:
    """Every document cut into chunks of ``config.size`` words (``segmenter``) or tokens
    (``codec``), then sampled (``config.chunks_per_doc``, seeded by ``config.seed`` and the doc_id).

    Raises:
        BlackboxMIAError: a document without a word; as :func:`~blackbox_mia.text.chunk.chunk_words`
            and :func:`~blackbox_mia.text.chunk.chunk_tokens`.
    """
    out = []
    for doc in docs:
        if config.unit == "words":
            chunks = chunk_words(doc.text, config.size, segmenter)
        else:
            chunks = chunk_tokens(doc.text, config.size, codec)
        if not chunks:
            raise BlackboxMIAError(f"document {doc.doc_id!r} has no {config.unit}")
        out.append(DocumentChunks(doc, len(chunks), sample_chunks(chunks, config.chunks_per_doc, config.seed, doc.doc_id)))
    return out


@dataclass(frozen=True)
class DocumentsPlan:
    """Checked input of :func:`run_documents` (from :func:`prepare_documents`)."""

    config: DocumentsConfig
    scorer: Scorer
    segmenter: Segmenter | None
    docs: list[Document]
    meta: dict
    calibration: list[Document]
    calibration_meta: dict


def prepare_documents(config: DocumentsConfig) -> DocumentsPlan:
    """Check the configuration, load both document sets and (chunks in words) cut them once, so
    that a missing segmenter extra fails before any model is loaded.

    Raises:
        BlackboxMIAError: bad options, unreadable documents, validation documents without a
            label or without both classes, or also among the audited documents (same text).
    """
    config.validate()
    scorer = parse_scorer(config.scorer)
    docs, meta = load_documents(config.docs)
    calibration, cal_meta = load_documents(config.calibration)
    missing = [d.doc_id for d in calibration if d.label is None]
    if missing:
        raise BlackboxMIAError(f"{named('calibration', cal_meta['name'])}: {len(missing)} documents have no label (first: "
                               f"{missing[0]!r}); validation documents need label 1 (member) or 0 (non-member)")
    if {d.label for d in calibration} != {0, 1}:
        raise BlackboxMIAError(f"{named('calibration', cal_meta['name'])} needs member (1) and non-member (0) documents")
    audited = {d.text for d in docs}
    shared = [d.doc_id for d in calibration if d.text in audited]
    if shared:  # a threshold chosen on the audited documents themselves flatters them
        raise BlackboxMIAError(f"{len(shared)} of the {named('calibration')} documents are also audited (first: {shared[0]!r}); "
                               "the threshold must be chosen on other documents: pass the validation set, not the "
                               f"audited documents, as {named('calibration')}")
    segmenter = get_segmenter(config.segmenter) if config.unit == "words" else None
    plan = DocumentsPlan(config, scorer, segmenter, docs, meta, calibration, cal_meta)
    if segmenter is not None:
        cut_documents(docs + calibration, config, segmenter, None)
    return plan


def chunking(config: DocumentsConfig, codec: TokenCodec | None) -> dict:
    """What the chunks depend on (saved with the scores; a resumed file must match it)."""
    return {"unit": config.unit, "size": config.size, "min_tail": min_chunk_units(config.size),
            "segmenter": config.segmenter if config.unit == "words" else None,
            "tokenizer": codec.name if codec is not None else None,
            "chunks_per_doc": config.chunks_per_doc, "seed": config.seed}


def _score(cut: list[DocumentChunks], plan: DocumentsPlan, backends: dict[str, Backend], meta: dict, path: Path,
           codec: TokenCodec | None, progress: bool) -> list[np.ndarray]:
    """Scores of every sampled chunk, per document (runner rows in ``path``, resumable)."""
    items = [it for d in cut for it in d.items()]
    dataset = {**meta, "chunking": chunking(plan.config, codec)}
    cfg = run_config([plan.scorer], backends, dataset, plan.config.score_tolerance)
    rows = score_items(items, [plan.scorer], backends, path, cfg, resume=plan.config.resume, progress=progress)
    scores = score_column(rows, plan.scorer.label)
    bounds = np.cumsum([0] + [len(d.chunks) for d in cut])
    return [scores[bounds[i] : bounds[i + 1]] for i in range(len(cut))]


def chunk_groups(plan: DocumentsPlan, target: Backend) -> dict[str, list[Item]]:
    """The sampled chunks :func:`run_documents` scores, as runner items per group:
    ``{"documents": ..., "calibration": ...}`` (chunks in tokens are cut with ``target``'s
    tokenizer). Sends nothing: what a ``--dry-run`` estimates.

    Raises:
        BlackboxMIAError: as :func:`cut_documents`.
    """
    codec = target.codec if plan.config.unit == "tokens" else None
    return as_groups(cut_documents(plan.docs, plan.config, plan.segmenter, codec),
                     cut_documents(plan.calibration, plan.config, plan.segmenter, codec))


def as_groups(cut: list[DocumentChunks], cal_cut: list[DocumentChunks]) -> dict[str, list[Item]]:
    """The cut documents and validation documents as :func:`chunk_groups`' runner items."""
    return {name: [it for d in docs for it in d.items()] for name, docs in (("documents", cut), ("calibration", cal_cut))}


def run_documents(plan: DocumentsPlan, backends: dict[str, Backend], out_dir: Path, progress: bool = True,
                  log: Log = quiet, yes: bool = False) -> AuditResult:
    """Cut, score, calibrate on the validation chunks, rate every document and report (see the
    module docstring). Before the first request, the run's estimate (:func:`chunk_groups`, what
    ``--dry-run`` prints) goes through the spend guard
    (:func:`~blackbox_mia.spend.guard.guard_spend`): ``yes=True``, or a backend with
    ``max_cost=``, lets a run above it proceed.

    Returns:
        The :class:`AuditResult`; its summary holds ``documents`` (ranked, most contaminated
        first: doc_id, n_chunks, n_scored, n_flagged, rate, rate_ci, corrected, corrected_ci, mean_score,
        label when given), ``threshold`` (score units; null when -inf), ``threshold_realised_fpr``
        (also as ``threshold_fpr`` for one release), ``threshold_tpr`` (on the validation chunks),
        ``auc_documents`` and its CI (null without both labels among the documents),
        ``n_documents``, ``n_chunks``.

    Raises:
        SpendRefused: the estimate exceeds the spend guard, neither ``yes`` nor a cap given.
        BlackboxMIAError: the scorer cannot run on the target, non-finite scores, a resumed
            scores file of another configuration.
    """
    config, out_dir = plan.config, Path(out_dir)
    codec = backends["target"].codec if config.unit == "tokens" else None
    cut = cut_documents(plan.docs, config, plan.segmenter, codec)
    cal_cut = cut_documents(plan.calibration, config, plan.segmenter, codec)
    guard_groups(as_groups(cut, cal_cut), [plan.scorer], backends, yes)
    n_chunks, n_cal = sum(len(d.chunks) for d in cut), sum(len(d.chunks) for d in cal_cut)
    log(f"scoring {n_chunks} chunks of {len(cut)} documents and {n_cal} validation chunks with {plan.scorer.label}")
    scores = _score(cut, plan, backends, plan.meta, out_dir / SCORES_FILE, codec, progress)
    cal_scores = _score(cal_cut, plan, backends, plan.calibration_meta, out_dir / CALIBRATION_SCORES_FILE, codec, progress)
    labels = np.concatenate([np.full(len(d.chunks), d.document.label) for d in cal_cut])
    pooled = np.concatenate(cal_scores)
    threshold = calibrate(pooled[labels == 0], pooled[labels == 1], config.rule, config.target_fpr)
    boot = None
    if config.n_boot:
        boot = CalibrationBootstrap([int(threshold.flag(s).sum()) for s in cal_scores], [s.size for s in cal_scores],
                                    [d.document.label for d in cal_cut], config.n_boot, config.seed)
    rows = rank_documents([document_rate(d.document.doc_id, d.n_chunks, s, threshold, d.document.label, boot)
                           for d, s in zip(cut, scores)])
    _write_chunks(out_dir / CHUNKS_FILE, cut, scores, threshold)
    auc_docs, auc_ci = _auc_over_documents(rows, config)
    plot = plot_document_rates(rows, out_dir / "rates.png", f"{plan.meta['name']}: {plan.scorer.label}")
    notes = _notes(config, threshold, n_cal, auc_docs)
    report = {
        "title": f"Document contamination: {plan.meta['name']}",
        "config": {**run_config([plan.scorer], backends, plan.meta, config.score_tolerance),
                   "documents": asdict(config),
                   "calibration": plan.calibration_meta, "chunking": chunking(config, codec),
                   "n_documents": len(cut), "n_chunks": n_chunks, "n_calibration_chunks": n_cal,
                   "seeds": {"chunk_sample": config.seed, "bootstrap": config.seed},
                   "scores_file": SCORES_FILE, "chunks_file": CHUNKS_FILE},
        "threshold": threshold.to_dict(),
        "auc_documents": {"auc": auc_docs, "ci": auc_ci},
        "plots": {"Contamination rate per document": plot},
        "notes": notes,
        "documents": rows,
    }
    summary = {"documents": rows, "threshold": threshold.value, "threshold_rule": threshold.rule,
               "threshold_realised_fpr": threshold.realised_fpr, "threshold_tpr": threshold.tpr, "auc_documents": auc_docs,
               "auc_documents_ci": auc_ci, "n_documents": len(cut), "n_chunks": n_chunks}
    return publish(report, summary, out_dir, "documents", appendix=_ranked_table(rows), hidden=("documents",),
                   warnings=[threshold.note] if threshold.note else [])


def _write_chunks(path: Path, cut: list[DocumentChunks], scores: list[np.ndarray], threshold: Threshold) -> None:
    """``chunks.jsonl``: one row per scored chunk (doc_id, chunk, start, end, n_units, score, flagged)."""
    lines = []
    for doc, doc_scores in zip(cut, scores):
        for chunk, score in zip(doc.chunks, doc_scores):
            row = {"doc_id": doc.document.doc_id, "chunk": chunk.index, "start": chunk.start, "end": chunk.end,
                   "n_units": chunk.n_units, "score": float(score), "flagged": bool(score > threshold.value)}
            lines.append(json_line(row, f"chunk {doc.document.doc_id!r} #{chunk.index}"))
    write_text_atomic(path, "".join(lines))


def _auc_over_documents(rows: list[dict], config: DocumentsConfig) -> tuple[float | None, list[float] | None]:
    """AUC of the documents' rates against their labels, with a stratified bootstrap CI
    (None, None without labels of both classes)."""
    labelled = [r for r in rows if "label" in r]
    labels = [r["label"] for r in labelled]
    if len(labelled) != len(rows) or set(labels) != {0, 1}:
        return None, None
    rates = [r["rate"] for r in labelled]
    ci = list(bootstrap_ci(labels, rates, "auc", config.n_boot, seed=config.seed)) if config.n_boot else None
    return auc(labels, rates), ci


def _notes(config: DocumentsConfig, threshold: Threshold, n_cal: int, auc_docs: float | None) -> list[str]:
    """The report's notes: chunking, the threshold, the rates' CIs and corrections."""
    rule = (f"target FPR {config.target_fpr:g} (split-conformal quantile of the non-member chunks)"
            if config.rule == "fpr" else f"rule {config.rule} (optimistic on the set it was chosen on)")
    tpr = "unknown" if threshold.tpr is None else f"{threshold.tpr:.3f}"
    notes = [
        (f"Chunks of {config.size} {config.unit}" + (f" (segmenter {config.segmenter})" if config.unit == "words" else "")
         + f"; a last chunk shorter than {min_chunk_units(config.size)} {config.unit} is merged into the one before; "
         + ("all chunks scored." if config.chunks_per_doc is None else
            f"at most {config.chunks_per_doc} chunks per document sampled (seed {config.seed}).")),
        (f"Threshold chosen on {n_cal} validation chunks by {rule}: realised FPR {threshold.realised_fpr:.3f}, TPR {tpr}; "
         "a chunk is flagged when its score > threshold."),
        ("Rate = share of a document's scored chunks flagged, with a Wilson 95% CI; corrected = "
         "(rate − FPR)/(TPR − FPR) clipped to [0, 1] (Rogan & Gladen 1978), FPR and TPR of the validation chunks"
         + ("." if not config.n_boot else
            f", with a percentile bootstrap 95% CI ({config.n_boot} resamples): the document's share drawn from "
            "its Jeffreys Beta(k + ½, n − k + ½), "
            "and the validation documents resampled within each label for the FPR and TPR. The TPR is that of "
            "the validation members' chunks: a document seen less often than they were is under-corrected.")),
    ]
    if threshold.note:
        notes.append(threshold.note)
    if auc_docs is not None:
        notes.append("AUC over documents: the rate as a membership score of the labelled documents, "
                     "stratified bootstrap 95% CI.")
    return notes


def _ranked_table(rows: list[dict]) -> str:
    """Markdown table of the documents, most contaminated first (Shi et al. 2024, Table 2)."""
    lines = ["## Documents, most contaminated first", "",
             "| rank | doc_id | label | chunks scored | flagged | rate [95% CI] | corrected [95% CI] |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for rank, r in enumerate(rows, 1):
        lo, hi = r["rate_ci"]
        corrected = "-" if r["corrected"] is None else f"{r['corrected']:.3f}"
        if r["corrected_ci"] is not None:
            corrected += " [{:.3f}, {:.3f}]".format(*r["corrected_ci"])
        doc_id = r["doc_id"].replace("|", "\\|")
        lines.append(f"| {rank} | {doc_id} | {r.get('label', '-')} | {r['n_scored']} of {r['n_chunks']} | "
                     f"{r['n_flagged']} | {r['rate']:.3f} [{lo:.3f}, {hi:.3f}] | {corrected} |")
    return "\n".join(lines) + "\n"
