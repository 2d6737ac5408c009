"""How far along its task's chain of hops an episode got, read from the agent's own sentences.

A medium or hard task hides its answer behind a chain: the entity in the image, then one entity
per round of injection, each described through the one before it. The teacher resolves the chain
in that order and says so in its thinking ("The <description> is <entity>."), and the trained
agents learned the same sentences, so an episode can be walked along the chain: the hops it
resolved before its first wrong claim, and what was wrong there (``KINDS``):

- image: the entity named for the image is not the pictured one;
- reading: the next hop's description with the wrong entity (a page misread, or a guess);
- off chain: a description that is not the next hop's (hops merged or skipped while rewriting
  the question, or its words garbled);
- stopped: no wrong claim, but the episode ended before the chain did;
- chain done: every hop resolved (then only the answer's attribute is left to read).

``benchmarks/hop_reach.py`` tabulates these walks.
"""

from __future__ import annotations

import re
from typing import Any

# "The <description> is <entity>." (a note may go on after it on the same line:
# "... is Wedril River. Find Wedril River.")
CLAIM = re.compile(r"^The (?P<description>.+) is (?P<entity>.+?)\.(?: |$)")
KINDS = ("image", "reading", "off chain", "stopped", "chain done")


def norm(text: str) -> str:
    """Case, spacing and "the" do not make two names or descriptions differ: the question says
    "the painting kept in the Zothar Library" where the teacher, filling the name in, writes
    "the painting kept in Zothar Library".

    >>> norm("The painting kept in the Zothar Library") == norm("painting kept in Zothar Library")
    True
    """
    return " ".join(w for w in text.casefold().split() if w != "the")


def chain(task: dict) -> list[tuple[str, str]]:
    """(description, entity) of each hop of a task record in the order an agent resolves them:
    the pictured entity first, then the rounds from the last injected to the answer's subject."""
    hops = [(task["image"]["description"], task["image"]["entity"])] if task.get("image") else []
    return hops + [(r["description"], r["entity"]) for r in reversed(task.get("rounds") or [])]


def thought_lines(messages: list[dict[str, Any]]) -> list[str]:
    """The lines of the assistant's thinking, in order, stripped."""
    return [line.strip() for message in messages
            if message.get("role") == "assistant" and isinstance(message.get("content"), str)
            for line in message["content"].split("</think>")[0].splitlines()]


def reach(hops: list[tuple[str, str]], messages: list[dict[str, Any]]) -> tuple[int, str]:
    """Hops of ``hops`` (``chain``) resolved before the first wrong claim in ``messages``, and
    what ended the walk (``KINDS``).

    >>> hops = [("the tower in the image", "Orm Tower"), ("the town of Orm Tower", "Ulby")]
    >>> say = lambda *lines: [{"role": "assistant", "content": "\\n".join(lines) + "</think>"}]
    >>> reach(hops, say("The tower in the image is Orm Tower.", "The town of Orm Tower is Ulby."))
    (2, 'chain done')
    >>> reach(hops, say("The tower in the image is Orm Tower.", "The town of Orm Tower is Vey."))
    (1, 'reading')
    >>> reach(hops, say("The tower in the image is Orm Tower.", "The river of Ulby is Aa."))
    (1, 'off chain')
    >>> reach(hops, say("The tower in the image is Kell Tower."))
    (0, 'image')
    """
    done = 0
    for line in thought_lines(messages):
        match = CLAIM.match(line)
        if match and done < len(hops):
            description, entity = match["description"], match["entity"]
            if norm(entity) == norm(hops[done][1]):
                done += 1
            elif done == 0 and "image" in description.casefold():
                return done, "image"
            elif done and norm(description) == norm(hops[done][0]):
                return done, "reading"
            elif not done or norm(entity) != norm(hops[done - 1][1]):  # not the last hop again
                return done, "off chain"
    return done, "chain done" if done == len(hops) else "stopped"

