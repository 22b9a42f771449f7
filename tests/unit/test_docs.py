"""The documentation's own rules (issue 30, items 1 and 8): a README of at most 250 lines whose
test command is the one .ci/run runs, generated figures that the README and the docs pages take
from docs/generated/ unchanged, every command block either run by
tests/integration/test_documented_commands.py or marked with why not, every "next" command the
package prints accounted for, and the figures script's tolerance."""

from __future__ import annotations

import importlib.util
import json
import re
import sys

import pytest

from tests.tools.doc_commands import (
    NOT_RUN,
    PRINTED_NEXT,
    ROOT,
    blocks,
    pages,
    printed_next_commands,
    reduced,
)

README = ROOT / "README.md"
TEST_COMMAND = (
    'python3 -m venv .venv && . .venv/bin/activate && pip install -q torch==2.13.0 && '
    'pip install -q -e ".[local,ja,dev]" && python -m pytest -q'
)
SNIPPET = re.compile(r'^--8<-- "(?P<path>[^"]+)"$', re.M)


def _figures_script():
    spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "scripts" / "docs_figures.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_readme_is_a_short_guide_whose_test_command_ci_runs_word_for_word():
    readme = README.read_text(encoding="utf-8")
    assert len(readme.split("\n")) <= 250
    assert TEST_COMMAND in readme.split("\n")
    assert TEST_COMMAND in (ROOT / ".ci" / "run").read_text().split("\n")


def test_ci_checks_that_the_readmes_generated_block_is_what_its_command_prints():
    figures = _figures_script()
    readme = README.read_text(encoding="utf-8")
    names = {m["name"].removesuffix(".md") for m in figures.GENERATED_BLOCK.finditer(readme)}
    assert names == {"demo"}
    assert "python scripts/docs_figures.py --check --only demo" in (ROOT / ".ci" / "run").read_text().split("\n")


def test_generated_blocks_are_the_generated_files_unchanged():
    figures = _figures_script()
    readme = README.read_text(encoding="utf-8")
    names = [m["name"] for m in figures.GENERATED_BLOCK.finditer(readme)]
    assert names, "README.md has no generated block"
    for match in figures.GENERATED_BLOCK.finditer(readme):
        assert match["body"] == (figures.GENERATED / match["name"]).read_text(), match["name"]
    included = {m["path"] for page in pages() for m in SNIPPET.finditer(page.read_text(encoding="utf-8"))}
    assert included, "no docs page includes a generated file"
    for path in included:
        assert (ROOT / "docs" / path).is_file(), path
    recorded = json.loads(figures.FIGURES_FILE.read_text())
    for name in figures.BLOCKS:
        assert name in recorded and (figures.GENERATED / f"{name}.md").is_file(), name


def test_every_command_block_is_run_or_says_why_not():
    runnable = 0
    for page in pages():
        lines = page.read_text(encoding="utf-8").split("\n")
        for i, line in enumerate(lines):
            if line.startswith("<!-- not run"):
                assert NOT_RUN.match(line), f"{page}:{i + 1}: a not-run marker needs a reason"
                assert i + 1 < len(lines) and lines[i + 1].startswith("```"), f"{page}:{i + 1}: marker not before a fence"
        for block in blocks(page):
            assert block.text.strip(), f"{block.page}:{block.line}: an empty command block"
            runnable += block.not_run is None
    assert runnable >= 8


