"""The notebooks' equations reach their HTML copies as MathML, which a browser draws offline: every
``$...$`` and ``$$...$$`` of every notebook's markdown converts, none is left as TeX, and a dollar
sign that is not math (a price, a shell variable in code) stays as written."""

import re
import warnings

import nbformat
import pytest

from vsearcher_lite.notebooks import list_notebooks
from vsearcher_lite.report import INLINE_MATH, math_html, offline_html_exporter, tex_to_mathml

CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # fenced blocks and code spans: never math
DISPLAY = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$", re.S)


def equations(markdown: str) -> list[tuple[str, bool]]:
    """``(TeX, display?)`` of each equation in one markdown cell's source, found by the
    exporter's rules for ``$`` but without its markdown parser."""
    text = CODE.sub(" ", markdown)
    found = [(m[1], True) for m in DISPLAY.finditer(text)]
    inline = re.finditer(INLINE_MATH, DISPLAY.sub(" ", text))
    return found + [(m["math_inline_tex"], False) for m in inline]


def export(notebook) -> str:
    """The HTML copy of ``notebook``; a conversion warning is an error here."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        body, _ = offline_html_exporter().from_notebook_node(notebook)
    return body


def markdown_notebook(*sources: str):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(s) for s in sources])


@pytest.mark.parametrize("path", list_notebooks(), ids=lambda p: p.stem)
def test_every_equation_of_the_notebook_converts_and_none_is_left_as_tex(path):
    notebook = nbformat.read(path, as_version=4)
    spans = [eq for cell in notebook.cells if cell.cell_type == "markdown"
             for eq in equations(cell.source)]
    for tex, display in spans:
        tex_to_mathml(tex, display)  # raises on TeX it cannot convert
    body = export(notebook)
    assert body.count("<math ") == len(spans)
    assert "$$" not in body
    assert not re.findall(r"<script src=[^>]*mathjax", body, flags=re.I)  # nothing from a CDN


def test_the_notebooks_have_equations_to_check():
    counts = {p.stem: sum(len(equations(c.source))
                          for c in nbformat.read(p, as_version=4).cells
                          if c.cell_type == "markdown")
              for p in list_notebooks()}
    assert counts["06_sft"] >= 3 and counts["07_grpo"] >= 10, counts


def test_dollars_that_are_not_math_stay_as_written():
    body = export(markdown_notebook(
        "It costs $5 or $10 a month; `$HOME` and `a$b$c` are code; \\$x\\$ is escaped.",
        "The mean $\\bar r$ and\n\n$$A_i = \\frac{r_i - \\bar r}{s}$$",
    ))
    assert "costs $5 or $10 a month" in body
    assert "<code>$HOME</code>" in body and "<code>a$b$c</code>" in body
    assert "$x$ is escaped" in body
    assert body.count('display="inline"') == 1
    assert body.count('display="block"') == 1 and "<mfrac>" in body


def test_tex_that_does_not_convert_is_refused_and_shown_as_code():
    with pytest.raises(ValueError, match="unknown"):
        tex_to_mathml(r"x \notacommand y")
    with pytest.raises(ValueError, match="cannot convert"):
        tex_to_mathml(r"\frac{1}{")
    with pytest.warns(UserWarning, match="cannot convert"):
        assert math_html(r"\frac{1}{", display=True) == r"<code>\frac{1}{</code>"


def test_a_double_struck_digit_is_its_own_character():
    # browsers ignore mathvariant outside letters: the indicator's 1 would read as a plain 1
    assert "<mn>\U0001d7d9</mn>" in tex_to_mathml(r"\mathbb{1}[t < f]")
