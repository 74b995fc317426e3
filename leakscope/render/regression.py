"""A watch report as a pytest regression test (``leakscope watch --emit-test FILE``): pure strings.

# NOTE [From a real job to a gate]
# ``watch`` finds a leak in the job as it runs; the leak is closed for good only when a test
# keeps it from coming back. The test this writes checks, with the ``leakscope`` fixture of
# leakscope's pytest plugin, the class of each watched step that kept a graph (the class whose
# method was watched: ``--method my_pkg.train:MyTrainer.training_step`` names a subclass), on
# leakscope's tiny models, so it runs in seconds in the project's suite. It fails while the
# leak is there and passes once it is fixed. Findings the user confirms as deliberate
# (``--allow PATH``) become allowlist entries. Every string from the report is written as a
# Python literal (``repr``), never as code or inside a comment, so a hostile engine name
# cannot inject code into the test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from leakscope.render.escape import python_string
from leakscope.results import Report, Severity, Verdict

#: the reason an ``--allow``ed finding is given in the generated allowlist
ALLOW_REASON = "confirmed deliberate with leakscope watch --allow"


def watched_class(target: str, script: str | None) -> str:
    """``pkg.mod:Class.method`` -> ``pkg.mod:Class``; a class of the job's script (``__main__``)
    is named by the script's file (``train.py:Engine``)."""
    module, _, attr = target.rpartition(":")
    owner = attr.rpartition(".")[0] or attr
    if module == "__main__" and script:
        module = script
    return f"{module}:{owner}"


def leaking_classes(report: Report, script: str | None = None) -> dict[str, list[str]]:
    """Each class whose watched step kept a graph, and the paths of what held it, in report order."""
    found: dict[str, list[str]] = {}
    for result in report.results:
        if result.verdict is not Verdict.LEAK:
            continue
        paths = found.setdefault(watched_class(result.target, script), [])
        paths.extend(
            str(f.path)
            for f in result.findings
            if f.severity is Severity.LEAK and str(f.path) not in paths
        )
    return found


#: the line length formatters default to (black's and ruff's 88): an entry longer is written exploded
LINE = 88


def _item(prefix: str, parts: list[str], brackets: str) -> str:
    """One entry of a literal, as a formatter writes it: on one line when it fits, else one part per
    line with a trailing comma (which formatters keep exploded)."""
    opened, closed = brackets[0], brackets[1]
    line = f"    {prefix}{opened}{', '.join(parts)}{closed},"
    if len(line) <= LINE:
        return line + "\n"
    inner = "".join(f"        {part},\n" for part in parts)
    return f"    {prefix}{opened}\n{inner}    {closed},\n"


def render(
    report: Report, *, allow: Sequence[str] = (), script: str | None = None, **_: Any
) -> str:
    """The regression test for every leaking class of ``report`` (NOTE [From a real job to a gate])."""
    found = leaking_classes(report, script)
    watched = "".join(
        _item(f"{python_string(target)}: ", [python_string(p) for p in paths], "[]")
        for target, paths in found.items()
    )
    entries = "".join(
        _item(
            "", [f'"path": {python_string(path)}', f'"reason": {python_string(ALLOW_REASON)}'], "{}"
        )
        for path in allow
    )
    allowlist = f"[\n{entries}]" if entries else "[]"
    return f'''"""Regression test for the autograd-graph retention `leakscope watch` found in a real job.

Written by `leakscope watch --emit-test`; keep it in the suite and edit it freely. It checks each
class whose watched step kept a graph with the `leakscope` fixture of leakscope's pytest plugin,
on leakscope's tiny models: it fails while the leak is there and passes once it is fixed.
"""

from __future__ import annotations

import pytest

#: the class of each watched step that kept a graph, and what held it in the job
WATCHED = {{
{watched}}}
#: findings confirmed deliberate (`leakscope watch --allow PATH`): reported as allowed, never failing
ALLOWLIST = {allowlist}


@pytest.mark.parametrize("target", list(WATCHED))
def test_keeps_no_autograd_graph(leakscope, target: str) -> None:
    leakscope.check(target, allowlist=ALLOWLIST)
'''


__all__ = ["ALLOW_REASON", "leaking_classes", "render", "watched_class"]
