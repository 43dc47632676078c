"""docs/envs/*.md are the environments' docstrings, in Gymnasium's layout, and stay so."""
from pathlib import Path

import pytest

from pbad_gym.envs.pages import PAGES, env_page, main

DOCS = Path(__file__).resolve().parents[1] / "docs" / "envs"
SECTIONS = ("## Description", "## Action space", "## Observation space", "## Rewards", "## Starting state",
            "## Episode end", "## Arguments", "## Version history")


@pytest.mark.parametrize("file", sorted(PAGES))
def test_page_is_the_docstring(file):
    assert (DOCS / file).read_text(encoding="utf-8") == env_page(PAGES[file])


@pytest.mark.parametrize("file", sorted(PAGES))
def test_page_has_gymnasium_sections_in_order(file):
    text = (DOCS / file).read_text(encoding="utf-8")
    positions = [text.index(s) for s in SECTIONS]
    assert positions == sorted(positions)


def test_check_flags_a_stale_page(tmp_path):
    assert main([str(tmp_path)]) == 0
    assert main([str(tmp_path), "--check"]) == 0
    (tmp_path / "spider_v3.md").write_text("old", encoding="utf-8")
    assert main([str(tmp_path), "--check"]) == 1
