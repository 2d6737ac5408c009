"""Token usage is reported per LLM role in each stage's metrics.json."""

from vsearcher_lite.agent.judge import LLMJudge
from vsearcher_lite.chat import ChatBackend, ScriptedChat, roles_usage


class Metered(ChatBackend):
    def __init__(self, prompt, completion):
        self.usage = {"prompt_tokens": prompt, "completion_tokens": completion, "requests": 1}

    def chat(self, messages, **sampling):
        return ""


def test_roles_usage_reports_each_backend_once():
    shared, judge_backend = Metered(10, 2), Metered(5, 1)
    usage = roles_usage(
        {
            "writer": shared,
            "filter": type("F", (), {"chat": shared})(),
            "judge": LLMJudge(judge_backend),
            "offline": object(),
            "scripted": ScriptedChat([]),
        }
    )
    assert usage == {"writer+filter": shared.usage, "judge": judge_backend.usage}


def test_a_filter_role_exposes_its_backend_usage(tmp_path):
    from vsearcher_lite.agent.judge import MatchJudge
    from vsearcher_lite.agent.task import Task
    from vsearcher_lite.synthesis.filters import DirectAnswerLLM

    backend = Metered(7, 3)
    f = DirectAnswerLLM(backend, MatchJudge(), with_image=False)
    f.label(Task(id="t", question="Which year?", answer="1874"))
    assert roles_usage({f.name: f}) == {"can_be_directly_answered_with_text": backend.usage}
