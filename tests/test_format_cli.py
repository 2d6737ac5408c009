"""`vsearcher-lite format-check FILE`: one verdict per assistant turn, exit 1 on any failure."""

import json

from agent_fakes import sample_trajectory

from vsearcher_lite.agent.commands import format_check_file
from vsearcher_lite.cli import main

GOOD = (
    "<think>Search.</think>"
    '<tool_call>{"name": "text_search", "arguments": {"query": "x"}}</tool_call>'
)


def write_lines(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_raw_turns(tmp_path, capsys):
    path = write_lines(
        tmp_path / "turns.jsonl",
        [{"turn": GOOD}, {"turn": "<think>a</think><answer>x</answer> extra"}, {"turn": 3}],
    )
    code = main(["format-check", str(path)])
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert code == 1 and lines[0] == "1\tok"
    assert lines[1].startswith("2\ttext_after_action: ") and lines[2].startswith("3\tnot_text: ")
    assert "3 assistant turn(s) checked, 2 failed" in err


def test_trajectory_records(tmp_path, capsys):
    traj = sample_trajectory(tmp_path / "img").to_dict()
    broken = json.loads(json.dumps(traj))
    broken["messages"][4]["content"] = "I will just answer."
    path = write_lines(tmp_path / "trajs.jsonl", [traj, broken])
    code = main(["format-check", str(path)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[:3] == ["1.0\tok", "1.1\tok", "1.2\tok"]
    assert out[4].startswith("2.1\tmissing_think") and len(out) == 6


def test_all_good_exits_zero_and_blank_lines_are_skipped(tmp_path, capsys):
    path = tmp_path / "ok.jsonl"
    # no final newline
    path.write_text(json.dumps({"turn": GOOD}) + "\n\n" + json.dumps({"turn": GOOD}))
    assert main(["format-check", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == ["1\tok", "3\tok"]


def test_malformed_lines_are_named(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"turn": GOOD}) + "\n{not json\n")
    assert main(["format-check", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == ["1\tok"]
    assert (
        err.strip().startswith("vsearcher-lite format-check: error:")
        and "bad.jsonl:2: not valid JSON" in err
    )
    assert len(err.strip().splitlines()) == 1

    other = write_lines(tmp_path / "other.jsonl", [{"text": "x"}])
    assert main(["format-check", str(other)]) == 2
    assert 'other.jsonl:1: expected a trajectory with "messages"' in capsys.readouterr().err
    assert main(["format-check", str(tmp_path / "missing.jsonl")]) == 2
    assert "file not found" in capsys.readouterr().err
    listed = tmp_path / "list.jsonl"
    listed.write_text("[1, 2]\n")
    assert main(["format-check", str(listed)]) == 2
    assert "expected a JSON object" in capsys.readouterr().err


def test_format_check_file_counts(tmp_path):
    import io

    path = write_lines(tmp_path / "t.jsonl", [{"turn": GOOD}, {"turn": "nope"}])
    buf = io.StringIO()
    assert format_check_file(path, out=buf) == (2, 1)
