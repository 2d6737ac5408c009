"""The install files agree with each other and keep torch pinned to the CPU build."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _env_pip():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    pip = [d for d in deps if isinstance(d, dict) and "pip" in d]
    assert len(pip) == 1, "environment.yml needs exactly one pip section"
    return env, [str(x) for x in pip[0]["pip"]]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0].lower().replace("_", "-")


def test_environment_pip_section_matches_pyproject():
    proj = _pyproject()["project"]
    wanted = list(proj["dependencies"])
    for extra in ("notebooks", "dev"):
        wanted += proj["optional-dependencies"][extra]
    _, pip = _env_pip()
    pip_reqs = [p for p in pip if not p.startswith("-e")]
    assert sorted(pip_reqs) == sorted(wanted), (
        "environment.yml pip section differs from pyproject.toml"
    )
    assert "-e ." in pip, "environment.yml must install the package itself"


def test_environment_python_satisfies_requires_python():
    env, _ = _env_pip()
    py = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python")]
    assert py, "environment.yml must pin a python version"
    major, minor = (int(x) for x in py[0].split("=")[-1].split(".")[:2])
    floor = _pyproject()["project"]["requires-python"].removeprefix(">=")
    fmaj, fmin = (int(x) for x in floor.split(".")[:2])
    assert (major, minor) >= (fmaj, fmin)


def test_torch_is_pinned_and_torchvision_only_in_the_gpu_extra():
    proj = _pyproject()["project"]
    extras = proj["optional-dependencies"]
    every = list(proj["dependencies"]) + [r for v in extras.values() for r in v]
    torch = [r for r in every if _name(r) == "torch"]
    assert torch == ["torch==2.13.0"]
    # the CPU install never takes torchvision; the gpu extra pins the release paired with torch
    vision = [r for r in every if _name(r) in ("torchvision", "torchaudio")]
    assert vision == ["torchvision==0.28.0"] and vision[0] in extras["gpu"]
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install --quiet torch==2.13.0" in makefile


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make reproduce" in readme
    assert re.search(r"^make test$", ci, flags=re.M)
