"""`vsearcher-lite tools`: a person calls a tool by hand and sees what the agent would see."""

from vsearcher_lite.backends.toolbox import make_toolbox, tool_cache
from vsearcher_lite.cli import main
from vsearcher_lite.world import perturb_image


def _run_dir(small_world):
    return small_world.root.parent  # ensure_world builds into RUN_DIR/world


def test_text_search_and_visit_print_observations(small_world, capsys):
    run_dir = str(_run_dir(small_world))
    kb = small_world.knowledge
    seed = kb.seeds()[0]
    entity = kb.entity(seed.id)
    assert main(["tools", "--run-dir", run_dir, "text-search", entity.name]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f'Results for "{entity.name}"') and entity.url in out
    assert main(["tools", "--run-dir", run_dir, "visit", entity.url, "what is it"]) == 0
    assert f"Page: {entity.name}" in capsys.readouterr().out


def test_image_search_finds_the_source_page(small_world, tmp_path, capsys):
    kb = small_world.knowledge
    seed = kb.seeds()[0]
    question = tmp_path / "q.jpg"
    perturb_image(kb.image(seed.id).location, question, seed=3)
    assert (
        main(
            [
                "tools",
                "--run-dir",
                str(_run_dir(small_world)),
                "--json",
                "image-search",
                str(question),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert kb.entity(seed.id).url in out and '"images"' in out


def test_bad_input_is_one_line_and_nonzero(small_world, tmp_path, capsys):
    run_dir = str(_run_dir(small_world))
    assert (
        main(["tools", "--run-dir", run_dir, "visit", "https://wiki.sandbox.test/wiki/Nope", "x"])
        == 1
    )
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no page at https://wiki.sandbox.test/wiki/Nope" in err
    assert main(["tools", "--run-dir", run_dir, "image-search", str(tmp_path / "missing.png")]) == 2
    assert "image file not found" in capsys.readouterr().err
    assert main(["tools", "--run-dir", str(tmp_path / "no_run"), "text-search", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "vsearcher-lite world" in err


def test_the_cache_is_keyed_by_world(small_world, tmp_path):
    run_dir = _run_dir(small_world)
    toolbox = make_toolbox(run_dir)
    first = toolbox.call("text_search", {"query": "river"})
    assert toolbox.namespace == f"tools.{small_world.fingerprint}" and toolbox.namespace.endswith(
        "-n300-s0"
    )
    entries = tool_cache(run_dir).entries(toolbox.namespace)
    assert any(e["response"]["text"] == first.text for e in entries)
    # Another world over a copy of the same cache file: the same query is a miss there, not world
    # 0's answer.
    import shutil

    from vsearcher_lite.world import ensure_world

    other_run = tmp_path / "other"
    ensure_world(other_run, 60, 1, workers=1)
    shutil.copytree(run_dir / "cache", other_run / "cache")
    other = make_toolbox(other_run)
    assert other.namespace.endswith("-n60-s1")
    other.call("text_search", {"query": "river"})
    assert (other.cache.hits, other.cache.misses) == (0, 1)
    assert any(
        e["response"]["text"] == first.text
        for e in tool_cache(other_run).entries(toolbox.namespace)
    )
