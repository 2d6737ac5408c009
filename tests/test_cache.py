import multiprocessing as mp

import pytest

from vsearcher_lite.cache import CacheMiss, ToolCache


def test_hit_miss_and_persistence(tmp_path):
    path = tmp_path / "c.sqlite"
    calls = []

    def fn():
        calls.append(1)
        return {"hits": [1, 2]}

    cache = ToolCache(path)
    assert cache.get_or_call("t", {"q": "x"}, fn) == {"hits": [1, 2]}
    assert cache.get_or_call("t", {"q": "x"}, fn) == {"hits": [1, 2]}
    assert len(calls) == 1 and (cache.hits, cache.misses) == (1, 1)
    # A new process-level object over the same file sees the stored entry.
    assert ToolCache(path).get("t", {"q": "x"}) == {"hits": [1, 2]}
    # Key order in the request does not matter; the namespace does.
    cache.put("t", {"a": 1, "b": 2}, {"hits": [3]})
    assert cache.get("t", {"b": 2, "a": 1}) == {"hits": [3]}
    assert cache.get("other", {"q": "x"}) is None


def test_replay_never_calls(tmp_path):
    path = tmp_path / "c.sqlite"
    ToolCache(path).put("t", {"q": 1}, {"a": 1})
    replay = ToolCache(path, mode="replay")

    def boom():
        raise AssertionError("replay must not call the backend")

    assert replay.get_or_call("t", {"q": 1}, boom) == {"a": 1}
    with pytest.raises(CacheMiss, match="no recorded response"):
        replay.get_or_call("t", {"q": 2}, boom)


def test_record_refreshes_and_off_stores_nothing(tmp_path):
    path = tmp_path / "c.sqlite"
    ToolCache(path).put("t", {"q": 1}, {"a": 1})
    assert ToolCache(path, mode="record").get_or_call("t", {"q": 1}, lambda: {"a": 2}) == {"a": 2}
    assert ToolCache(path).get("t", {"q": 1}) == {"a": 2}
    off = ToolCache(tmp_path / "off.sqlite", mode="off")
    off.get_or_call("t", {"q": 1}, lambda: {"a": 1})
    assert not (tmp_path / "off.sqlite").exists() and len(off) == 0
    with pytest.raises(ValueError, match="unknown cache mode"):
        ToolCache(path, mode="sometimes")


def _writer(path, start):
    cache = ToolCache(path)
    for i in range(start, start + 50):
        cache.get_or_call("t", {"i": i}, lambda i=i: {"v": i})


def test_several_processes_share_one_file(tmp_path):
    path = str(tmp_path / "c.sqlite")
    ToolCache(path)  # create the table before the writers race
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, s)) for s in (0, 25, 50)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    cache = ToolCache(path)
    assert len(cache) == 100
    assert all(cache.get("t", {"i": i}) == {"v": i} for i in range(100))


def test_threads_opening_a_new_cache_together_all_get_it_in_wal_mode(tmp_path):
    import sqlite3
    import threading

    path = tmp_path / "c.sqlite"
    barrier, errors, caches = threading.Barrier(8), [], []

    def open_and_use(i):
        barrier.wait()
        try:
            cache = ToolCache(path)
            caches.append(cache.get_or_call("echo", {"q": i}, lambda: {"a": i}))
        except Exception as exc:  # noqa: BLE001 - collected and asserted on below
            errors.append(repr(exc))

    threads = [threading.Thread(target=open_and_use, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == [] and len(caches) == 8
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_wal_switch_retries_only_a_locked_database():
    import sqlite3

    from vsearcher_lite.cache import enable_wal

    class Conn:
        def __init__(self, message):
            self.message, self.calls = message, 0

        def execute(self, sql):
            self.calls += 1
            raise sqlite3.OperationalError(self.message)

    locked = Conn("database is locked")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        enable_wal(locked, attempts=3, wait_s=0.0)
    assert locked.calls == 3  # tried three times, then gave up with SQLite's own error
    broken = Conn("disk I/O error")
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        enable_wal(broken, attempts=3, wait_s=0.0)
    assert broken.calls == 1  # anything else is not retried
