"""Where the models run: ``--device auto|cpu|cuda`` for sft, grpo, eval and pretrain, whatever the
profile.

Without a GPU the CPU tests check the resolver, the one-line refusals, that ``--device cpu`` keeps
training and the evaluation's model on the CPU, and, through a fake CUDA
(``torch.cuda.is_available`` patched to True and the model loaders recording what they are asked
for), that ``auto`` asks for ``cuda``. The tests marked ``gpu`` run each path a few steps on the
tiny base on a real GPU and check where its parameters are; they are skipped without one. Also
here: the evaluation's worker threads share one toolbox.
"""

from __future__ import annotations

import json
import threading

import pytest

from vsearcher_lite.cli import build_parser, main
from vsearcher_lite.rl.config import GRPOConfig
from vsearcher_lite.runio import InputError, write_jsonl
from vsearcher_lite.runtime import resolve_device
from vsearcher_lite.scoring import evaluate as ev
from vsearcher_lite.scoring import policies as ev_policies
from vsearcher_lite.training.config import SFTConfig


@pytest.fixture()
def no_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture()
def fake_cuda(monkeypatch):
    """torch says a GPU is there (nothing may really be put on it: loaders are replaced by
    recorders)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def needs_cuda():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


# ---------------------------------------------------------------------------------------------
# The resolver and the options


def test_auto_is_the_cpu_without_a_gpu_and_cuda_with_one(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert (
        resolve_device("auto")
        == resolve_device(None)
        == resolve_device("cpu")
        == torch.device("cpu")
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cpu") == torch.device("cpu")  # asked for, even with a GPU there
    assert resolve_device("cuda:1") == torch.device("cuda", 1)


def test_cuda_without_a_gpu_and_unknown_names_are_one_line_errors(no_cuda):
    with pytest.raises(
        InputError, match=r"--device cuda: .*sees no CUDA GPU here; use --device cpu or auto"
    ) as exc:
        resolve_device("cuda")
    assert "\n" not in str(exc.value)
    with pytest.raises(
        InputError, match=r"device must be auto, cpu or cuda, got 'gpu' \(--device\)"
    ):
        resolve_device("gpu")
    with pytest.raises(ValueError, match="device must be"):
        SFTConfig.for_profile("cpu", device="tpu")
    with pytest.raises(ValueError, match="device must be"):
        GRPOConfig.for_profile("cpu", device="cuda:x")
    with pytest.raises(ValueError, match="device must be"):
        ev.EvalConfig.for_profile("cpu", device="mps")


def test_the_model_commands_take_device():
    parser = build_parser()
    for argv in (["sft"], ["grpo"], ["eval"], ["pretrain"]):
        assert parser.parse_args(argv + ["--device", "cuda"]).device == "cuda"
        assert parser.parse_args(argv).device is None  # the config's default: auto
    from vsearcher_lite.rl.commands import config_from_args as grpo_config
    from vsearcher_lite.training.commands import config_from_args as sft_config

    assert sft_config(parser.parse_args(["sft", "--device", "cpu"])).device == "cpu"
    assert sft_config(parser.parse_args(["sft"])).device == "auto"
    assert (
        grpo_config(parser.parse_args(["grpo", "--device", "cpu", "--max-tokens", "32"])).max_tokens
        == 32
    )


def test_the_cli_refuses_cuda_without_a_gpu_and_writes_nothing(tmp_path, no_cuda, capsys):
    run = tmp_path / "run"
    tasks = tmp_path / "tasks.jsonl"
    write_jsonl(
        tasks, [{"id": "q1", "question": "In which year was Orsk founded?", "answer": "1874"}]
    )
    for argv in (
        ["sft", "--run-dir", str(run), "--device", "cuda"],
        ["grpo", "--run-dir", str(run), "--device", "cuda"],
        [
            "eval",
            "--run-dir",
            str(run),
            "--policy",
            "base",
            "--benchmark",
            str(tasks),
            "--format",
            "task",
            "--device",
            "cuda",
        ],
        ["pretrain", "--smoke", "--out", str(tmp_path / "base"), "--device", "cuda"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "--device cuda" in err and "no CUDA GPU" in err
    assert not run.exists() and not (tmp_path / "base").exists()


def test_the_profile_no_longer_decides_the_device(fake_cuda):
    """The cpu profile's recipe trains on the GPU when there is one, unless --device cpu."""
    assert SFTConfig.for_profile("cpu").use_cpu is False
    assert SFTConfig.for_profile("cpu", device="cpu").use_cpu is True
    assert GRPOConfig.for_profile("cpu").use_cpu is False
    assert GRPOConfig.for_profile("cpu", device="cpu").use_cpu is True
    assert SFTConfig.for_profile("single_gpu", device="cpu").use_cpu is True
    # the stages' evaluations inherit the stage's device
    assert SFTConfig.for_profile("single_gpu", device="cpu").eval_config().device == "cpu"
    assert GRPOConfig.for_profile("cpu", device="cpu").eval.device == "cpu"