def test_blocks_read_console_commands_and_reductions_keep_continuations(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- not run: needs a GPU -->\n```console\n$ vllm serve M\n```\n\n"
        "```console\n$ bbmia sweep gsm8k --local X \\\n    --out runs/s\nprinted output\n$ bbmia probe T --port 8000\n```\n"
    )
    found = blocks(page)
    assert [b.not_run for b in found] == ["needs a GPU", None]
    assert found[1].text == "bbmia sweep gsm8k --local X \\\n    --out runs/s\nbbmia probe T --port 8000"
    assert reduced(found[1].text, 1234) == ("bbmia sweep gsm8k --local X --limit 24 \\\n    --out runs/s\n"
                                            "bbmia probe T --port 1234")
    assert reduced("bbmia memorize canary --local $C --json   # note", 1) == (
        "bbmia memorize canary --local $C --limit 24 --json   # note")
    assert reduced("bbmia unlearning F --samples 20 --seed 1", 1) == "bbmia unlearning F --samples 2 --seed 1 --limit 24"
    assert reduced("bbmia sweep gsm8k --limit 4 --local X \\", 1) == "bbmia sweep gsm8k --limit 4 --local X \\"
    # docs/real-model.md: the llama.cpp server's venv and the GGUF's directory, as the test found them
    assert reduced('python -m llama_cpp.server --model "$G" --port 8000 &', 5) == (
        '"$BBMIA_LLAMA_PYTHON" -m llama_cpp.server --model "$G" --port 5 &')
    assert reduced("G=$(bbmia models path smollm2)", 1) == 'G=$(bbmia models path smollm2 --dir "$BBMIA_SMOLLM2_DIR")'


def test_every_printed_next_command_is_run_or_says_why_not():
    assert printed_next_commands() == set(PRINTED_NEXT)
    assert all(reason is None or reason.strip() for reason in PRINTED_NEXT.values())


def test_study_tables_are_the_rendering_of_the_saved_runs():
    """The studies' tables a page includes are exactly what the study's ``markdown`` makes of the
    saved JSON lines (a hand edit of a table, or of the renderer without --render, fails)."""
    figures = _figures_script()
    included = {m["path"] for page in pages() for m in SNIPPET.finditer(page.read_text(encoding="utf-8"))}
    for name in figures.STUDIES:
        saved = figures.saved_study(name)
        assert saved["command"].startswith(f"python -m {figures.STUDIES[name].module} ")
        table = figures.study_table(name, saved["lines"], saved["command"])
        assert (figures.GENERATED / f"{name}.md").read_text() == table, name
        assert f"generated/{name}.md" in included, f"no page includes {name}'s table"


def test_study_tables_hold_the_headline_figures():
    """The renderers put the study's own numbers in the table: the detection-power headline at dup
    8 and the text-only summary, read back from the saved lines."""
    figures = _figures_script()
    power = figures.saved_study("detection_power")["lines"]
    head8 = next(r for r in power if r.get("test") == "tail_combined" and r["dup"] == 8)
    table = (figures.GENERATED / "detection_power.md").read_text()
    assert f"**{head8['power']:.3f} [{head8['power_ci'][0]:.3f}, {head8['power_ci'][1]:.3f}]**" in table
    summary = figures.saved_study("text_only_study")["lines"][-1]
    text = (figures.GENERATED / "text_only_study.md").read_text()
    assert f"`best_text_only_auc_gsm8k_dup16` {summary['best_text_only_auc_gsm8k_dup16']:.3f}" in text


@pytest.mark.parametrize(
    ("old", "new", "differs"),
    [
        ({"auc": {"loss": 0.941}}, {"auc": {"loss": 0.942}}, False),  # the README's drift: within 0.002
        ({"auc": 0.869}, {"auc": 0.750}, True),  # 512-word chunks vs the documented 64
        ({"auc": 0.900}, {"auc": 0.910}, True),  # issue 51: one pair of 20 texts ordered otherwise (5% relative)
        ({"threshold": -3.30}, {"threshold": -3.35}, False),  # beyond ±1: 5% relative
        ({"threshold": -3.30}, {"threshold": -3.60}, True),
        ({"n_flagged": 14}, {"n_flagged": 18}, True),  # counts exactly
        ({"p": 0.017}, {"p": 0.0175}, False),  # 3% relative
        ({"p": 0.017}, {"p": 0.031}, True),
        ({"ci": [0.0, 0.186]}, {"ci": [0.0, 0.186, 1.0]}, True),
        ({"a": 1}, {"a": 1, "b": 2}, True),
    ],
)
def test_figures_tolerance(old, new, differs):
    assert bool(_figures_script().differences(old, new)) is differs


