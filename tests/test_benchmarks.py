"""Benchmark loaders: the released MM-SearchExam format and the MMSearch, BrowseComp-VL, SimpleVQA
and task formats, written here as small files; image cache; `eval --check`. No network."""

import base64
import io
import json

import httpx
import pytest
from PIL import Image

from vsearcher_lite.cli import main
from vsearcher_lite.evaluation import benchmarks as bm
from vsearcher_lite.net.guard import UrlGuard
from vsearcher_lite.net.http import HttpClient
from vsearcher_lite.runio import InputError

HOST = "https://raw.githubusercontent.com/image-storage-rl/image_storage/refs/heads/main/data_synthesis"
LONG_QUESTION = (
    " ".join(
        ["In the harbour town shown in the image, a bridge that a guild of glassmakers paid for"]
        * 25
    )
    + " — what is the name of the river it crosses?"
)


def png_bytes(colour=(200, 30, 30), size=(8, 8), fmt="PNG") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format=fmt)
    return buf.getvalue()


def write_jsonl(path, rows):
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    return path


def exam_rows():
    return [
        {
            "question": "In which city is the church shown in the image?",
            "image_path": f"{HOST}/a1b2c3d4e5f6_Hallgrimskirkja.jpg",
            "answer": "Reykjavík",
        },
        {
            "question": LONG_QUESTION,
            "image_path": f"{HOST}/0f0f0f0f0f0f_Bridge_2C_river.png",
            "answer": "Zürich–Limmat",
        },
        {
            "question": "Which prefecture's capital hosts the tower shown in the image?",
            "image_path": f"{HOST}/a1b2c3d4e5f6_Hallgrimskirkja.jpg",
            "answer": "東京都",
        },
        {
            "question": "In which year was the museum shown in the image founded?",
            "image_path": f"{HOST}/123456abcdef_Museum.jpeg",
            "answer": 1874,
        },
    ]


# ---------------------------------------------------------------------------------------------
# MM-SearchExam, the released format


def test_mmsearchexam_rows_become_tasks_with_non_ascii_answers_and_long_questions(tmp_path):
    path = write_jsonl(tmp_path / "mmsearchexam.jsonl", exam_rows())
    fmt, rows = bm.read_rows(path)
    assert fmt == "mmsearchexam"
    assert [r.answer for r in rows] == ["Reykjavík", "Zürich–Limmat", "東京都", "1874"]
    assert rows[1].question == LONG_QUESTION and len(rows[1].question.split()) > 291
    assert [r.id for r in rows] == [
        "mmsearchexam-0001",
        "mmsearchexam-0002",
        "mmsearchexam-0003",
        "mmsearchexam-0004",
    ]
    assert all(r.image.kind == "url" for r in rows) and rows[0].where.endswith(
        "mmsearchexam.jsonl:1"
    )
    report = bm.check_benchmark(path)
    assert (report["n_rows"], report["n_with_images"], report["n_distinct_images"]) == (4, 4, 3)
    assert report["groups"] == {"exam": 4}


def test_a_missing_field_names_the_line_and_the_field(tmp_path):
    rows = exam_rows()
    del rows[2]["answer"]
    path = write_jsonl(tmp_path / "exam.jsonl", rows)
    with pytest.raises(
        InputError, match=r"exam\.jsonl:3: missing field 'answer' \(MM-SearchExam rows have"
    ):
        bm.read_rows(path)
    rows = exam_rows()
    del rows[1]["image_path"]
    with pytest.raises(InputError, match=r"exam\.jsonl:2: missing field 'image_path'"):
        bm.read_rows(write_jsonl(tmp_path / "exam.jsonl", rows))


def test_bad_json_empty_fields_and_unknown_shapes_are_named(tmp_path):
    path = tmp_path / "exam.jsonl"
    path.write_text(json.dumps(exam_rows()[0]) + '\n\n{"question": \n', encoding="utf-8")
    with pytest.raises(InputError, match=r"exam\.jsonl:3: not valid JSON"):
        bm.read_rows(path)
    rows = exam_rows()
    rows[0]["question"] = "   "
    with pytest.raises(InputError, match=r"exam\.jsonl:1: field 'question' is empty"):
        bm.read_rows(write_jsonl(path, rows))
    with pytest.raises(
        InputError, match=r"exam\.jsonl:1: cannot tell the benchmark format .*--format"
    ):
        bm.read_rows(write_jsonl(path, [{"prompt": "x", "target": "y"}]))
    with pytest.raises(InputError, match=r"exam\.jsonl:1: missing field 'query'"):
        bm.read_rows(write_jsonl(path, exam_rows()), format="mmsearch")
    with pytest.raises(InputError, match="unknown benchmark format 'nope'"):
        bm.read_rows(path, format="nope")
    with pytest.raises(InputError, match="file not found"):
        bm.read_rows(tmp_path / "missing.jsonl")
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="no rows"):
        bm.read_rows(path)


