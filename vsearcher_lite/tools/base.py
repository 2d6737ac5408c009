"""The three agent tools, defined once (paper section 3.1 and appendix A.1), so the teacher, SFT,
GRPO and evaluation show the model the same schemas; and the backend interfaces (text search,
image search, page reader, summariser) the sandbox and the live web implement.
"""

from __future__ import annotations

import abc
from dataclasses import asdict, dataclass, field
from typing import Any

from vsearcher_lite.world.model import ImageRef, PageContent


@dataclass(frozen=True)
class ToolArg:
    name: str
    type: str  # JSON schema type: "string", "integer", ...
    description: str
    required: bool = True


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    args: tuple[ToolArg, ...] = ()

    def schema(self) -> dict:
        """The OpenAI / Qwen function-calling schema of this tool.

        >>> spec = ToolSpec("ping", "Check.", (ToolArg("host", "string", "Where."),))
        >>> spec.schema()["function"]["parameters"]["required"]
        ['host']
        """
        properties = {arg.name: {"type": arg.type, "description": arg.description}
                      for arg in self.args}
        required = [a.name for a in self.args if a.required]
        parameters = {"type": "object", "properties": properties, "required": required}
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": parameters}}

    def validate(self, arguments: Any) -> dict:
        """The arguments checked against the spec; ``ToolArgumentError`` says what is wrong."""
        if not isinstance(arguments, dict):
            got = type(arguments).__name__
            raise ToolArgumentError(f"{self.name}: arguments must be a JSON object, got {got}")
        known = {a.name: a for a in self.args}
        unknown = sorted(set(arguments) - set(known))
        if unknown:
            raise ToolArgumentError(f"{self.name}: unknown argument(s) {', '.join(unknown)}")
        out = {}
        for a in self.args:
            if a.name not in arguments:
                if a.required:
                    raise ToolArgumentError(f"{self.name}: missing required argument '{a.name}'")
                continue
            value = arguments[a.name]
            if a.type == "string":
                if not isinstance(value, str) or not value.strip():
                    raise ToolArgumentError(
                        f"{self.name}: argument '{a.name}' must be a non-empty string")
                value = value.strip()
            out[a.name] = value
        return out


class ToolArgumentError(ValueError):
    """A tool was called with arguments that do not fit its spec."""


class ToolError(RuntimeError):
    """A tool could not do its work (unknown URL, backend failure): an error observation."""


TEXT_SEARCH = ToolSpec(
    "text_search",
    "Search the web with a text query. Returns the top results, each with its URL, title and a "
    "snippet.",
    (ToolArg("query", "string", "The search query: keywords or a short phrase."),),
)
IMAGE_SEARCH = ToolSpec(
    "image_search",
    "Reverse image search with the image given in the question. Returns the top web pages that "
    "contain the same or a similar image, each with its URL, title and the matching image. Takes "
    "no arguments.",
    (),
)
VISIT = ToolSpec(
    "visit",
    "Open a web page and return a summary of the parts of it that are relevant to the goal.",
    (
        ToolArg("url", "string", "The URL of the page to open, as it appeared in a search result."),
        ToolArg("goal", "string", "What you want to learn from this page."),
    ),
)

TOOL_SPECS: dict[str, ToolSpec] = {s.name: s for s in (TEXT_SEARCH, IMAGE_SEARCH, VISIT)}


def tool_schemas() -> list[dict]:
    """The schemas of all agent tools, in a fixed order: what the system prompt lists."""
    return [spec.schema() for spec in TOOL_SPECS.values()]


@dataclass
class SearchHit:
    url: str
    title: str
    snippet: str = ""


@dataclass
class ImageHit:
    url: str  # the page that contains the image
    title: str
    image: ImageRef | None = None
    score: float = 0.0


@dataclass
class ToolResult:
    """What one tool call gives back: ``text`` goes inside ``<tool_response>``, with ``images``
    (image search's matches); an error observation has ``ok`` False and text ``"Error: ..."``."""

    tool: str
    text: str
    images: list[ImageRef] = field(default_factory=list)
    ok: bool = True
    data: dict = field(default_factory=dict)  # structured payload (hits), for analysis and tests

    @classmethod
    def error(cls, tool: str, message: str) -> "ToolResult":
        return cls(tool=tool, text=f"Error: {message}", ok=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["images"] = [asdict(i) for i in self.images]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ToolResult":
        images = [ImageRef(**i) for i in d.get("images", [])]
        return cls(d["tool"], d["text"], images, d.get("ok", True), d.get("data", {}))


class TextSearchBackend(abc.ABC):
    name: str = "text"

    @abc.abstractmethod
    def search(self, query: str, k: int = 5) -> list[SearchHit]: ...


class ImageSearchBackend(abc.ABC):
    name: str = "image"

    @abc.abstractmethod
    def search(self, image: ImageRef, k: int = 5) -> list[ImageHit]: ...


class PageReader(abc.ABC):
    name: str = "reader"

    @abc.abstractmethod
    def read(self, url: str) -> PageContent:
        """The page at ``url``; raise ``ToolError`` naming the URL when it cannot be read."""


class Summariser(abc.ABC):
    name: str = "summariser"

    @abc.abstractmethod
    def summarise(self, page: PageContent, goal: str) -> str: ...
