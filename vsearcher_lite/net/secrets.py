"""API keys: read from the environment (or a ``.env`` file the user points to), never shown.

Keys come from the environment or the ``.env`` file named by ``$VSEARCHER_ENV_FILE``, never from a
stray ``.env`` nearby. ``redact`` masks every value read, and anything shaped like a credential,
wherever text leaves the program (errors, logs, manifests, cache rows, notebook output).

>>> import os
>>> os.environ["VSL_DOCTEST_KEY"] = "sk-doctest-123456"
>>> key = get_secret("VSL_DOCTEST_KEY")
>>> redact("calling with sk-doctest-123456")
'calling with ***'
>>> redact("https://api.example/x?key=abc&q=cats")
'https://api.example/x?key=***&q=cats'
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Iterable

from vsearcher_lite.runio import InputError

ENV_FILE_VAR = "VSEARCHER_ENV_FILE"
MASK = "***"

# What each variable is for, so a missing key produces an error a user can act on.
SECRET_PURPOSES: dict[str, str] = {
    "SERPER_API_KEY": "Serper text search and Serper Lens image search (https://serper.dev)",
    "GOOGLE_API_KEY": "Google Custom Search / Cloud Vision web detection",
    "GOOGLE_CSE_KEY": "Google Custom Search (text search; closed to new customers)",
    "GOOGLE_CSE_ID": "the Google Custom Search engine id",
    "GOOGLE_VISION_API_KEY": "Google Cloud Vision web detection (image search)",
    "JINA_API_KEY": "Jina Reader page fetching (visit); optional, else a direct fetch",
    "VSEARCHER_CHAT_API_KEY": "the OpenAI-compatible chat endpoint (teacher, writer, judge roles)",
    "OPENAI_API_KEY": "the OpenAI-compatible chat endpoint",
    "GEMINI_API_KEY": "Gemini's OpenAI-compatible chat endpoint",
}

MIN_SECRET_LENGTH = 6  # shorter values are no keys, and masking them would mangle text

_known: set[str] = set()
_lock = threading.Lock()

# Query parameters and header-like fields whose values are credentials.
_SECRET_PARAM = re.compile(
    r"(?i)\b((?:api[_-]?key|key|access[_-]?token|token|secret|password|passwd|sig|signature|auth)=)"
    r"[^&\s\"'#]+")
_SECRET_HEADER = re.compile(
    r"(?i)\b((?:authorization|x-api-key|x-goog-api-key|api-key|proxy-authorization)"
    r"[\"']?\s*[:=]\s*[\"']?)(?:(bearer|basic|token)\s+)?[^\s\"',}]+")
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/@\s:]*:)[^/@\s]+@")
# Common key shapes that should never appear in output even if they were not read here.
_KEY_SHAPES = re.compile(
    r"\b(sk-[A-Za-z0-9_-]{16,}|AIza[0-9A-Za-z_-]{30,}|jina_[A-Za-z0-9]{20,})\b")


def remember_secret(value: str | None) -> None:
    """Add a value to the set ``redact`` masks (ignored when empty or too short to be a key)."""
    if value and len(value) >= MIN_SECRET_LENGTH:
        with _lock:
            _known.add(value)


def known_secrets() -> frozenset[str]:
    """Every secret value read (or remembered) in this process."""
    with _lock:
        return frozenset(_known)


def parse_env_file(path: str | os.PathLike) -> dict[str, str]:
    """The ``NAME=value`` pairs of a ``.env`` file (``export``, quotes and ``#`` comments allowed).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / ".env"
    >>> _ = p.write_text("# keys\\nexport A='x y'\\nB=2 # note\\n")
    >>> parse_env_file(p)
    {'A': 'x y', 'B': '2'}
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: env file not found (set by ${ENV_FILE_VAR} or env_file=)")
    values: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            # Name the line but never echo it: it may hold a key.
            raise InputError(f"{path}:{lineno}: expected NAME=value")
        value = value.strip()
        if value[:1] in ("'", '"') and value.count(value[0]) >= 2:
            value = value[1:value.index(value[0], 1)]
        else:
            value = value.split(" #", 1)[0].strip()
        values[name] = value
    return values


def _lookup(var: str, env_file: str | os.PathLike | None) -> str | None:
    """``var`` from the environment, else from ``env_file`` (default ``$VSEARCHER_ENV_FILE``)."""
    value = os.environ.get(var) or None
    if value is None:
        file = env_file if env_file is not None else os.environ.get(ENV_FILE_VAR)
        if file:
            value = parse_env_file(file).get(var) or None
    return value


def get_secret(var: str, *, env_file: str | os.PathLike | None = None,
               required: bool = True) -> str | None:
    """``var`` from the environment or env file, kept for ``redact``; ``InputError`` if required."""
    value = _lookup(var, env_file)
    if value is None:
        if required:
            purpose = SECRET_PURPOSES.get(var, "this backend")
            where = f" or in the env file named by ${ENV_FILE_VAR}"
            raise InputError(f"missing API key: set ${var}{where} (used for {purpose})")
        return None
    remember_secret(value)
    return value


def get_setting(var: str, *, env_file: str | os.PathLike | None = None,
                default: str | None = None) -> str | None:
    """A non-secret setting (a base URL, a model name) found like ``get_secret``, not masked."""
    value = _lookup(var, env_file)
    return value if value is not None else default


def redact(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with known secrets, ``secrets`` and anything shaped like a credential masked."""
    if not text:
        return text
    values = set(known_secrets())
    values.update(s for s in (secrets or ()) if s and len(s) >= MIN_SECRET_LENGTH)
    # Longest first, so a key that contains another key is masked whole.
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, MASK)
    text = _SECRET_PARAM.sub(lambda m: m.group(1) + MASK, text)
    def header(m: re.Match) -> str:
        return m.group(1) + (m.group(2) + " " if m.group(2) else "") + MASK

    text = _SECRET_HEADER.sub(header, text)
    text = _URL_USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    text = _KEY_SHAPES.sub(MASK, text)
    return text


def scan_for_secrets(root: str | os.PathLike, secrets: Iterable[str] | None = None) -> list[str]:
    """Files under ``root`` (binary ones too) whose bytes contain a secret (default: every value
    read here), as ``"<path>: contains N secret value(s)"`` lines that never show a value."""
    pool = secrets if secrets is not None else known_secrets()
    values = [v for v in pool if v and len(v) >= MIN_SECRET_LENGTH]
    if not values:
        return []
    needles = [v.encode("utf-8") for v in values]
    root = Path(root)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    leaks: list[str] = []
    for path in files:
        data = path.read_bytes()
        hits = sum(1 for needle in needles if needle in data)
        if hits:
            leaks.append(f"{path}: contains {hits} secret value(s)")
    return leaks
