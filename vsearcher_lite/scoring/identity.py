"""Resume identity: what stored evaluation results were made with, and when they may be reused.

``RUN_DIR/eval/<name>/config.json`` holds ``run_identity``; a rerun under the same name resumes
only when its identity matches (``guard_resume``). The runner, the comparison and the GRPO
stage's reuse check all compare identities here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

from vsearcher_lite.agent.judge import Judge
from vsearcher_lite.agent.loop import TRANSIENT_TERMINATIONS
from vsearcher_lite.agent.task import Task
from vsearcher_lite.manifest import scrub_secrets
from vsearcher_lite.runio import InputError, JsonlLog, RunDir, atomic_write_json, read_json
from vsearcher_lite.scoring.policies import Policy


def previous_results(log: JsonlLog, tasks: list[Task]) -> dict[str, dict]:
    """The latest result of each task that still matches its question and answer, leaving out
    episodes that ended on a policy error (a rerun runs those again)."""
    wanted = {t.id: t for t in tasks}
    latest: dict[str, dict] = {}
    for r in log.records():
        task = wanted.get(str(r.get("id")))
        if (task is not None and r.get("question") == task.question
                and r.get("answer") == task.answer):
            latest[task.id] = r
    return {k: r for k, r in latest.items() if r.get("termination") not in TRANSIENT_TERMINATIONS}


def stored_changes(out: Path, identity: dict) -> list[str]:
    """The settings ``identity`` changes against the results stored in ``out`` (none stored: []).
    Results of different policies or settings never mix under one eval name: ``InputError``
    unless nothing or only ``weights`` (a checkpoint retrained at the same path) changed."""
    config_file, results = out / "config.json", out / "results.jsonl"
    if not (config_file.exists() and results.exists() and results.stat().st_size > 0):
        return []
    before = read_json(config_file)
    changed = changed_settings(before, identity, out.parent.parent)
    if changed and changed != ["weights"]:
        raise InputError(
            f"{out} holds results made with other settings ({', '.join(changed)}: "
            f"{before.get(changed[0])!r} there, {identity[changed[0]]!r} now); use another "
            "--name or --fresh")
    return changed


def guard_resume(out: Path, identity: dict, fresh: bool,
                 log: Callable[[str], None] = print) -> None:
    """Refuse to mix results of different policies or settings under one eval name
    (``stored_changes``); results of a checkpoint since retrained at the same path (other
    ``weights``) are stale and start over."""
    results = out / "results.jsonl"
    if fresh:
        results.unlink(missing_ok=True)
    elif stored_changes(out, identity) == ["weights"]:
        log(f"[eval] {out.name}: the checkpoint has other weights than its stored results were "
            "made with: evaluating again")
        results.unlink()
    atomic_write_json(out / "config.json", identity)


def run_identity(policy: Policy, config, judge: Judge) -> dict:
    """What an evaluation's results depend on: the policy, every result setting and the judge.
    Greedy decoding does not read the seed, so at temperature 0 a run under another ``--seed``
    (GRPO's, say) reuses the same results."""
    settings = config.result_settings()
    if config.temperature == 0 and not policy.uses_seed:
        settings.pop("seed")
    identity = {"policy": policy.name, "policy_spec": policy.spec, "tools": policy.tools,
                **settings, "judge": getattr(judge, "name", type(judge).__name__)}
    fingerprint = weights_fingerprint(policy.spec)
    if fingerprint:
        identity["weights"] = fingerprint
    chat = getattr(judge, "chat", None)  # an LLM judge behind an endpoint: which model judged
    if isinstance(getattr(chat, "model", None), str):
        identity["judge_model"] = f"{chat.model}@{getattr(chat, 'base_url', '')}"
    return scrub_secrets(identity)


HASHED_WEIGHTS_MB = 256  # larger checkpoints are fingerprinted by file sizes and times, not content


def weights_fingerprint(spec: str) -> str | None:
    """A fingerprint of a local checkpoint's weight files (None for other policies), so results
    of a checkpoint retrained at the same path are never reused. Hashed by content up to
    ``HASHED_WEIGHTS_MB`` (a copied run keeps its results), else by names, sizes and times."""
    rest = spec[len("direct:"):] if spec.startswith("direct:") else spec
    if not rest.startswith("transformers:"):
        return None
    folder = Path(rest[len("transformers:"):]).expanduser()
    files = sorted(p for p in folder.glob("*") if p.suffix in (".safetensors", ".bin")
                   and p.is_file()) if folder.is_dir() else []
    if not files:
        return None
    digest = hashlib.sha256()
    by_content = sum(p.stat().st_size for p in files) <= HASHED_WEIGHTS_MB * 2**20
    for p in files:
        digest.update(p.name.encode())
        if by_content:
            with p.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        else:
            stat = p.stat()
            digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def canonical_spec(spec: str, *, follow_links: bool = True) -> str:
    """A policy spec with any local checkpoint path made absolute, so one checkpoint named from
    two working folders compares equal; ``follow_links=False`` keeps a linked checkpoint's path.

    >>> canonical_spec("teacher"), canonical_spec("openai:m@http://h:8000/v1")
    ('teacher', 'openai:m@http://h:8000/v1')
    """
    prefix, rest = ("direct:", spec[len("direct:"):]) if spec.startswith("direct:") else ("", spec)
    if rest.startswith("transformers:"):
        path = Path(rest[len("transformers:"):]).expanduser()
        if path.exists():
            return f"{prefix}transformers:{path.resolve() if follow_links else path.absolute()}"
    return spec


def canonical_identity(identity: dict, *, follow_links: bool = True) -> dict:
    """``identity`` with its policy spec in canonical form (``canonical_spec``)."""
    out = dict(identity)
    if isinstance(out.get("policy_spec"), str):
        out["policy_spec"] = canonical_spec(out["policy_spec"], follow_links=follow_links)
    return out


def stored_identity(identity: dict, run_dir: str | Path) -> dict:
    """``identity`` as ``config.json`` stores it: a checkpoint in the run named relative to it."""
    return RunDir(run_dir).relative(canonical_identity(identity, follow_links=False))


def changed_settings(before: dict, identity: dict, run_dir: str | Path | None = None) -> list[str]:
    """The keys of ``identity`` whose values differ in ``before`` (checkpoint paths compared
    resolved, and relative to ``run_dir`` when given, as its files store them)."""
    if run_dir is not None:
        before, identity = stored_identity(before, run_dir), stored_identity(identity, run_dir)
    a, b = canonical_identity(before), canonical_identity(identity)
    return sorted(k for k in b if a.get(k) != b[k])
