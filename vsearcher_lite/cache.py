"""A persistent cache of tool and API calls in one SQLite file, safe across processes.

Every response is stored under a hash of ``(namespace, request)``, so reruns are reproducible and
cheap and a live run can be replayed. WAL mode and one connection per thread let processes and
threads share a cache file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable

MODES = ("readwrite", "replay", "record", "off")


class CacheMiss(LookupError):
    """Replay mode found no stored response for a request."""


def request_key(namespace: str, request: Any) -> str:
    blob = json.dumps([namespace, request], sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


_WAL_SWITCH = threading.Lock()


def enable_wal(conn, attempts: int = 40, wait_s: float = 0.05) -> None:
    """Put the connection's database in WAL mode, retrying: two connections switching a new file
    at once get "database is locked" at once, not after the busy timeout.

    >>> class Flaky:  # locked twice, then WAL
    ...     def __init__(self): self.calls = []
    ...     def execute(self, sql):
    ...         self.calls.append(sql)
    ...         if len(self.calls) <= 2: raise sqlite3.OperationalError("database is locked")
    ...         return self
    ...     def fetchone(self): return ("wal",)
    >>> conn = Flaky(); enable_wal(conn, wait_s=0.0); conn.calls
    ['PRAGMA journal_mode', 'PRAGMA journal_mode', 'PRAGMA journal_mode']
    """
    for attempt in range(attempts):
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(min(wait_s * (attempt + 1), 0.5))


class ToolCache:
    """``get_or_call(namespace, request, fn)``: the stored response, or ``fn()`` stored.

    Modes: ``readwrite`` (default) serves hits and stores misses; ``record`` always calls and
    stores; ``replay`` raises ``CacheMiss`` on a miss and never calls; ``off`` stores nothing.

    >>> import tempfile, os
    >>> c = ToolCache(os.path.join(tempfile.mkdtemp(), "c.sqlite"))
    >>> c.get_or_call("echo", {"q": 1}, lambda: {"a": 1})
    {'a': 1}
    >>> c.get_or_call("echo", {"q": 1}, lambda: {"a": 2})
    {'a': 1}
    """

    def __init__(self, path: str | os.PathLike, mode: str = "readwrite"):
        if mode not in MODES:
            raise ValueError(f"unknown cache mode {mode!r}; choose one of {', '.join(MODES)}")
        self.path = Path(path)
        self.mode = mode
        self.hits = 0
        self.misses = 0
        self._count_lock = threading.Lock()
        self._local = threading.local()
        if mode != "off":
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._conn() as conn:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS calls ("
                    " key TEXT PRIMARY KEY, namespace TEXT NOT NULL, request TEXT NOT NULL,"
                    " response TEXT NOT NULL, created REAL NOT NULL)"
                )

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            conn.execute("PRAGMA busy_timeout=30000")
            with _WAL_SWITCH:
                enable_wal(conn)
            self._local.conn = conn
            self._local.pid = os.getpid()
        return conn

    def count(self, hit: bool) -> None:
        """Count one hit (``hit``) or one miss; safe from any thread."""
        with self._count_lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    def get(self, namespace: str, request: Any) -> Any | None:
        if self.mode in ("off", "record"):
            return None
        row = self._conn().execute(
            "SELECT response FROM calls WHERE key = ?", (request_key(namespace, request),)
        ).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, namespace: str, request: Any, response: Any) -> None:
        if self.mode in ("off", "replay"):
            return
        row = (request_key(namespace, request), namespace,
               json.dumps(request, sort_keys=True, ensure_ascii=False),
               json.dumps(response, ensure_ascii=False), time.time())
        self._conn().execute("INSERT OR REPLACE INTO calls (key, namespace, request, response, "
                             "created) VALUES (?, ?, ?, ?, ?)", row)

    def get_or_call(self, namespace: str, request: Any, fn: Callable[[], Any]) -> Any:
        found = self.get(namespace, request)
        if found is not None:
            self.count(hit=True)
            return found
        if self.mode == "replay":
            shown = json.dumps(request, ensure_ascii=False)[:200]
            raise CacheMiss(f"replay mode: no recorded response for {namespace} {shown}")
        self.count(hit=False)
        response = fn()
        self.put(namespace, request, response)
        return response

    def __len__(self) -> int:
        if self.mode == "off":
            return 0
        return self._conn().execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def entries(self, namespace: str | None = None) -> list[dict]:
        """All stored (request, response) pairs, oldest first: for inspecting a recorded run."""
        sql = "SELECT namespace, request, response FROM calls"
        args: tuple = ()
        if namespace is not None:
            sql += " WHERE namespace = ?"
            args = (namespace,)
        rows = self._conn().execute(sql + " ORDER BY created, key", args).fetchall()
        return [{"namespace": n, "request": json.loads(q), "response": json.loads(r)}
                for n, q, r in rows]