# ---------------------------------------------------------------------------------------------
# Placement through fakes: the loaders are asked for the device


@pytest.fixture()
def loader_calls(monkeypatch):
    """Replace the evaluation's and the GRPO engine's model loaders by recorders that load on the
    CPU."""
    from vsearcher_lite.chat import local as chat
    from vsearcher_lite.model import tiny

    calls = []
    real_chat_loader, real_load_base = chat._load_transformers_model, tiny.load_base

    def chat_loader(model_id, *, device, dtype, trust_remote_code):
        calls.append(("chat", device))
        return real_chat_loader(
            model_id, device=None, dtype=dtype, trust_remote_code=trust_remote_code
        )

    def load_base(path=None, *, device=None, **kw):
        calls.append(("load_base", device))
        return real_load_base(path, **kw)

    monkeypatch.setattr(chat, "_load_transformers_model", chat_loader)
    monkeypatch.setattr(tiny, "load_base", load_base)
    return calls


def test_the_evaluation_loads_a_local_model_on_the_configured_device(loader_calls, fake_cuda):
    for profile in ("cpu", "single_gpu"):
        ev_policies.make_policy("base", ev.EvalConfig.for_profile(profile))
        ev_policies.make_policy("direct:base", ev.EvalConfig.for_profile(profile, device="cpu"))
    assert loader_calls == [("chat", "cuda"), ("chat", "cpu"), ("chat", "cuda"), ("chat", "cpu")]
    # an endpoint is not a local model: no device is passed to it
    policy = ev_policies.make_policy(
        "openai:m@http://127.0.0.1:9/v1", ev.EvalConfig.for_profile("single_gpu")
    )
    assert policy.name == "m" and len(loader_calls) == 4


def test_the_own_grpo_engine_loads_its_policy_on_the_configured_device(loader_calls, fake_cuda):
    from vsearcher_lite.model.tiny import default_base_dir
    from vsearcher_lite.rl.cpu_engine import load_policy

    load_policy(default_base_dir(), GRPOConfig.for_profile("cpu"))
    load_policy(default_base_dir(), GRPOConfig.for_profile("cpu", device="cpu"))
    assert loader_calls == [("load_base", "cuda"), ("load_base", "cpu")]


def test_device_cpu_puts_the_evaluation_model_on_the_cpu():
    for spec in ("base", "direct:base"):
        policy = ev_policies.make_policy(
            spec, ev.EvalConfig.for_profile("single_gpu", device="cpu", batch=4)
        )
        backend = getattr(policy.shared, "inner", policy.shared)
        assert {p.device.type for p in backend.model.parameters()} == {"cpu"}


