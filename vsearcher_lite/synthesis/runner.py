"""Running many tasks: in item order, with bounded threads, a drop counted rather than raised."""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable

from vsearcher_lite.agent.task import Task
from vsearcher_lite.synthesis.synthesizer import TaskDropped
from vsearcher_lite.synthesis.writer import WriterError


def process_in_order(
    items: Iterable,
    work: Callable[[Any], Any],
    *,
    need: int | None,
    is_success: Callable[[Any], bool],
    on_result: Callable[[Any, Any], None],
    concurrency: int = 1,
) -> int:
    """Run ``work`` over ``items`` in order until ``need`` successes; return the successes.

    At most ``concurrency`` items are in flight, and never more than could still be needed, so
    the successes are exactly the first ``need`` successful items, whatever the thread timing.
    ``on_result`` is called in item order, from this thread only (safe for file appends)."""
    need = float("inf") if need is None else need
    successes = 0
    if need <= 0:
        return 0
    it = iter(items)
    if concurrency <= 1:
        for item in it:
            result = work(item)
            on_result(item, result)
            successes += bool(is_success(result))
            if successes >= need:
                break
        return successes
    pending: deque = deque()
    pool = ThreadPoolExecutor(max_workers=concurrency)
    try:
        exhausted = False
        while True:
            while not exhausted and len(pending) < concurrency and successes + len(pending) < need:
                try:
                    item = next(it)
                except StopIteration:
                    exhausted = True
                    break
                pending.append((item, pool.submit(work, item)))
            if not pending:
                break
            item, future = pending.popleft()
            result = future.result()
            on_result(item, result)
            successes += bool(is_success(result))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return successes


def guarded(fn: Callable[[], Task]) -> Task | TaskDropped:
    """Run one task; a drop (or an unexpected error) becomes a ``TaskDropped`` value."""
    try:
        return fn()
    except TaskDropped as exc:
        return exc
    except WriterError as exc:
        return TaskDropped(exc.reason, exc.detail)
    except LookupError as exc:
        return TaskDropped("page_not_found", str(exc))
    except Exception as exc:  # a bug must not end a long run; it is counted and shown in metrics
        return TaskDropped(f"internal_error:{type(exc).__name__}", str(exc))


def drop_record(tid: str, item: dict, dropped: TaskDropped, stage: str) -> dict:
    return {
        "id": tid,
        "stage": stage,
        "reason": dropped.reason,
        "detail": dropped.detail[:300],
        "round": dropped.round,
        **{k: item[k] for k in ("seed_id", "split", "difficulty") if k in item},
    }
