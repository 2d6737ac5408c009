"""``vsearcher-lite world``: build the sandbox web into ``RUN_DIR/world/``.

    vsearcher-lite world --entities 2000 --seed 0 --run-dir runs/default

Reuses a world already built with the same settings (``--force`` rebuilds).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vsearcher_lite.runio import InputError
from vsearcher_lite.world.store import GENERATOR_VERSION, build_world, open_world, read_manifest

DEFAULT_ENTITIES = 2000


def positive_int(text: str) -> int:
    """An ``argparse`` type: a whole number above 0 (a usage error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def register(subparsers, common) -> None:
    p = subparsers.add_parser(
        "world", parents=[common], help="build the sandbox web (entities, pages, images, index)",
        description="Build the seeded sandbox encyclopedia into RUN_DIR/world/ (reused when "
                    "already built with the same settings).")
    p.add_argument("--entities", type=positive_int, default=DEFAULT_ENTITIES,
                   help=f"number of entities (default {DEFAULT_ENTITIES}; 20000 for a bigger demo)")
    p.add_argument("--force", action="store_true", help="rebuild even if a matching world exists")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="processes that draw images (default: up to 4)")
    p.set_defaults(func=run_world)


def run_world(args: argparse.Namespace) -> int:
    """Build (or reuse) ``RUN_DIR/world`` and print its counts."""
    if args.world != "sandbox":
        raise InputError("`world` builds the sandbox web; --world live has nothing to build")
    target = Path(args.run_dir) / "world"
    try:
        manifest = read_manifest(target)
    except InputError:
        if not args.force:
            raise
        manifest = None  # --force rebuilds a world whose manifest is broken
    wanted = {"n_entities": args.entities, "seed": args.seed,
              "generator_version": GENERATOR_VERSION}
    same = manifest is not None and all(manifest.get(k) == v for k, v in wanted.items())
    if same and not args.force:
        metrics = open_world(target).metrics()
        print(f"world: reusing {target} ({args.entities} entities, seed {args.seed}); "
              "--force rebuilds it")
    else:
        metrics = build_world(target, args.entities, args.seed, workers=args.workers)
        print(f"world: built {target} in {metrics['build_seconds']:.1f} s")
    m = metrics.get
    print(f"  entities {m('n_entities')}, pages {m('n_pages')}, images {m('n_images')} "
          f"({m('n_lookalike_images')} look-alikes), facts {m('n_facts')}")
    per_type = metrics.get("entities_per_type", {})
    if per_type:
        print("  per type: " + ", ".join(f"{t} {n}" for t, n in per_type.items()))
    print(f"  metrics: {target / 'metrics.json'}")
    return 0