def test_duplicate_ids_are_refused(tmp_path):
    rows = [
        {"id": "t1", "question": "q1", "answer": "a", "difficulty": "easy"},
        {"id": "t1", "question": "q2", "answer": "b", "difficulty": "easy"},
    ]
    with pytest.raises(
        InputError, match=r"tasks\.jsonl:2: id 't1' was already used at .*tasks\.jsonl:1"
    ):
        bm.read_rows(write_jsonl(tmp_path / "tasks.jsonl", rows))


def test_downloads_are_content_addressed_cached_and_reused(tmp_path):
    path = write_jsonl(tmp_path / "mmsearchexam.jsonl", exam_rows())
    # the same picture under another URL
    pictures = {
        exam_rows()[0]["image_path"]: png_bytes((10, 20, 30)),
        exam_rows()[1]["image_path"]: png_bytes((90, 20, 30), fmt="JPEG"),
        exam_rows()[3]["image_path"]: png_bytes((10, 20, 30)),
    }
    fetched = []

    def fetch(url):
        fetched.append(url)
        return pictures[url]

    cache_dir = tmp_path / "images"
    tasks = bm.load_benchmark(path, image_dir=cache_dir, fetch=fetch)
    assert len(fetched) == 3 and len(tasks) == 4
    files = sorted(p.name for p in cache_dir.iterdir() if p.suffix in (".png", ".jpg"))
    assert len(files) == 2  # two distinct pictures behind three URLs
    assert tasks[0].image_path == tasks[2].image_path == tasks[3].image_path
    assert tasks[1].image_path.endswith(".jpg") and tasks[0].image_path.endswith(".png")
    assert tasks[0].extra["image_url"] == exam_rows()[0]["image_path"]
    assert (
        tasks[2].answer == "東京都"
        and tasks[0].split == "mmsearchexam"
        and tasks[0].difficulty == "exam"
    )
    assert not list(cache_dir.glob(".*.tmp"))
    again = bm.load_benchmark(path, image_dir=cache_dir, fetch=fetch)
    assert len(fetched) == 3  # nothing downloaded twice
    assert [t.image_path for t in again] == [t.image_path for t in tasks]


def test_url_mode_keeps_urls_and_downloads_nothing(tmp_path):
    path = write_jsonl(tmp_path / "mmsearchexam.jsonl", exam_rows())

    def fetch(url):
        raise AssertionError("nothing should be downloaded")

    tasks = bm.load_benchmark(path, image_dir=tmp_path / "img", image_mode="url", fetch=fetch)
    assert tasks[0].image_path == exam_rows()[0]["image_path"]


def _guarded_client(resolve_to: str, body: bytes, content_type="image/png"):
    def resolver(host, port, *a, **k):
        return [(2, 1, 6, "", (resolve_to, port))]

    def app(request):
        return httpx.Response(200, content=body, headers={"Content-Type": content_type})

    return HttpClient(
        "test images",
        guard=UrlGuard(resolver=resolver),
        transport=httpx.MockTransport(app),
        max_retries=0,
    )


def test_downloads_go_through_the_ssrf_guard(tmp_path):
    path = write_jsonl(tmp_path / "mmsearchexam.jsonl", exam_rows()[:1])
    ok = bm.load_benchmark(
        path, image_dir=tmp_path / "a", client=_guarded_client("93.184.215.14", png_bytes())
    )
    assert ok[0].image_path.endswith(".png")
    with pytest.raises(InputError, match=r"mmsearchexam\.jsonl:1: .*private address"):
        bm.load_benchmark(
            path, image_dir=tmp_path / "b", client=_guarded_client("10.0.0.5", png_bytes())
        )
    with pytest.raises(InputError, match=r"mmsearchexam\.jsonl:1: .*not a readable image"):
        bm.load_benchmark(
            path,
            image_dir=tmp_path / "c",
            client=_guarded_client("93.184.215.14", b"<html>gone</html>", "text/html"),
        )


