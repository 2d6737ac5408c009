"""A step-through view as one self-contained HTML block (no widget library, no network).

Its script is inlined, so it works in JupyterLab, in exported HTML and offline; where no script
runs, every step is still there as a numbered list.
"""

from __future__ import annotations

import html
import json
import uuid
from typing import Sequence

# Written for old browsers too (no modules, no arrow functions): it runs as an inline script.
_SCRIPT = """(function () {
  var root = document.getElementById("%(id)s");
  if (!root || root.getAttribute("data-ready")) { return; }
  var steps = root.querySelectorAll(".vsl-step");
  var controls = root.querySelector(".vsl-controls");
  var range = controls.querySelector("input");
  var where = controls.querySelector(".vsl-where");
  function show(i) {
    i = Math.max(0, Math.min(steps.length - 1, i));
    for (var k = 0; k < steps.length; k++) { steps[k].style.display = k === i ? "" : "none"; }
    range.value = String(i);
    where.textContent = %(position)s.replace("{i}", String(i + %(first)d));
    root.setAttribute("data-step", String(i));
  }
  controls.querySelector(".vsl-back").onclick = function () { show(Number(range.value) - 1); };
  controls.querySelector(".vsl-next").onclick = function () { show(Number(range.value) + 1); };
  range.oninput = function () { show(Number(range.value)); };
  controls.hidden = false;
  root.querySelector(".vsl-list").style.listStyle = "none";
  root.querySelector(".vsl-list").style.paddingLeft = "0";
  root.setAttribute("data-ready", "1");
  show(0);
})();"""


class StepView:
    """Steps of HTML shown one at a time; displays itself in Jupyter (``_repr_html_``).

    >>> view = StepView(["<b>one</b>", "two"], heading="a task")
    >>> len(view), view.steps[1]
    (2, 'two')
    >>> view.to_html().count('class="vsl-step"')
    2
    """

    def __init__(self, steps: Sequence[str], heading: str = "", *, first: int = 1,
                 element_id: str | None = None):
        if not steps:
            raise ValueError("a step view needs at least one step")
        self.steps = list(steps)
        self.heading = heading
        self.first = first  # the number shown for the first step
        self.element_id = element_id or f"vsl-stepper-{uuid.uuid4().hex[:16]}"

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        name = html.unescape(strip_tags(self.heading)) or "untitled"
        return f"StepView({len(self.steps)} steps: {name})"

    def position(self, index: int | None = None) -> str:
        """Where the view stands (``{i}`` for the number when ``index`` is None).

        >>> StepView(["a", "b", "c"]).position(1), StepView(["a", "b", "c"], first=0).position(1)
        ('step 2 of 3', 'step 1 (0 to 2)')
        """
        n, first = len(self.steps), self.first
        number = "{i}" if index is None else str(index + first)
        if first == 1:
            return f"step {number} of {n}"
        return f"step {number} ({first} to {first + n - 1})"

    def to_html(self) -> str:
        """The view: heading, controls (hidden until the script runs), every step, the script."""
        n = len(self.steps)
        position = json.dumps(self.position())
        script = _SCRIPT % {"id": self.element_id, "position": position, "first": self.first}
        items = "\n".join(f'<li class="vsl-step" style="margin:.3em 0">{body}</li>'
                          for body in self.steps)
        heading = (f'<div class="vsl-heading" style="margin-bottom:.3em">{self.heading}</div>'
                   if self.heading else "")
        box = "border:1px solid #ccd;border-radius:6px;padding:8px"
        return (
            f'<div class="vsl-stepper" id="{self.element_id}" style="{box}">{heading}'
            '<div class="vsl-controls" hidden style="margin-bottom:.5em">'
            '<button type="button" class="vsl-back">&#9664; back</button> '
            f'<input type="range" min="0" max="{n - 1}" value="0" step="1" '
            'style="vertical-align:middle;width:16em"> '
            '<button type="button" class="vsl-next">next &#9654;</button> '
            f'<span class="vsl-where">{self.position(0)}</span></div>'
            f'<ol class="vsl-list" style="margin:0">{items}</ol>'
            f"<script>{script}</script></div>"
        )

    def _repr_html_(self) -> str:
        return self.to_html()


def strip_tags(text: str) -> str:
    """``text`` without its HTML tags (for a plain-text name of a view).

    >>> strip_tags("<b>t1</b> (hard)")
    't1 (hard)'
    """
    import re

    return re.sub(r"<[^>]*>", "", text)