def test_sft_with_device_cpu_trains_on_the_cpu(tmp_path):
    from test_sft import _image, trl_record

    from vsearcher_lite.training.sft import run_sft

    rows = [
        trl_record(_image(tmp_path / f"q{i}.png", (60 * i, 80, 120)), name, year)
        for i, (name, year) in enumerate([("Garnound Bridge", "1874"), ("Trel Bridge", "1912")])
    ]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = SFTConfig.for_profile(
        "cpu",
        device="cpu",
        max_steps=1,
        minutes=None,
        total_minutes=None,
        batch_size=2,
        evaluate=False,
        progress=False,
        train_file=str(train),
        threads=None,
    )
    m = run_sft(tmp_path / "run", cfg, log=lambda s: None)
    assert m["steps"] == 1 and m["device"] == "cpu" and m["settings"]["device"] == "cpu"


# ---------------------------------------------------------------------------------------------
# One toolbox for the evaluation's worker threads


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory):
    """A run folder (its own eval/ and cache/) over the small sandbox world, and eight of its image
    tasks."""
    from agent_fakes import build_sandbox_run, image_tasks

    base = build_sandbox_run(tmp_path_factory.mktemp("device_base"))
    run = tmp_path_factory.mktemp("device_eval") / "run"
    run.mkdir()
    (run / "world").symlink_to(base / "world")
    return run, [t for t in image_tasks(base) if t.difficulty == "easy"][:8]


def test_the_evaluation_threads_share_one_toolbox_with_the_same_results(eval_run, monkeypatch):
    from vsearcher_lite.backends import toolbox as factory

    run, tasks = eval_run
    built = []
    lock = threading.Lock()
    real_make_toolbox = factory.make_toolbox

    def counting_make_toolbox(*args, **kw):
        box = real_make_toolbox(*args, **kw)
        with lock:
            built.append(box)
        return box

    monkeypatch.setattr(ev, "make_toolbox", counting_make_toolbox)  # the runner's own reference
    config = ev.EvalConfig.for_profile("cpu", concurrency=4, cache_mode="off", progress=False)
    shared = ev.evaluate(run, tasks, "teacher", name="shared", config=config, fresh=True)
    assert len(built) == 1
    own = ev.evaluate(
        run,
        tasks,
        "teacher",
        name="own",
        config=config,
        fresh=True,
        toolbox=lambda: counting_make_toolbox(
            run, cache_mode="off", top_k=config.top_k, observations=config.prompt_variant
        ),
    )
    # the shared one, then one per worker thread (at least two of the four ran tasks)
    assert len(built) >= 3

    def episodes(name):
        return {
            r["id"]: (r["trajectory"]["messages"], r["prediction"], r["termination"], r["correct"])
            for r in ev.load_results(run, name)
        }

    assert episodes("shared") == episodes("own")
    assert (
        shared["n_correct"] == own["n_correct"]
        and shared["mean_tool_calls"] == own["mean_tool_calls"] > 0
    )


def test_a_shared_toolbox_counts_every_call_of_many_threads(tmp_path):
    from agent_fakes import make_images, make_toolbox

    from vsearcher_lite.cache import ToolCache

    _, hits = make_images(tmp_path)
    box = make_toolbox(hits, cache=ToolCache(tmp_path / "c.sqlite"))

    def work(k):
        for i in range(50):
            box.call("text_search", {"query": f"bridge {k} {i % 10}"})
            box.call("no_such_tool", {})

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert box.counts["text_search"] == 300 and box.errors == 300
    assert (box.cache.hits, box.cache.misses) == (240, 60)  # 60 distinct queries, each missed once


# ---------------------------------------------------------------------------------------------
# On a GPU


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    """A run folder with a world, easy training tasks (SFT's and the RL pool), held-out tasks, and
    ``sft/checkpoint`` (the tiny base)."""
    from agent_fakes import build_sandbox_run, grpo_run

    return grpo_run(
        build_sandbox_run(tmp_path_factory.mktemp("gpu_base")),
        tmp_path_factory.mktemp("gpu") / "run",
    )


def sft_train_file(folder):
    from test_sft import write_train_file

    return write_train_file(folder)


