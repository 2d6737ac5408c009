"""The four filters, each on crafted tasks, plus the LLM/VLM versions and the funnel bookkeeping."""

from test_synth_support import flag_image, rich_image, tiny_world

from vsearcher_lite.agent.judge import MatchJudge
from vsearcher_lite.agent.task import ImageInjection, InjectionRound, Task
from vsearcher_lite.chat import ChatError, ScriptedChat
from vsearcher_lite.synthesis.describe import OUT, Constraint, FactIndex
from vsearcher_lite.synthesis.filters import (
    FILTER_ORDER,
    AnswerInQuestion,
    DirectAnswerLLM,
    ImageComplexity,
    ImageJudgeVLM,
    RetrievalShortcut,
    TextOnlyChain,
    first_removal,
    funnel_rows,
    is_kept,
    label_task,
    parse_yes_no,
)
from vsearcher_lite.tools.base import SearchHit
from vsearcher_lite.world.images import perturb_image


def task(question="Who designed the bridge shown in the image?", answer="Ilsa Maren", **kw):
    return Task(id=kw.pop("id", "t1"), question=question, answer=answer, **kw)


def test_answer_leak_ignores_case_and_punctuation():
    f = AnswerInQuestion()
    assert f.label(task("Which bridge did ILSA MAREN design, shown in the image?")).removes is True
    assert f.label(task("Which bridge did ilsa-maren design?")).removes is True
    assert (
        f.label(task("Who designed the bridge in the image?", aliases=["I. Maren"])).removes
        is False
    )
    assert (
        f.label(task("Who designed the bridge of I. Maren?", aliases=["I. Maren"])).removes is True
    )
    # whole words only
    assert f.label(task("Which bridge did Ilsa Marenko design?")).removes is False
    assert f.label(task("In what year, after 18745, was it built?", answer="1874")).removes is False


def test_image_complexity_separates_flags_from_pictures(tmp_path):
    f = ImageComplexity()
    simple = perturb_image(flag_image(tmp_path / "flag.png"), tmp_path / "flag.jpg", 3)
    rich = perturb_image(rich_image(tmp_path / "rich.png", 1), tmp_path / "rich.jpg", 3)
    s, r = f.label(task(image_path=str(simple))), f.label(task(image_path=str(rich)))
    assert s.removes is True and r.removes is False
    assert s.detail["entropy"] < r.detail["entropy"]
    assert f.label(task(image_path=str(tmp_path / "missing.jpg"))).removes is None
    assert f.label(task(image_path=None)).removes is True


class FakeSearch:
    def __init__(self, hits):
        self.hits = hits
        self.queries = []

    def search(self, query, k=5):
        self.queries.append(query)
        return self.hits[:k]


def test_retrieval_shortcut():
    seed_url = {"B1": "https://wiki.sandbox.test/wiki/Orsk_Bridge"}.get
    t = task(seed_id="B1")
    other = SearchHit("https://wiki.sandbox.test/wiki/Brenna", "Brenna", "A town on the Drun.")
    hit_seed = SearchHit("https://wiki.sandbox.test/wiki/Orsk_Bridge", "Orsk Bridge", "A bridge.")
    hit_answer = SearchHit(
        "https://wiki.sandbox.test/news/1", "News", "The bridge, designed by ilsa maren, opened."
    )
    search = FakeSearch([other, hit_seed])
    # rank 2 is not a shortcut
    assert RetrievalShortcut(search, seed_url=seed_url).label(t).removes is False
    assert search.queries == [t.question]
    assert RetrievalShortcut(FakeSearch([hit_seed]), seed_url=seed_url).label(t).removes is True
    assert RetrievalShortcut(FakeSearch([hit_answer]), seed_url=seed_url).label(t).removes is True
    assert RetrievalShortcut(FakeSearch([]), seed_url=seed_url).label(t).removes is False


def chain_task(index, image_entity, image_type, constraint):
    t = Task(id="c", question="q", answer="1874", seed_id="B1", answer_relation="year_built")
    cons = [index.noun_constraint("B1").to_dict(), constraint.to_dict()]
    t.rounds.append(InjectionRound(1, "B1", "Orsk Bridge", {}, "d", "a", "b", "building", cons))
    t.image = ImageInjection(image_entity, "x", "", "", "b", "q", image_type)
    return t


