"""The agent (paper 2.2, A.1, A.3): one protocol, the ReAct loop, judges, teachers, exports.

Modules, in the order a reader meets them:

    task          the task record every stage passes on (question, answer, image, level)
    protocol      the one system prompt, tags, question and tool-response turns
    format        strict_format_check / parse_tool_call (paper A.3), pure and fuzzed
    judge         Judge, MatchJudge (offline), LLMJudge (HLE/BrowseComp style), make_judge
    loop          run_episode -> Trajectory, with limits and one termination reason
    teacher       HeuristicTeacher (sandbox), with brief (what it knows) and reading (its eyes)
    export        TRL, LLaMA-Factory ShareGPT and plain JSONL exports
    commands      CLI: `format-check`

The stage that runs the teacher and keeps what it gets right is ``synthesis.trajectories``.
"""