@pytest.mark.gpu
def test_sft_cpu_recipe_and_its_evaluation_on_cuda(tmp_path, gpu_run):
    needs_cuda()
    from vsearcher_lite.training.sft import run_sft

    run = tmp_path / "run"
    run.mkdir()
    for name in ("world", "filter"):
        (run / name).symlink_to(gpu_run / name)
    cfg = SFTConfig.for_profile(
        "cpu",
        device="cuda",
        max_steps=3,
        minutes=None,
        total_minutes=None,
        progress=False,
        train_file=str(sft_train_file(tmp_path)),
        eval_max_tasks=2,
        eval_difficulties=("easy",),
        eval_max_tokens=16,
        eval_max_tool_calls=1,
    )
    m = run_sft(run, cfg, log=print)
    assert m["steps"] == 3 and m["device"].startswith("cuda") and m["n_heldout_tasks"] == 2
    print(f"[gpu] sft cpu recipe on cuda: {m['seconds_per_step']} s/step")


@pytest.mark.gpu
def test_the_evaluation_model_is_on_cuda_and_evaluates(tmp_path, gpu_run):
    needs_cuda()
    from vsearcher_lite.synthesis.trajectories import load_tasks

    tasks = load_tasks(gpu_run / "filter" / "heldout.jsonl")[:2]
    for profile in ("cpu", "single_gpu"):
        config = ev.EvalConfig.for_profile(profile, max_tokens=16, max_tool_calls=1, progress=False)
        policy = ev_policies.make_policy("base", config)
        backend = getattr(policy.shared, "inner", policy.shared)
        assert {p.device.type for p in backend.model.parameters()} == {"cuda"}
        m = ev.evaluate(gpu_run, tasks, policy, name=f"base-{profile}", config=config, fresh=True)
        assert m["n_tasks"] == 2


@pytest.mark.gpu
def test_the_own_grpo_engine_on_cuda(gpu_run):
    needs_cuda()
    from vsearcher_lite.rl.grpo import run_grpo

    cfg = GRPOConfig.for_profile(
        "cpu",
        device="cuda",
        max_steps=2,
        prompts_per_step=2,
        generations=4,
        max_tokens=24,
        max_tool_calls=2,
        eval_max_tasks=2,
        difficulty_mix={"easy": 1},
        eval_batch=4,
        eval_max_tokens=24,
        progress=False,
        name="grpo-cuda",
        beta=0.02,
        mu=2,
        reuse_sft_eval=False,
    )
    cfg.minutes = cfg.total_minutes = None
    m = run_grpo(gpu_run, cfg, log=print)
    assert m["steps"] == 2 and m["device"].startswith("cuda") and m["heldout_n"] == 2


@pytest.mark.gpu
def test_the_single_gpu_cli_of_sft_grpo_and_eval(tmp_path, gpu_run, capsys):
    needs_cuda()
    from vsearcher_lite.model.tiny import default_base_dir

    run = tmp_path / "run"
    run.mkdir()
    for name in ("world", "filter"):
        (run / name).symlink_to(gpu_run / name)
    train = sft_train_file(tmp_path)
    common = ["--run-dir", str(run), "--profile", "single_gpu", "--device", "cuda"]
    assert (
        main(
            [
                "sft",
                *common,
                "--base",
                str(default_base_dir()),
                "--train-file",
                str(train),
                "--max-steps",
                "2",
                "--no-eval",
            ]
        )
        == 0
    )
    assert (run / "sft" / "checkpoint" / "config.json").is_file()
    assert (
        main(
            [
                "grpo",
                *common,
                "--steps",
                "1",
                "--prompts",
                "2",
                "--generations",
                "2",
                "--max-tokens",
                "32",
                "--mix",
                "easy:1",
                "--no-eval",
            ]
        )
        == 0
    )
    assert (run / "grpo" / "checkpoint" / "config.json").is_file()
    assert (
        main(
            [
                "eval",
                *common,
                "--policy",
                str(run / "grpo" / "checkpoint"),
                "--limit",
                "2",
                "--max-tokens",
                "32",
                "--max-tool-calls",
                "1",
                "--name",
                "rl-cli",
            ]
        )
        == 0
    )
    assert "Pass@1" in capsys.readouterr().out