def test_volatile_keys_are_not_figures():
    figures = _figures_script()
    kept = figures.figures_of({"auc": {"loss": 0.9}, "seconds": 14.0, "blackbox": {"requests_per_token": 1.0, "n": 3}})
    assert kept == {"auc": {"loss": 0.9}, "blackbox": {"n": 3}}


def test_every_page_is_in_the_site_navigation():
    """A page outside mkdocs.yml's nav is built but unreachable from the site's menus (mkdocs
    only logs that at INFO level, so --strict does not catch it)."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:", 1)[1]
    listed = set(re.findall(r"[\w./-]+\.md", nav))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")
             if "generated" not in p.parts}
    assert sorted(pages - listed) == []


STALE_DEMO = """```console
$ bbmia demo
scorer      AUC white-box [95% CI] (n=400)  AUC black-box [95% CI] (n=20)
loss        0.941 [0.917, 0.964]            1.000 [1.000, 1.000]
zlib        0.826 [0.788, 0.864]            0.900 [0.740, 1.000]
min_k:k=10  0.975 [0.960, 0.990]            1.000 [1.000, 1.000]
black-box vs white-box: 2920 tokens, max |diff| 5.25e-06 nats (0 upper-bound only), 100.0% within bounds; \
1.00 requests/token, 9.3 s; strategies {'forced': 2447, 'run': 473}
```
"""
"""The demo block as committed before run reading by expected cost (shortened), issue 51."""


def test_check_finds_the_stale_demo_block_of_issue_51_and_passes_batching_noise():
    """What a fresh ``bbmia demo`` printed after run reading by expected cost landed: zlib's
    black-box AUC 0.910 [0.760, 1.000] and strategies {'run': 886, 'forced': 2034} against the
    committed 0.900 [0.740, 1.000] and {'forced': 2447, 'run': 473}. ``--check`` compares the
    figures within the tolerance (0.002 absolute on AUCs and bounds, counts exactly) and the
    block's text with its numbers masked; times and values ~5e-7 apart are not drift."""
    figures = _figures_script()
    recorded = {"auc": {"loss": 0.94125}, "blackbox": {"auc": {"zlib": 0.9}, "max_abs_diff_nats": 5.245e-06,
                                                      "strategies": {"forced": 2447, "run": 473}}}
    noise = json.loads(json.dumps(recorded))
    noise["blackbox"]["max_abs_diff_nats"] += 5e-7
    noise["auc"]["loss"] += 5e-7
    retimed = STALE_DEMO.replace("9.3 s;", "1561.0 s;").replace("5.25e-06", "5.72e-06")
    assert figures.differences(recorded, noise) == [] and figures.block_drift("demo", STALE_DEMO, retimed) == []
    fresh = json.loads(json.dumps(recorded))
    fresh["blackbox"]["auc"]["zlib"], fresh["blackbox"]["strategies"] = 0.91, {"run": 886, "forced": 2034}
    assert figures.differences(recorded, fresh) == [
        ".blackbox.auc.zlib: 0.9 -> 0.91", ".blackbox.strategies.forced: 2447 -> 2034",
        ".blackbox.strategies.run: 473 -> 886"]
    printed = STALE_DEMO.replace("0.900 [0.740, 1.000]", "0.910 [0.760, 1.000]").replace(
        "{'forced': 2447, 'run': 473}", "{'run': 886, 'forced': 2034}")
    [line] = figures.block_drift("demo", STALE_DEMO, printed)  # the zlib line differs in numbers only
    assert line.startswith("demo.md: \"black-box vs white-box: 2920 tokens") and "{'run': 886, 'forced': 2034}" in line
    assert figures.block_drift("demo", STALE_DEMO, STALE_DEMO.replace("AUC black-box", "AUC through the API")) != []
