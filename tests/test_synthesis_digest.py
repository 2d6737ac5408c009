"""The synthesis stages on the default world write the same bytes as the recorded run.

A restructuring of the library must not change what it produces: this runs world, seeds,
inject-text, inject-image and filter with their defaults and compares a SHA-256 of every file
(metrics.json aside: it holds wall times) with ``fixtures/synthesis_digest.json``. Paths inside the
files are compared relative to the run folder, so the digest does not depend on where the run lives.

One exception: the world's SQLite store is compared by its rows, and its image features (float16
vectors) by their mean within ``FEATURE_TOLERANCE``: numpy's float32 reductions take different
SIMD paths on different CPUs, so the same pictures give features that differ in their last bits
(and now and then in a float16) from one machine to the next. Every other file, the pictures
included, is the same to the byte.
"""

import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

RECORDED = Path(__file__).parent / "fixtures" / "synthesis_digest.json"
STAGES = ("world", "seeds", "inject-text", "inject-image", "filter")
STORE = "world/world.sqlite"
FEATURE_TOLERANCE = 1e-5


def store_digest(path: Path, prefix: bytes) -> tuple[str, list[float]]:
    """A SHA-256 of every row of every table of a world store (the full-text index aside: it is
    made from the pages), image features left out, and the mean image feature vector."""
    rows, features = hashlib.sha256(), []
    with sqlite3.connect(path) as db:
        tables = dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
        index = [t for t, sql in tables.items() if sql.startswith("CREATE VIRTUAL")]
        for table in sorted(tables):
            if any(table == t or table.startswith(t + "_") for t in index):
                continue
            columns = [c[1] for c in db.execute(f"PRAGMA table_info('{table}')")]
            kept = ", ".join(f'"{c}"' for c in columns if (table, c) != ("images", "feature"))
            for row in db.execute(f"SELECT {kept} FROM '{table}' ORDER BY {kept}"):
                rows.update(repr((table, row)).encode().replace(prefix, b""))
        for (blob,) in db.execute("SELECT feature FROM images ORDER BY id"):
            features.append(np.frombuffer(blob, dtype=np.float16))
    mean = np.mean(features, axis=0, dtype=np.float64)
    return rows.hexdigest(), [round(float(x), 7) for x in mean]


def run_digest(run_dir: Path) -> dict:
    """SHA-256 of each file a run wrote (images pooled into one digest), run-folder prefix
    removed."""
    prefix = (str(run_dir) + "/").encode()
    digests, images = {}, hashlib.sha256()
    for path in sorted(run_dir.rglob("*")):
        if not path.is_file() or path.name == "metrics.json":
            continue
        name = path.relative_to(run_dir).as_posix()
        data = path.read_bytes()
        if name == STORE:
            digests[name], digests["image_features_mean"] = store_digest(path, prefix)
        elif "/images/" in name:
            images.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
        else:
            digests[name] = hashlib.sha256(data.replace(prefix, b"")).hexdigest()
    digests["images"] = images.hexdigest()
    return digests


@pytest.mark.slow
def test_synthesis_outputs_match_the_recorded_digest(tmp_path):
    run_dir = tmp_path / "run"
    for stage in STAGES:
        subprocess.run(
            [sys.executable, "-m", "vsearcher_lite", stage, "--run-dir", str(run_dir)],
            check=True,
            capture_output=True,
            timeout=600,
        )
    recorded = json.loads(RECORDED.read_text())
    got = run_digest(run_dir)
    assert sorted(got) == sorted(recorded)
    features = np.array(got.pop("image_features_mean")), recorded.pop("image_features_mean")
    assert np.allclose(*features, rtol=0, atol=FEATURE_TOLERANCE), "the image features changed"
    changed = [name for name in recorded if got[name] != recorded[name]]
    assert not changed, f"files whose bytes changed: {changed}"
