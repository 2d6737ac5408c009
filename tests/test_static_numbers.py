"""Numbers in prose come from a source that a rerun cannot change.

A notebook's markdown and the README may quote the paper, a setting of a profile, or the shipped
reference (``data/reference/card.json``); the README may also quote a measurement recorded in
``docs/results.md`` (with its machine and command). A number about a notebook's own live run
(steps trained, an accuracy, seconds) differs on the next machine, so the notebooks render it
from the run's outputs in a code cell instead. Every number in prose is looked up in those
sources; one found nowhere fails the test, with the file, cell and line.
"""

from __future__ import annotations

import functools
import json
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CARD = ROOT / "data" / "reference" / "card.json"
RESULTS = ROOT / "docs" / "results.md"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

#: The paper's numbers that the prose quotes (VSearcher, sections and appendix as named).
PAPER = {
    "2.1", "2.2", "2.3", "2.4", "3.1", "3.2",  # section numbers
    "1,301", "1,308",  # SFT trajectories (A.4; section 3)
    "20,480",  # SFT cutoff in tokens (A.4)
    "0.6", "0.95", "2.5",  # teacher temperature, top-p, hours per trajectory (A.3)
    "283", "20",  # MM-SearchExam questions; proprietary models score about 20 (section 3.2)
    "47.2", "19.3", "39.1", "4.4", "23.8",  # table 1: VSearcher-8B, its base, Gemini-3-Pro
    "32", "2e-6", "28",  # GRPO batch, learning rate, response budget in K tokens (A.4)
    "30",  # tool calls per episode (A.3, A.4)
    "0.2",  # PPO's clipping range (section 2.3)
    "150", "60",  # live seed query: rows, and the query service's limit in seconds (A.2)
}
#: A number standing next to a letter or inside code is a name or a setting, not a quantity
#: (``Qwen3-VL-8B``, ``x10``, ``top-3`` are caught by the lookbehind and the letters after).
NUMBER = re.compile(r"(?<![\w.,\-/@#x])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![\w%])"
                    r"(?!\.\d)")
SKIPPED = (
    re.compile(r"```.*?```", re.DOTALL),  # code blocks
    re.compile(r"`[^`\n]*`"),  # inline code
    re.compile(r"\$\$.*?\$\$", re.DOTALL),  # formulas
    re.compile(r"\$[^$\n]*\$"),
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"<[^>\n]*>"),  # html tags and their attributes
)


def numbers_of(value, out: list[float], key: str = "") -> list[float]:
    """Every int and float inside a JSON or TOML value, in the units prose writes it in: a time
    in seconds also in minutes and hours, in minutes also in seconds; a share also in percent."""
    if isinstance(value, dict):
        for name, inner in value.items():
            numbers_of(inner, out, str(name))
    elif isinstance(value, (list, tuple)):
        for inner in value:
            numbers_of(inner, out, key)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        x = float(value)
        out.append(x)
        if "seconds" in key:
            out += [x / 60, x / 3600]
        elif "minutes" in key:
            out.append(x * 60)
        elif isinstance(value, float) and 0 < x < 1:
            out.append(x * 100)
    return out


@functools.cache
def card_numbers() -> tuple[float, ...]:
    return tuple(numbers_of(json.loads(CARD.read_text()), []))


@functools.cache
def setting_numbers() -> tuple[float, ...]:
    found: list[float] = []
    for path in (ROOT / "vsearcher_lite" / "profiles").glob("*.toml"):
        numbers_of(tomllib.loads(path.read_text()), found)
    from vsearcher_lite.evaluation.comparison import ComparisonConfig
    from vsearcher_lite.rl.config import GRPOConfig
    from vsearcher_lite.synthesis.filters import VALIDATION_MAX_SHARE
    from vsearcher_lite.synthesis.trajectories import TrajectoryConfig
    from vsearcher_lite.training.config import SFTConfig

    for config in (SFTConfig, GRPOConfig, TrajectoryConfig, ComparisonConfig):
        numbers_of(config.for_profile("cpu").to_dict(), found)
    return tuple(numbers_of([VALIDATION_MAX_SHARE], found))


def matches(token: str, pool: tuple[float, ...]) -> bool:
    """``token`` equals one of ``pool`` at the digits it is written with."""
    value = float(token.replace(",", ""))
    digits = len(token.split(".")[1]) if "." in token else 0
    return any(round(x, digits) == value for x in pool)


