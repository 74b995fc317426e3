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
# A graph held by the job's loop (the caller's local, a loop variable) or by a module global
# of the script is not in the class: a check of the class passes while the job leaks. For
# those the test runs the job itself under ``leakscope watch`` (the same script, arguments
# and methods, from the same directory) and fails while the watch finds a leak; a job named
# by module (``-m``) gets no such test, and :func:`job_note` says so in one line.
"""

from __future__ import annotations

from collections.abc import Sequence

from leakscope.render.escape import python_string
from leakscope.results import Holder, Report, Severity, Verdict

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


#: holders a check of the watched class cannot see: only a watch of the job finds them again
JOB_HOLDERS = (Holder.CALLER, Holder.GLOBAL, Holder.ARGUMENT, Holder.NOT_FOUND)


def job_held(report: Report, allow: Sequence[str] = ()) -> list[str]:
    """The paths of leaks the job itself holds (its loop, its module state: NOTE [From a real job to a
    gate]), not allowlisted, in report order."""
    paths: list[str] = []
    for result in report.results:
        for f in result.findings:
            path = str(f.path)
            if (
                f.severity is Severity.LEAK
                and f.holder in JOB_HOLDERS
                and path not in paths
                and not any(
                    path == a or (a.endswith("*") and path.startswith(a[:-1])) for a in allow
                )
            ):
                paths.append(path)
    return paths


def job_note(report: Report, script: str | None, allow: Sequence[str] = ()) -> str | None:
    """One line when the job holds a graph but no test of it can be written (a ``-m`` job)."""
    held = job_held(report, allow)
    if held and not script:
        return (
            f"{held[0]} is held by the job, not by the class, and a job run with -m cannot be re-run"
            " from the test: no job test written; watch the script's file to get one"
        )
    return None


def leaking_classes(report: Report, script: str | None = None) -> dict[str, list[str]]:
    """Each class whose watched step kept a graph in the class's own reach (not the job's: see
    :func:`job_held`), and the paths of what held it, in report order."""
    found: dict[str, list[str]] = {}
    for result in report.results:
        if result.verdict is not Verdict.LEAK:
            continue
        paths = [
            str(f.path)
            for f in result.findings
            if f.severity is Severity.LEAK and f.holder not in JOB_HOLDERS
        ]
        if paths:
            mine = found.setdefault(watched_class(result.target, script), [])
            mine.extend(p for p in dict.fromkeys(paths) if p not in mine)
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
    report: Report,
    *,
    allow: Sequence[str] = (),
    script: str | None = None,
    args: Sequence[str] = (),
    methods: Sequence[str] = (),
    cwd: str = ".",
    **_: object,
) -> str:
    """The regression test for every leaking class of ``report``, and for a graph the job itself holds,
    a test that watches the job again (NOTE [From a real job to a gate]). ``script``, ``args`` and
    ``methods``: the watched job as it was run; ``cwd``: the directory it was run from, relative to
    the test file's directory."""
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
    held = job_held(report, allow) if script else []
    job = ""
    if held:
        fields = [
            f'"cwd": {python_string(cwd)}',
            f'"script": {python_string(script or "")}',
            f'"args": [{", ".join(python_string(a) for a in args)}]',
            f'"methods": [{", ".join(python_string(m) for m in methods)}]',
            f'"held": [{", ".join(python_string(p) for p in held)}]',
        ]
        job = (
            "\n#: the job, watched again: its loop or module state kept a graph, which a check of the class\n"
            "#: cannot see (cwd is relative to this file's directory)\n"
            "JOB = {\n" + "".join(f"    {field},\n" for field in fields) + "}\n" + _JOB_TEST
        )
    return f'''"""Regression test for the autograd-graph retention `leakscope watch` found in a real job.

Written by `leakscope watch --emit-test`; keep it in the suite and edit it freely. It checks each
class whose watched step kept a graph with the `leakscope` fixture of leakscope's pytest plugin,
on leakscope's tiny models{_JOB_DOC if held else ""}: it fails while the leak is there and passes once it is fixed.
"""

from __future__ import annotations

{_JOB_IMPORTS if held else ""}{"import pytest" + chr(10) + chr(10) if found else ""}#: the class of each watched step that kept a graph, and what held it in the job
WATCHED = {("{" + chr(10) + watched + "}") if watched else "{}"}
#: findings confirmed deliberate (`leakscope watch --allow PATH`): reported as allowed, never failing
ALLOWLIST = {allowlist}
{job}{_CLASS_TEST if found else ""}'''


_CLASS_TEST = """

@pytest.mark.parametrize("target", list(WATCHED))
def test_keeps_no_autograd_graph(leakscope, target: str) -> None:
    leakscope.check(target, allowlist=ALLOWLIST)
"""


_JOB_DOC = ", and watches the job again where the job itself\n(its loop, its module state) kept one"
_JOB_IMPORTS = "import subprocess\nimport sys\nfrom pathlib import Path\n\n"
_JOB_TEST = """

def test_the_job_keeps_no_autograd_graph() -> None:
    methods = [arg for method in JOB["methods"] for arg in ("--method", method)]
    done = subprocess.run(
        [sys.executable, "-m", "leakscope", "watch", *methods, JOB["script"], *JOB["args"]],
        cwd=Path(__file__).parent / JOB["cwd"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"the job still keeps a graph:\\n{done.stdout}{done.stderr[-2000:]}"
"""


__all__ = [
    "ALLOW_REASON",
    "JOB_HOLDERS",
    "job_held",
    "job_note",
    "leaking_classes",
    "render",
    "watched_class",
]
