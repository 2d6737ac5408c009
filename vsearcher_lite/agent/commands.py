"""CLI: ``vsearcher-lite format-check FILE``, the strict format check of a file of turns."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

from vsearcher_lite.agent.format import strict_format_check
from vsearcher_lite.chat import message_text
from vsearcher_lite.runio import InputError, read_jsonl_numbered


def assistant_turns(record: dict, where: str) -> Iterator[tuple[str, object]]:
    """``(label, turn)`` for each assistant turn of one JSONL record: a trajectory
    (``messages``) or one raw turn (``{"turn": "..."}``)."""
    if "turn" in record:
        yield "", record["turn"]
        return
    messages = record.get("messages")
    if not isinstance(messages, list):
        raise InputError(f'{where}: expected a trajectory with "messages" or a raw turn '
                         '{"turn": "..."}')
    index = 0
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "assistant":
            content = message.get("content")
            if not (content is None or isinstance(content, (str, list))):
                raise InputError(f"{where}: assistant message {index}: content must be text or a "
                                 f"list of parts, got {type(content).__name__}")
            yield f".{index}", message_text(message) if isinstance(content, list) else content
            index += 1


def format_check_file(path: str | Path, out=None) -> tuple[int, int]:
    """Print one verdict per assistant turn (``LINE[.TURN]<TAB>ok`` or the reason); returns
    ``(n_turns, n_failed)``."""
    out = out if out is not None else sys.stdout
    path = Path(path)
    n_turns = n_failed = n_records = 0
    # strict: a user's file is being validated, so even a last line without its newline must parse
    for number, record in read_jsonl_numbered(path, tolerate_torn_tail=False):
        n_records += 1
        for label, turn in assistant_turns(record, f"{path}:{number}"):
            verdict = strict_format_check(turn)
            n_turns += 1
            n_failed += 0 if verdict.ok else 1
            print(f"{number}{label}\t{verdict}", file=out)
    if not n_records:
        raise InputError(f"{path}: no records to check (the file is empty)")
    return n_turns, n_failed


def _cmd_format_check(args) -> int:
    n_turns, n_failed = format_check_file(args.file)
    print(f"{n_turns} assistant turn(s) checked, {n_failed} failed", file=sys.stderr)
    return 1 if n_failed else 0


def register(subparsers, common) -> None:
    f = subparsers.add_parser(
        "format-check", parents=[common],
        help="check assistant turns against the strict agent format",
        description="Check every assistant turn of FILE with the strict format check (paper A.3). "
                    'FILE is JSONL: trajectories (records with "messages") or raw turns '
                    '({"turn": "..."}). Prints LINE[.TURN] and \'ok\' or the reason for each '
                    "turn; exits 1 if any turn fails.")
    f.add_argument("file", help="a JSONL file of trajectories or of {\"turn\": ...} records")
    f.set_defaults(func=_cmd_format_check)