class Sources:
    """Where a number in prose may come from; ``results``: also docs/results.md (the README's
    measurements); ``code``: the notebook's own code cells (a display setting such as a cut)."""

    def __init__(self, *, results: bool = False, code: str = "") -> None:
        self.card = card_numbers()
        self.settings = setting_numbers()
        self.fixed = set(PAPER) | {m.group(1) for m in NUMBER.finditer(code)}
        if results:
            self.fixed |= {m.group(1) for m in NUMBER.finditer(RESULTS.read_text())}

    def explains(self, token: str, line: str) -> bool:
        if token in self.fixed:
            return True
        value = float(token.replace(",", ""))
        if value.is_integer() and (0 <= value <= 10 or re.fullmatch(r"0\d", token)):
            return True  # counts of a few, notebook numbers
        if matches(token, self.settings):
            return True
        # the card explains a decimal anywhere, a whole number only where the line names the
        # reference (a count such as 36 is too common to be the reference's by chance)
        return matches(token, self.card) and ("." in token or "reference" in line.lower())


#: A module and its size in lines, as the reading path writes it: ``rl/config.py`` 212 (or (212)).
MODULE_SIZE = re.compile(r"`([\w/]+\.py)` \(?(\d{1,3}(?:,\d{3})+|\d+)\)?")


def module_sizes(text: str) -> list[tuple[str, int, int]]:
    """``(module, size written, lines it has)`` for each module size in ``text``; a bare file
    name is in the folder of the module named before it, or else at the package's top."""
    found, folder = [], ""
    for m in MODULE_SIZE.finditer(text):
        name = m.group(1)
        if "/" in name:
            folder = name.rsplit("/", 1)[0]
        elif folder and (ROOT / "vsearcher_lite" / folder / name).is_file():
            name = f"{folder}/{name}"
        path = ROOT / "vsearcher_lite" / name
        lines = len(path.read_text().splitlines()) if path.is_file() else -1
        found.append((name, int(m.group(2).replace(",", "")), lines))
    return found


def unexplained(text: str, sources: Sources) -> list[str]:
    """``'line: number'`` for each number of ``text`` that no source explains (a module's size
    in lines is checked against the module)."""
    wrong = [f"{name}: {written} lines written, {lines} in the file"
             for name, written, lines in module_sizes(text) if written != lines]
    text = MODULE_SIZE.sub(lambda m: f"`{m.group(1)}`", text)
    for pattern in SKIPPED:
        text = pattern.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in NUMBER.finditer(line):
            if not sources.explains(m.group(1), line):
                found.append(f"line {number}: {m.group(1)} in {line.strip()[:100]!r}")
    return wrong + found


@pytest.fixture(scope="module")
def notebook_sources() -> Sources:
    return Sources()


