"""Masking secrets wherever text leaves the program (errors, logs, manifests, cache rows,
notebook output): every key value read is remembered here, and ``redact`` masks those values and
anything shaped like a credential. It imports nothing of the package and no HTTP code, so the
modules that write files mask keys without loading the live web.

>>> remember_secret("sk-doctest-123456")
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

MASK = "***"
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
