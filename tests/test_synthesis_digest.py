"""The synthesis stages on the default world write the same bytes as the recorded run.

A restructuring of the library must not change what it produces: this runs world, seeds,
inject-text, inject-image and filter with their defaults and compares a SHA-256 of every file
(metrics.json aside: it holds wall times) with ``fixtures/synthesis_digest.json``. Paths inside the
files are compared relative to the run folder, so the digest does not depend on where the run lives.
"""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

RECORDED = Path(__file__).parent / "fixtures" / "synthesis_digest.json"
STAGES = ("world", "seeds", "inject-text", "inject-image", "filter")


def run_digest(run_dir: Path) -> dict[str, str]:
    """SHA-256 of each file a run wrote (images pooled into one digest), run-folder prefix
    removed."""
    prefix = (str(run_dir) + "/").encode()
    digests, images = {}, hashlib.sha256()
    for path in sorted(run_dir.rglob("*")):
        if not path.is_file() or path.name == "metrics.json":
            continue
        name = path.relative_to(run_dir).as_posix()
        data = path.read_bytes()
        if "/images/" in name:
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
    changed = [name for name in recorded if got[name] != recorded[name]]
    assert not changed, f"files whose bytes changed: {changed}"
