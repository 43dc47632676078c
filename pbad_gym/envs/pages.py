"""Per-environment documentation pages (docs/envs/*.md) in Gymnasium's layout, generated from the class docstrings.

    python -m pbad_gym.envs.pages docs/envs        # (re)write the pages
    python -m pbad_gym.envs.pages docs/envs --check  # exit 1 when a page differs from its docstring

Each page is the registered id as title, the Gymnasium call that makes it, and the vector env's docstring
(Description, Action space, Observation space, Rewards, Starting state, Episode end, Arguments, Version history):
the docstring is the one source, and a test keeps the pages equal to it.
"""
from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

# page file name -> registered id, for the versions a user should read about (older ones keep their docstrings)
PAGES = {"swimmer_v1.md": "pbad_gym/Swimmer-v1", "spider_v5.md": "pbad_gym/Spider-v5",
         "spider_v4.md": "pbad_gym/Spider-v4", "spider_v3.md": "pbad_gym/Spider-v3",
         "spider_v2.md": "pbad_gym/Spider-v2", "spider_v1.md": "pbad_gym/Spider-v1",
         "hopper_v0.md": "pbad_gym/Hopper-v0", "walker2d_v0.md": "pbad_gym/Walker2d-v0",
         "half_cheetah_v0.md": "pbad_gym/HalfCheetah-v0", "ant_v0.md": "pbad_gym/Ant-v0"}


def env_page(env_id):
    """The Markdown page (str) of registered pbad_gym id ``env_id``."""
    import gymnasium

    import pbad_gym  # noqa: F401  (registers the ids)

    spec = gymnasium.spec(env_id)
    module, name = spec.vector_entry_point.split(":")
    cls = getattr(__import__(module, fromlist=[name]), name)
    doc = inspect.cleandoc(cls.__doc__ or "")
    short = env_id.split("/")[1]
    return (f"# {short}\n\n"
            f"```python\nimport gymnasium\nimport pbad_gym  # noqa: F401\n\n"
            f"env = gymnasium.make(\"{env_id}\")\n"
            f"envs = gymnasium.make_vec(\"{env_id}\", num_envs=64, vectorization_mode=\"vector_entry_point\")\n```\n\n"
            f"(Generated from `{module}.{name}`'s docstring by `python -m pbad_gym.envs.pages docs/envs`.)\n\n"
            f"{doc}\n")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pbad_gym.envs.pages", description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="where the pages go (docs/envs)")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a page is stale")
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    stale = []
    for file, env_id in PAGES.items():
        text, path = env_page(env_id), folder / file
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
        else:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print("stale pages (run python -m pbad_gym.envs.pages docs/envs): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