def test_the_check_flags_a_live_run_number_and_passes_the_paper_and_the_reference(
        notebook_sources):
    card = json.loads(CARD.read_text())["numbers"]["headline"]
    sft = f"{card['sft']['pass_at_1']:.3f}"
    quoted = (f"The paper kept 1,301 trajectories; the reference's SFT model answers {sft} "
              f"of {card['sft']['n_tasks']} held-out tasks, with top-3 results and `lr = 1e-4`.")
    assert unexplained(quoted, notebook_sources) == []
    # a share that no source holds (the card changes when the reference is shipped again)
    share = next(f"0.{i}" for i in range(101, 1000)
                 if not notebook_sources.explains(f"0.{i}", "the reference"))
    live = f"In `make reproduce` it trained 688 steps and answered {share} of the tasks in 151 s."
    assert [hit.split(": ")[1].split(" ")[0]
            for hit in unexplained(live, notebook_sources)] == ["688", share, "151"]
    # the reference's number mistyped: the nearest share above it that no source holds
    typo = next(f"{float(sft) + i / 1000:.3f}" for i in range(1, 100)
                if not notebook_sources.explains(f"{float(sft) + i / 1000:.3f}", "reference"))
    assert len(unexplained(f"The reference's SFT model answers {typo}.", notebook_sources)) == 1


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_prose_quotes_no_live_run_number(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    sources = Sources(code=code)
    found = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"])
            found += [f"cell {index}, {hit}" for hit in unexplained(text, sources)]
    assert not found, f"{notebook.name}: numbers from no fixed source:\n" + "\n".join(found)


def test_module_sizes_are_read_from_the_modules():
    text = "`rl/config.py` 1 and `grpo.py` 2"
    assert [(name, written) for name, written, _ in module_sizes(text)] == [
        ("rl/config.py", 1), ("rl/grpo.py", 2)]
    assert len(unexplained(text, Sources())) == 2  # neither module has that size


def test_the_architecture_page_states_each_module_size_it_names():
    text = (ROOT / "docs" / "architecture.md").read_text()
    wrong = [f"{name}: {written} written, {lines} in the file"
             for name, written, lines in module_sizes(text) if written != lines]
    assert module_sizes(text) and not wrong, "docs/architecture.md:\n" + "\n".join(wrong)


def test_readme_quotes_no_live_run_number():
    found = unexplained((ROOT / "README.md").read_text(), Sources(results=True))
    assert not found, "README.md: numbers from no fixed source:\n" + "\n".join(found)


def quoted(value: float, digits: int = 3) -> set[str]:
    """How a page may write ``value`` at ``digits`` decimals: rounded half up or half to even, or
    as Python formats the float (the card's own text: 2649 s is "44.1 min" there)."""
    from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal

    step = Decimal(1).scaleb(-digits)
    rounded = {str(Decimal(str(value)).quantize(step, rounding))
               for rounding in (ROUND_HALF_UP, ROUND_HALF_EVEN)}
    return rounded | {f"{value:.{digits}f}"}


def reference_section() -> str:
    text = RESULTS.read_text()
    found = re.search(r"(?ms)^## The shipped reference\n(.*?)(?=^## |\Z)", text)
    assert found, "docs/results.md has no section 'The shipped reference'"
    return found.group(1)


def test_the_results_page_quotes_the_shipped_reference_as_its_card_holds_it():
    """docs/results.md's section on the shipped reference gives the card's numbers: each policy's
    headline and per-level Pass@1, format-valid share and exam Pass@1, the paired differences
    with their SE and tasks gained and lost, the pre-screen's counts, GRPO's reward, Pass@k, and
    each stage's wall time in minutes."""
    section = reference_section()
    card = json.loads(CARD.read_text())
    numbers = card["numbers"]
    wanted: list[tuple[str, set[str]]] = []
    for policy in ("sft", "rl", "teacher"):
        headline = numbers["headline"][policy]
        wanted.append((f"{policy} headline Pass@1", quoted(headline["pass_at_1"])))
        wanted.append((f"{policy} headline format-valid", quoted(headline["format_valid_rate"])))
        for level, acc in headline["accuracy_by_difficulty"].items():
            wanted.append((f"{policy} {level} Pass@1", quoted(acc)))
        onehop = numbers["policies"]["heldout"][policy]["accuracy_by_difficulty"]["onehop"]
        wanted.append((f"{policy} one-hop Pass@1", quoted(onehop)))
    exam = numbers["policies"]["exam"]["teacher"]["pass_at_1"]
    wanted.append(("teacher exam Pass@1", quoted(exam)))
    for pair in ("rl_minus_sft", "sft_minus_base"):
        p = numbers["paired_heldout"][pair]
        wanted.append((f"{pair} mean", {"+" + s for s in quoted(p["mean"])}))
        wanted.append((f"{pair} SE", {f"SE {s}" for s in quoted(p["se"])}))
        wanted.append((f"{pair} gained / lost", {f"{p['gained']} gained, {p['lost']} lost"}))
    for level in ("easy", "medium", "hard", "medium+hard"):
        p = numbers["paired_by_level"][level]["rl_minus_sft"]
        wanted.append((f"rl_minus_sft {level}", {"+" + s for s in quoted(p["mean"])}))
    for level, g in numbers["prescreen"].items():
        wanted.append((f"pre-screen {level}", {f"{g['mixed']} of {g['screened']}"}))
        wanted.append((f"pre-screen {level} pass rate", quoted(g["pass_rate"])))
    grpo = numbers["grpo"]
    wanted.append(("GRPO reward", {f"{a} -> {b}" for a in quoted(grpo["reward_first_20pct"])
                                   for b in quoted(grpo["reward_last_20pct"])}))
    for policy in ("sft", "rl"):
        k = numbers["passk"][policy]["pass_at_k"]
        wanted.append((f"{policy} Pass@1 -> Pass@16",
                       {f"{a} -> {b}" for a in quoted(k["1"]) for b in quoted(k["16"])}))
    for stage, seconds in card["wall_seconds"].items():
        wanted.append((f"{stage} wall time", {f"{s} min" for s in quoted(seconds / 60, 1)}))
    hours = sum(card["wall_seconds"].values()) / 3600
    wanted.append(("wall time in all", {f"{s} h" for s in quoted(hours, 2)}))
    missing = [f"{what}: one of {sorted(forms)}" for what, forms in wanted
               if not any(form in section for form in forms)]
    assert not missing, "docs/results.md, the shipped reference:\n" + "\n".join(missing)