def test_text_only_chain(tmp_path):
    world = tiny_world(tmp_path)
    index = FactIndex.from_source(world)
    f = TextOnlyChain(index)
    # "the bridge located in <town image>": Orsk or Brenna, built 1874 or 1880 -> the image is
    # needed
    needs_image = chain_task(index, "S1", "settlement", Constraint("located_in", OUT, "S1"))
    assert f.label(needs_image).removes is False
    # "the bridge that crosses <river image>": the world has one river and one bridge over it
    text_is_enough = chain_task(index, "V1", "river", Constraint("crosses", OUT, "V1"))
    assert f.label(text_is_enough).removes is True
    # with a budget of zero candidates no step is cheap enough to count as a direct answer
    assert TextOnlyChain(index, max_candidates=0).label(text_is_enough).removes is False
    assert f.label(task()).removes is None  # nothing structured to solve


def test_direct_answer_llm_is_judged():
    judge = MatchJudge()
    right = DirectAnswerLLM(ScriptedChat(["**Ilsa Maren**"]), judge, with_image=False)
    assert right.label(task()).removes is True
    wrong = DirectAnswerLLM(ScriptedChat(["Tomas Brecht"]), judge, with_image=False)
    assert wrong.label(task()).removes is False

    chat = ScriptedChat(["Ilsa Maren"])
    vlm = DirectAnswerLLM(chat, judge, with_image=True)
    assert vlm.label(task(image_path="/img/q.jpg")).removes is True
    parts = chat.calls[0]["messages"][0]["content"]
    assert parts[1] == {"type": "image", "image": "/img/q.jpg"}

    def broken(messages):
        raise ChatError("http://127.0.0.1:9/v1: connection refused")

    assert (
        DirectAnswerLLM(ScriptedChat(broken), judge, with_image=False).label(task()).removes is None
    )


def test_image_judge_vlm_reads_yes_and_no():
    assert parse_yes_no("Yes.") is True and parse_yes_no("no, it is a rich photo") is False
    assert parse_yes_no("It depends") is None and parse_yes_no("") is None
    assert ImageJudgeVLM(ScriptedChat(["YES"])).label(task(image_path="/q.jpg")).removes is True
    assert (
        ImageJudgeVLM(ScriptedChat(["hmm", "No"])).label(task(image_path="/q.jpg")).removes is False
    )
    assert (
        ImageJudgeVLM(ScriptedChat(["hmm", "maybe"])).label(task(image_path="/q.jpg")).removes
        is None
    )


class Fixed:
    def __init__(self, name, removes):
        self.name, self.removes = name, removes

    def label(self, t):
        from vsearcher_lite.synthesis.filters import FilterLabel

        if self.removes == "boom":
            raise RuntimeError("backend down")
        return FilterLabel(self.removes, "")


def test_labels_kept_and_funnel():
    filters = [
        Fixed(FILTER_ORDER[0], False),
        Fixed(FILTER_ORDER[1], True),
        Fixed(FILTER_ORDER[2], False),
        Fixed(FILTER_ORDER[3], True),
    ]
    labeled = label_task(task(difficulty="easy"), filters).to_dict()
    assert labeled["filters"] == dict(zip(FILTER_ORDER, [False, True, False, True]))
    assert not is_kept(labeled) and first_removal(labeled) == "image_too_simple"
    short = label_task(task(), filters, short_circuit=True).to_dict()
    assert list(short["filters"]) == list(FILTER_ORDER[:2])
    clean = label_task(
        task(id="t2", difficulty="easy"), [Fixed(n, False) for n in FILTER_ORDER]
    ).to_dict()
    assert is_kept(clean)
    failing = label_task(
        task(id="t3", difficulty="easy"), [Fixed(n, "boom") for n in FILTER_ORDER]
    ).to_dict()
    assert not is_kept(failing) and first_removal(failing) == "unverified"
    assert "backend down" in failing["extra"]["filter_details"][FILTER_ORDER[0]]
    rows = [r for r in funnel_rows([labeled, clean, failing]) if r["difficulty"] == "easy"]
    assert [r["remaining"] for r in rows] == [3, 3, 2, 2, 2, 1]
