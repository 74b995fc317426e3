"""``leakscope fix --apply`` on every plain training script of ``fixtures/watch/scripts/``: the script
half of tests/test_fix_corpus.py (its docstring says what is asserted), in a module of its own so
that ``--dist loadfile`` runs it beside the engine half."""

from __future__ import annotations

import pytest

from tests.test_fix_corpus import SCRIPTS, check_script

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "name", [p.stem for p in sorted(SCRIPTS.glob("*.py")) if not p.name.startswith("_")]
)
def test_fix_apply_makes_every_leaky_script_clean_with_the_same_gradients(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    check_script(name, tmp_path_factory)
