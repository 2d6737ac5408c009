"""API keys of the live backends: read from the environment (or a ``.env`` file the user points
to), never shown.

Keys come from the environment or the ``.env`` file named by ``$VSEARCHER_ENV_FILE``, never from a
stray ``.env`` nearby. Every value read is remembered by ``redaction``, whose ``redact`` masks it
wherever text leaves the program.

>>> import os
>>> os.environ["VSL_DOCTEST_KEY"] = "sk-doctest-123456"
>>> key = get_secret("VSL_DOCTEST_KEY")
>>> from vsearcher_lite.redaction import redact
>>> redact("calling with sk-doctest-123456")
'calling with ***'
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from vsearcher_lite.redaction import remember_secret
from vsearcher_lite.runio import InputError

ENV_FILE_VAR = "VSEARCHER_ENV_FILE"

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