def test_skip_bad_images_leaves_the_row_out_and_says_which(tmp_path):
    path = write_jsonl(tmp_path / "mmsearchexam.jsonl", exam_rows())

    def fetch(url):
        if "Museum" in url:
            raise InputError(f"{url}: 404 not found")
        return png_bytes()

    with pytest.raises(InputError, match=r"mmsearchexam\.jsonl:4: .*404"):
        bm.load_benchmark(path, image_dir=tmp_path / "img", fetch=fetch)
    report = bm.load_benchmark_report(
        path, image_dir=tmp_path / "img", fetch=fetch, skip_bad_images=True
    )
    assert [t.id for t in report["tasks"]] == [
        "mmsearchexam-0001",
        "mmsearchexam-0002",
        "mmsearchexam-0003",
    ]
    assert len(report["skipped"]) == 1 and ":4:" in report["skipped"][0]


# ---------------------------------------------------------------------------------------------
# BrowseComp-VL, MMSearch, SimpleVQA, tasks


def test_browsecomp_vl_answers_list_levels_and_domain(tmp_path):
    rows = [
        {
            "question": "Which country produced the film shown on this website in the image?",
            "image_path": "https://example.test/browsecomp_vl/level2/level2_1.jpg",
            "answers": ["United States", "USA"],
            "domain": "TV",
        },
        {
            "question": "Who founded the company shown in the image?",
            "image_path": "https://example.test/b/level2_2.jpg",
            "answers": ["Mounira Mitchala."],
            "domain": "Music",
        },
    ]
    path = write_jsonl(tmp_path / "bc_vl_level2.jsonl", rows)
    fmt, parsed = bm.read_rows(path)
    assert fmt == "browsecomp-vl"
    assert parsed[0].answer == "United States" and parsed[0].aliases == ["USA"]
    assert {r.group for r in parsed} == {"level2"} and parsed[1].meta == {"domain": "Music"}
    rows[1]["answers"] = []
    with pytest.raises(InputError, match=r"bc_vl_level2\.jsonl:2: field 'answers' is empty"):
        bm.read_rows(write_jsonl(path, rows))
    rows[1]["answers"] = [{"text": "x"}]
    with pytest.raises(InputError, match=r":2: field 'answers' holds a dict"):
        bm.read_rows(write_jsonl(path, rows))
    assert bm.level_from(tmp_path / "bc.jsonl", "https://x/level1/level1_5.jpg") == "level1"


def test_mmsearch_embedded_images_alternatives_and_text_only_rows(tmp_path):
    picture = png_bytes((0, 120, 0))
    rows = [
        {
            "sample_id": "1",
            "query": "What is the name of the car model shown in the image?",
            "query_image": {"bytes": base64.b64encode(picture).decode(), "path": "q1.png"},
            "gt_answer": "Model Ω",
            "alternative_gt_answers": ["Omega"],
            "area": "news",
            "subfield": "auto",
            "timestamp": "2024-06",
        },
        {
            "sample_id": "2",
            "query": "Who won the 2024 chess olympiad?",
            "query_image": None,
            "gt_answer": "India",
            "alternative_gt_answers": [],
            "area": "knowledge",
            "subfield": "sport",
            "timestamp": "2024-09",
        },
    ]
    path = write_jsonl(tmp_path / "end2end.jsonl", rows)
    report = bm.check_benchmark(path)
    assert report["format"] == "mmsearch"
    assert (report["n_rows"], report["n_with_images"], report["n_distinct_images"]) == (2, 1, 1)
    assert not (tmp_path / "img").exists()  # checking writes nothing
    tasks = bm.load_benchmark(path, image_dir=tmp_path / "img", images_only=True)
    assert [t.id for t in tasks] == ["mmsearch-1"]
    assert tasks[0].aliases == ["Omega"] and tasks[0].difficulty == "news"
    assert (tmp_path / "img" / bm.content_name(picture, "PNG")).read_bytes() == picture
    rows[0]["query_image"] = {
        "bytes": base64.b64encode(b"not an image at all, just text bytes").decode()
    }
    with pytest.raises(
        InputError,
        match=r"end2end\.jsonl:1: field 'query_image': the embedded data is not a readable image",
    ):
        bm.read_rows(write_jsonl(path, rows))


