"""``vsearcher-lite tools``: call one agent tool by hand and see what the agent would see.

    vsearcher-lite tools --run-dir runs/demo text-search "bridge designed by"
    vsearcher-lite tools --run-dir runs/demo image-search path/to/picture.png
    vsearcher-lite tools --run-dir runs/demo visit https://wiki.sandbox.test/wiki/Some_Page "year"
"""

from __future__ import annotations

import json
import sys

from vsearcher_lite.runio import InputError
from vsearcher_lite.world.commands import positive_int
from vsearcher_lite.world.model import ImageRef


def register(subparsers, common) -> None:
    p = subparsers.add_parser(
        "tools", parents=[common], help="call one agent tool (text-search, image-search, visit)",
        description="Call one agent tool over the run's world and print what the agent reads.")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--top-k", type=positive_int, default=5,
                   help="results per search (default 5, as in the paper)")
    p.add_argument("--no-cache", action="store_true", help="do not use the run's tool cache")
    tools = p.add_subparsers(dest="tool", metavar="TOOL", required=True)
    ts = tools.add_parser("text-search", help="text_search(query)")
    ts.add_argument("query")
    im = tools.add_parser("image-search", help="image_search() with IMAGE as the question image")
    im.add_argument("image", help="path or URL of the question image")
    vi = tools.add_parser("visit", help="visit(url, goal)")
    vi.add_argument("url")
    vi.add_argument("goal")
    p.set_defaults(func=run_tool_command)


def run_tool_command(args) -> int:
    """Call the tool the command line names and print its observation (exit 1 on a failed call)."""
    from pathlib import Path

    from vsearcher_lite.backends.toolbox import make_toolbox

    question_image = None
    if args.tool == "text-search":
        name, arguments = "text_search", {"query": args.query}
    elif args.tool == "image-search":
        question_image = ImageRef(args.image)
        # checked before the toolbox opens (and creates) the run's cache
        if not question_image.is_url and not Path(args.image).is_file():
            raise InputError(f"{args.image}: image file not found")
        name, arguments = "image_search", {}
    else:
        name, arguments = "visit", {"url": args.url, "goal": args.goal}
    cache_mode = "off" if args.no_cache else "readwrite"
    toolbox = make_toolbox(args.run_dir, world=args.world, cache_mode=cache_mode, top_k=args.top_k)
    result = toolbox.call(name, arguments, question_image=question_image)
    if not result.ok:  # the agent would read this observation; a person gets it as one line
        print(f"vsearcher-lite tools: {result.text}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(result.text)
        for image in result.images:
            print(f"[image] {image.location}")
    return 0
