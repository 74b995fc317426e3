"""docs/frameworks.md's table of trainer classes is the suite's matrix (tests/trainer_matrix.py)."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.unit


def test_the_trainer_table_is_made_from_the_suite_s_matrix() -> None:
    from docs import gen_frameworks_table
    from tests.trainer_matrix import RELEASES

    text = (ROOT / "docs" / "frameworks.md").read_text(encoding="utf-8")
    assert gen_frameworks_table.rendered(text) == text, (
        "docs/frameworks.md's trainer table is stale; run python docs/gen_frameworks_table.py"
    )
    table = gen_frameworks_table.table()
    for release in RELEASES:  # every class the suite checks has its row
        for target in release.classes.values():
            assert (
                f"| {release.framework} (`{release.venv}`) | {release.beside} | `{target}` |"
                in table
            )
