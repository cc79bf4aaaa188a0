"""The README's trust table quotes BENCHMARKS.md: every number of a trust-table row (its data and result cells) appears
in the BENCHMARKS.md sections the row links to (`[name](BENCHMARKS.md#anchor)`, the marker), so a re-measured figure
cannot stay stale in one file. And BENCHMARKS.md keeps its layout: one `## ` section per benchmark, each with its
command, commit and date, under about 500 lines."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRUST_HEADING = "## How far to trust it"
LINK = re.compile(r"\]\(BENCHMARKS\.md#([a-z0-9-]+)\)")
# A number standing alone: not inside an identifier (H100, a5a1f9e, qwen3), commas as thousands separators
# (10,000 = 10000), a version's dots kept (0.12.0).
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)*")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^a-z0-9 -]", "", heading.strip().lower()).replace(" ", "-")


def sections(markdown: str) -> dict[str, str]:
    """The `## ` sections of a markdown text by anchor, each with its heading and body."""
    parts = re.split(r"^(?=## )", markdown, flags=re.M)
    return {anchor(part.splitlines()[0][3:]): part for part in parts if part.startswith("## ")}


def numbers(text: str) -> set[str]:
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets are not figures
    return {m.group(0).rstrip(",").replace(",", "") for m in NUMBER.finditer(text)}


def trust_rows(readme: str) -> list[list[str]]:
    table = readme.split(TRUST_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows[1:]]  # without the header


def test_every_trust_table_figure_is_in_its_benchmarks_section() -> None:
    readme = (REPO / "README.md").read_text()
    benchmarks = sections((REPO / "BENCHMARKS.md").read_text())
    rows = trust_rows(readme)
    assert rows, "README.md: no trust table"
    for check, *cells in rows:
        linked = LINK.findall(" ".join([check, *cells]))
        assert linked, f"README trust row {check!r}: links no BENCHMARKS.md section"
        unknown = [name for name in linked if name not in benchmarks]
        assert not unknown, f"README trust row {check!r}: no BENCHMARKS.md section {unknown}"
        source = numbers(" ".join(benchmarks[name] for name in linked))
        missing = sorted(numbers(" ".join([check, *cells])) - source)
        assert not missing, f"README trust row {check!r}: {missing} not in BENCHMARKS.md {linked}"


def test_the_check_reads_numbers_as_written() -> None:
    assert numbers("H100 8.0 %, 10,000 requests, 0.12.0, a5a1f9e, -19.1 % (+2.8), [x](BENCHMARKS.md#run-42)") == {
        "8.0", "10000", "0.12.0", "19.1", "2.8"}
    assert anchor("End-to-end judge") == "end-to-end-judge" and anchor("profile-device") == "profile-device"


def test_benchmarks_md_is_one_section_per_benchmark_with_command_commit_and_date() -> None:
    text = (REPO / "BENCHMARKS.md").read_text()
    assert len(text.splitlines()) <= 500
    assert not re.search(r"^#{3,} ", text, flags=re.M), "one `## ` section per benchmark, no sub-sections"
    for name, body in sections(text).items():
        assert "| command |" in body, f"BENCHMARKS.md section {name}: no command row"
        assert re.search(r"20\d\d-\d\d-\d\d", body), f"BENCHMARKS.md section {name}: no date"
    assert "/work/" not in text and "/tmp/" not in text, "commands name no path of one machine"
