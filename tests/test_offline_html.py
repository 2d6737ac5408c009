"""The interactive views, figures and equations of an executed notebook's HTML copy work offline:
the page is opened from disk in headless Chromium with every host name unresolvable, and the DOM
after its scripts ran must hold the live step-through view, the drawn plotly figure and the
equations as laid-out MathML. Skipped where no Chromium is installed."""

import json
import re
import shutil
import subprocess

import pytest
from run_fakes import fake_run

from vsearcher_lite.report import report_html
from vsearcher_lite.stepper import StepView

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip(f"no headless browser on PATH (looked for {', '.join(BROWSERS)})")


def dump_dom(page, tmp_path) -> str:
    """The page's DOM after its scripts ran, loaded from disk with the network cut off."""
    browser = find_browser()
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'browser-profile'}",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # no host name resolves: nothing can be fetched
        "--proxy-server=http://127.0.0.1:9",
        "--virtual-time-budget=10000",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_step_view_steps_when_clicked_in_a_browser(tmp_path):
    view = StepView(
        [f"<p class='body'>body {i}</p>" for i in range(4)],
        heading="<b>four steps</b>",
        element_id="view",
    )
    # After the view's own script, a second one clicks through it and writes down what was shown.
    clicks = """<script>
      var root = document.getElementById("view"), seen = [];
      function shown() {
        var out = [], steps = root.querySelectorAll(".vsl-step");
        for (var i = 0; i < steps.length; i++) {
          if (steps[i].style.display !== "none") { out.push(i); }
        }
        return out.join("+") + "@" + root.querySelector(".vsl-where").textContent;
      }
      seen.push(shown());
      root.querySelector(".vsl-next").click(); root.querySelector(".vsl-next").click();
      seen.push(shown());
      root.querySelector(".vsl-back").click(); seen.push(shown());
      var range = root.querySelector("input"); range.value = "3";
      range.dispatchEvent(new Event("input"));
      seen.push(shown());
      root.querySelector(".vsl-next").click(); seen.push(shown());
      document.getElementById("log").textContent = JSON.stringify(seen);
    </script>"""
    page = tmp_path / "view.html"
    page.write_text(
        f"<!doctype html><html><body>{view.to_html()}<pre id='log'></pre>{clicks}</body></html>"
    )
    dom = dump_dom(page, tmp_path)
    log = dom.split('<pre id="log">', 1)[1].split("</pre>", 1)[0]
    assert json.loads(log) == [
        "0@step 1 of 4",
        "2@step 3 of 4",
        "1@step 2 of 4",
        "3@step 4 of 4",
        "3@step 4 of 4",
    ]


VIEW_CELL = """
import plotly.graph_objects as go
from IPython.display import display
from vsearcher_lite.synthesis.plots import rounds_viewer

task = {"id": "t-hard", "difficulty": "hard", "seed_title": "Tope",
        "initial_question": "When was Tope founded?",
        "question": "When was the town beside the river founded?", "answer": "1874",
        "rounds": [{"round": 1, "entity": "Tope", "description": "the town beside the river",
                    "fact": {},
                    "question_before": "When was Tope founded?",
                    "question_after": "When was the town beside the river founded?"}]}
display(rounds_viewer(task))
go.Figure(go.Bar(x=["a", "b"], y=[1, 2])).show()

from vsearcher_lite.runtime import end_progress, progress_bar

bar = progress_bar("grpo", 200)  # a widget in the kernel, stopped by its budget after 2 steps
bar.update(2)
end_progress(bar, "stopped by the time budget")
"""


@pytest.mark.notebook
def test_an_executed_notebooks_html_copy_shows_its_view_and_figure_offline(tmp_path):
    find_browser()
    from vsearcher_lite.notebooks import _write_html, execute_notebook, kernel_environment

    source = tmp_path / "views.ipynb"
    cells = [
        {
            "cell_type": "code",
            "metadata": {},
            "source": VIEW_CELL,
            "outputs": [],
            "execution_count": None,
            "id": "views",
        }
    ]
    source.write_text(
        json.dumps(
            {
                "cells": cells,
                "nbformat": 4,
                "nbformat_minor": 5,
                "metadata": {
                    "kernelspec": {
                        "display_name": "Python 3",
                        "language": "python",
                        "name": "python3",
                    },
                    "language_info": {"name": "python"},
                },
            }
        )
    )
    executed = tmp_path / "out" / "views.ipynb"
    with kernel_environment():  # what `reproduce` gives its kernels
        execute_notebook(source, executed, timeout=300)
    _write_html(executed)
    dom = dump_dom(executed.with_suffix(".html"), tmp_path)

    # The step view's script ran: it marked itself ready and shows the first of its two steps.
    assert dom.count('class="vsl-stepper"') == 1
    assert 'data-ready="1"' in dom and 'data-step="0"' in dom and "step 0 (0 to 1)" in dom
    # plotly.js came from the page itself and drew the figure (its SVG exists only once drawn).
    assert 'class="main-svg"' in dom
    # The progress widget, which needs a script from a CDN, is its last line of text instead.
    assert re.search(r"grpo: 100% 2/2 \[[^]]*stopped by the time budget after 2 of 200\]", dom)
    assert "jupyter-widgets" not in dom


def test_the_report_draws_every_figure_offline(tmp_path):
    run = fake_run(tmp_path / "run")
    page = run / "report.html"
    page.write_text(report_html({"settings": {"profile": "cpu"}, "notebooks": {}}, run))
    dom = dump_dom(page, tmp_path)
    # plotly marks a figure's div once it has drawn it; the page holds seven figures.
    assert dom.count('class="plotly-graph-div js-plotly-plot"') == 7


EQUATIONS = (
    "The loss, with $m_t = 1$ on the tokens the policy wrote:\n\n"
    "$$\\mathcal{L} = \\frac{1}{\\sum_t m_t} \\sum_t m_t \\bigl(-\\log p_\\theta(x_t)\\bigr)$$"
)
# Run after the page's own scripts: is the fraction laid out as one, numerator above denominator?
FRACTION_LAYOUT = """<pre id="layout"></pre><script>
  var frac = document.querySelector("math[display=block] mfrac"), out = "no fraction";
  if (frac) {
    var over = frac.children[0].getBoundingClientRect();
    var under = frac.children[1].getBoundingClientRect();
    out = over.bottom <= under.top + 1 ? "stacked" : "side by side";
  }
  document.getElementById("layout").textContent = out;
</script>"""


def test_an_exported_notebooks_equations_are_drawn_offline(tmp_path):
    find_browser()
    import nbformat

    from vsearcher_lite.notebooks import _write_html

    source = tmp_path / "equations.ipynb"
    cells = [nbformat.v4.new_markdown_cell(EQUATIONS), nbformat.v4.new_code_cell("x = 1")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), source)
    _write_html(source)
    page = source.with_suffix(".html")
    page.write_text(page.read_text().replace("</body>", FRACTION_LAYOUT + "</body>"))
    dom = dump_dom(page, tmp_path)

    assert dom.count("<math ") == 2  # the inline m_t and the displayed loss
    assert "$$" not in dom and "\\frac" not in dom and "$m_t" not in dom  # no TeX left as text
    assert '<pre id="layout">stacked</pre>' in dom  # Chromium drew the MathML itself