def test_mmsearch_parquet_as_the_hub_ships_it(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pictures = [png_bytes((1, 2, 3)), png_bytes((4, 5, 6))]
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table(
        {
            "sample_id": ["10", "11", "12"],
            "query": [
                "Which bridge is shown in the image?",
                "Which lake is shown in the image?",
                "Who wrote Faust?",
            ],
            "query_image": pa.array(
                [
                    {"bytes": pictures[0], "path": "a.png"},
                    {"bytes": pictures[1], "path": "b.png"},
                    None,
                ],
                type=image_type,
            ),
            "gt_answer": ["Öresund Bridge", "Lake Baikal", "Goethe"],
            "alternative_gt_answers": [["Øresundsbroen"], [], ["Johann Wolfgang von Goethe"]],
            "area": ["news", "news", "knowledge"],
        }
    )
    path = tmp_path / "end2end.parquet"
    pq.write_table(table, path)
    report = bm.check_benchmark(path)
    assert (
        report["format"],
        report["n_rows"],
        report["n_with_images"],
        report["n_distinct_images"],
    ) == ("mmsearch", 3, 2, 2)
    tasks = bm.load_benchmark(path, image_dir=tmp_path / "img")
    assert tasks[0].answer == "Öresund Bridge" and tasks[0].aliases == ["Øresundsbroen"]
    assert tasks[2].image_path is None and tasks[0].extra["source_line"].endswith("row 1")
    assert open(tasks[1].image_path, "rb").read() == pictures[1]


def test_simplevqa_json_array_with_base64_images_language_and_sample(tmp_path):
    items = []
    for i in range(6):
        lang = "EN" if i % 2 == 0 else "CN"
        items.append(
            {
                "data_id": i,
                "image": base64.b64encode(png_bytes((i * 30, 10, 10))).decode(),
                "image_description": "",
                "language": lang,
                "question": "What is the landmark in the image?"
                if lang == "EN"
                else "图中所示的建筑叫什么名字？",
                "answer": f"Tower {i}" if lang == "EN" else "天坛",
                "original_category": "culture",
                "source": "wiki",
                "atomic_question": "",
                "atomic_fact": "",
                "vqa_category": "landmark",
            }
        )
    path = tmp_path / "simpleVQA.json"
    path.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    report = bm.check_benchmark(path)
    assert (
        report["format"] == "simplevqa"
        and report["n_rows"] == 6
        and report["n_distinct_images"] == 6
    )
    english = bm.check_benchmark(path, language="en")
    assert english["n_rows"] == 3
    sample_a = bm.load_benchmark(path, image_dir=tmp_path / "img", language="EN", sample=2, seed=1)
    sample_b = bm.load_benchmark(path, image_dir=tmp_path / "img", language="EN", sample=2, seed=1)
    assert [t.id for t in sample_a] == [t.id for t in sample_b] and len(sample_a) == 2
    assert all(t.id.startswith("simplevqa-") and t.extra["language"] == "EN" for t in sample_a)
    chinese = bm.load_benchmark(path, image_dir=tmp_path / "img", language="CN")
    assert chinese[0].answer == "天坛" and chinese[0].question.startswith("图中")
    items[4].pop("image")
    path.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(InputError, match=r"simpleVQA\.json: item 5: missing field 'image'"):
        bm.read_rows(path)


def test_project_task_files_resolve_relative_images(tmp_path):
    folder = tmp_path / "filter"
    (folder / "img").mkdir(parents=True)
    Image.new("RGB", (8, 8), "blue").save(folder / "img" / "t1.jpg")
    rows = [
        {
            "id": "t1",
            "question": "Which river flows past the bridge shown in the image?",
            "answer": "Zanura",
            "image_path": "img/t1.jpg",
            "difficulty": "hard",
            "split": "heldout",
            "aliases": ["Zanura River"],
        },
        {
            "id": "t2",
            "question": "In which year was Orsk founded?",
            "answer": "1874",
            "difficulty": "exam",
            "split": "exam",
        },
    ]
    path = write_jsonl(folder / "heldout.jsonl", rows)
    tasks = bm.load_benchmark(path)
    assert tasks[0].image_path == str((folder / "img" / "t1.jpg").resolve())
    assert (
        tasks[0].difficulty == "hard"
        and tasks[0].split == "heldout"
        and tasks[0].aliases == ["Zanura River"]
    )
    assert tasks[1].image_path is None
    rows[0]["image_path"] = "img/missing.jpg"
    with pytest.raises(
        InputError,
        match=r"heldout\.jsonl:1: field 'image_path': image file not found: img/missing\.jpg",
    ):
        bm.read_rows(write_jsonl(path, rows))


def test_base64_and_data_urls_are_told_apart_from_paths():
    data = png_bytes()
    assert (
        bm.decode_base64_image("data:image/png;base64," + base64.b64encode(data).decode()) == data
    )
    assert bm.decode_base64_image(base64.b64encode(data).decode()) == data
    assert bm.decode_base64_image("photos/2024/a.jpg") is None
    assert (
        bm.detect_format(
            {"id": "x", "question": "q", "answer": "a", "split": "exam", "image_path": None}
        )
        == "task"
    )


# ---------------------------------------------------------------------------------------------
# `vsearcher-lite eval --check`


def test_check_command_prints_the_numbers_and_runs_nothing(tmp_path, capsys):
    path = write_jsonl(tmp_path / "mmsearchexam.jsonl", exam_rows())
    run = tmp_path / "run"
    code = main(["eval", "--run-dir", str(run), "--benchmark", str(path), "--check"])
    out = capsys.readouterr().out
    assert code == 0
    assert "format mmsearchexam: 4 rows, 4 with images, 3 distinct images" in out
    assert not run.exists()


def test_check_command_reports_a_bad_line_as_one_error(tmp_path, capsys):
    rows = exam_rows()
    rows[3]["answer"] = None
    path = write_jsonl(tmp_path / "mmsearchexam.jsonl", rows)
    code = main(["eval", "--benchmark", str(path), "--check"])
    err = capsys.readouterr().err
    assert code == 2
    assert (
        err.strip().startswith("vsearcher-lite eval: error:")
        and "mmsearchexam.jsonl:4: missing field 'answer'" in err
    )
    assert len(err.strip().splitlines()) == 1


def test_check_without_a_benchmark_needs_the_run_exam(tmp_path, capsys):
    code = main(["eval", "--run-dir", str(tmp_path / "run"), "--check"])
    assert code == 2 and "vsearcher-lite filter" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Acceptance: a released-format file, loaded and evaluated end to end


def test_an_mmsearchexam_file_is_evaluated_with_its_non_ascii_answers_and_long_questions_intact(
    tmp_path,
):
    from agent_fakes import answer, make_toolbox

    from vsearcher_lite.chat import ScriptedChat, message_text
    from vsearcher_lite.scoring import evaluate as ev

    rows = exam_rows()
    path = write_jsonl(tmp_path / "mmsearchexam.jsonl", rows)
    tasks = bm.load_benchmark(path, image_dir=tmp_path / "images", fetch=lambda url: png_bytes())
    seen_questions = []

    def reply(messages):
        question = message_text(messages[1])
        seen_questions.append(question)
        # Right for every row but the museum (answered with a wrong year).
        gold = next(str(r["answer"]) for r in rows if r["question"] in question)
        return answer("1875" if gold == "1874" else gold)

    config = ev.EvalConfig.for_profile("cpu", progress=False, concurrency=1)
    m = ev.evaluate(
        tmp_path / "run",
        tasks,
        ScriptedChat(reply),
        name="exam",
        config=config,
        toolbox=make_toolbox([]),
        benchmark=f"mmsearchexam:{path}",
    )
    assert (m["n_tasks"], m["n_correct"], m["pass_at_1"]) == (4, 3, 0.75)
    # the long question reaches the policy whole
    assert any(LONG_QUESTION in q for q in seen_questions)
    results = {r["id"]: r for r in ev.load_results(tmp_path / "run", "exam")}
    assert (
        results["mmsearchexam-0003"]["answer"]
        == results["mmsearchexam-0003"]["prediction"]
        == "東京都"
    )
    assert (
        results["mmsearchexam-0002"]["prediction"] == "Zürich–Limmat"
        and results["mmsearchexam-0002"]["correct"]
    )
    assert results["mmsearchexam-0004"]["correct"] is False
    raw = (tmp_path / "run" / "eval" / "exam" / "results.jsonl").read_text(encoding="utf-8")
    assert "東京都" in raw and "Reykjavík" in raw  # stored as text, not escaped
