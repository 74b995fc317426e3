"""Regenerate docs/real-bugs.md's table and outputs, and each bug's NOTES.md outputs, from real runs.

    python -m realbugs.gen_docs           # after .ci/setup-realbugs.sh; about 5 minutes on 2 cores
    python -m realbugs.gen_docs --check   # the same runs; exit 1 if a shown output is stale
    python -m realbugs.gen_docs --table   # only the table (bugs.toml), no runs
    python -m realbugs.gen_docs BUG...    # the table, and the outputs of these bugs only

``python docs/gen.py`` runs this for docs/real-bugs.md. The table comes from realbugs/bugs.toml
alone (tests/test_realbugs.py checks that the doc has it). The outputs are real: every release's
``confirm.py`` and ``leakscope watch`` run with its overlay, exactly as the tests run them (with the
docs' node cost, :func:`realbugs.suite.env`); each lands between ``<!-- NAME -->`` and ``<!-- /NAME
-->`` markers (``<!-- realbugs: BUG-SIDE -->`` in docs/real-bugs.md, which docs/gen.py knows as made
here). What varies from machine to machine is normalised by docs/gen.py's one ``clean``.
tests/test_realbugs.py compares each shown report with the watch run it makes anyway
(:func:`shown_report`).
"""

from __future__ import annotations

import re
import sys

from realbugs.suite import (
    ROOT,
    SIDES,
    Bug,
    Release,
    confirm_command,
    load,
    run,
    watch_command,
)

DOC = ROOT / "docs" / "real-bugs.md"
_BLOCK = r"(<!-- {id} -->\n)(.*?)(<!-- /{id} -->)"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _links(bug: Bug) -> str:
    out = []
    for link in bug.upstream:
        match = re.match(r"https://github.com/[^/]+/[^/]+/(pull|issues)/(\d+)$", link)
        out.append(f"[{'PR' if match and match.group(1) == 'pull' else 'issue'} #{match.group(2) if match else '?'}]({link})")
    return ", ".join(out)


def table(bugs: list[Bug]) -> str:
    """The suite's table, from bugs.toml alone."""
    rows = [
        "| bug | project | upstream | buggy | fixed | holder (as `leakscope watch` prints it) | kind | confirmed without leakscope |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for bug in bugs:
        rows.append(
            f"| [{bug.name}](../realbugs/{bug.name}/NOTES.md) | {bug.project}; {_cell(bug.category)} | {_links(bug)} "
            f"| `{bug.package}=={bug.buggy.version}` | `{bug.package}=={bug.fixed.version}` "
            f"| `{_cell(bug.watch_holder or bug.holder)}` | {bug.kind} | {_cell(bug.confirmed)} |"
        )
    return "\n".join(rows) + "\n"


def wrong(bugs: list[Bug]) -> str:
    """The releases `leakscope watch` gets wrong today (bugs.toml's ``watch_xfail``)."""
    rows = [
        f"- `{bug.name}`, {release.side} release `{bug.package}=={release.version}`: {release.watch_xfail}."
        for bug in bugs for release in (bug.buggy, bug.fixed) if release.watch_xfail
    ]
    return "\n".join(rows or ["- none"]) + "\n"


def _clean(text: str) -> str:
    from docs.gen import clean

    return clean(text).strip("\n")


def shown_command(bug: Bug, release: Release, command: list[str]) -> str:
    """The command line as a reader types it in the bug's folder."""
    words = ["python" if word == sys.executable else word for word in command]
    if words[:3] == ["python", "-m", "leakscope"]:
        words = ["leakscope", *words[3:]]
    overlay = f"../.envs/{release.overlay.name}"
    return f"$ PYTHONPATH={overlay}:../.. {' '.join(words)}"


def confirm_block(bug: Bug, release: Release) -> str:
    command = confirm_command(release)
    proc = run(bug, release, command)
    if proc.returncode != 0:
        raise SystemExit(f"{bug.name} {release.side}: confirm.py exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    return f"{shown_command(bug, release, command)}\n" + "\n".join(lines) + f"\n(exit {proc.returncode})"


def _report_block(bug: Bug, release: Release, text_report: str) -> tuple[str, str]:
    """(the whole text report with its command line, the one-line verdict of the result)."""
    lines = _clean(text_report).splitlines()
    verdict = next((line.strip() for line in lines if _is_verdict(bug, line)), "(no result line)")
    return f"{shown_command(bug, release, watch_command(bug, 'text'))}\n" + "\n".join(lines), verdict


def _is_verdict(bug: Bug, line: str) -> bool:
    """A result's verdict line: it starts with the watched method; with no --method (bugs.toml
    ``no_flag``), with whatever step leakscope chose."""
    if bug.no_flag:
        return re.match(r"\S+ \[\w+\] (LEAK|CLEAN|ERROR)\b", line) is not None
    return line.startswith(bug.method)


def shown_report(bug: Bug, release: Release, text_report: str) -> str:
    """The fenced block docs/real-bugs.md shows for ``release``, given its watch's text report: the
    whole report for a buggy release or a fixed one that is not clean, else its first and verdict lines."""
    report, verdict = _report_block(bug, release, text_report)
    if release.side == "buggy" or not verdict.endswith("CLEAN"):
        return f"```text\n{report}\n```"
    return f"```text\n{report.splitlines()[0]}\n{verdict}\n```"


def fill(text: str, block_id: str, body: str) -> str:
    pattern = re.compile(_BLOCK.format(id=re.escape(block_id)), re.S)
    if not pattern.search(text):
        raise SystemExit(f"no <!-- {block_id} --> block to fill")
    return pattern.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(3), text)


def main(argv: list[str]) -> int:
    bugs = load()
    names = [arg for arg in argv if not arg.startswith("--")]
    unknown = sorted(set(names) - {bug.name for bug in bugs})
    if unknown:
        raise SystemExit(f"no bug named {', '.join(unknown)} in realbugs/bugs.toml")
    stale: list[str] = []
    doc = fill(DOC.read_text(encoding="utf-8"), "table", table(bugs))
    doc = fill(doc, "wrong", wrong(bugs))
    if "--table" not in argv:
        for bug in bugs:
            if names and bug.name not in names:
                continue
            notes_path = bug.folder / "NOTES.md"
            notes = notes_path.read_text(encoding="utf-8")
            for side in SIDES:
                release = bug.release(side)
                confirm = confirm_block(bug, release)
                text_report = run(bug, release, watch_command(bug, "text")).stdout
                report, verdict = _report_block(bug, release, text_report)
                print(f"{bug.name} {side}: {verdict}", file=sys.stderr)
                notes = fill(notes, f"confirm-{side}", f"```text\n{confirm}\n```")
                notes = fill(notes, f"watch-{side}", f"```text\n{report}\n```")
                if bug.no_flag:  # NOTES.md also shows what naming the step with --method gives
                    command = watch_command(bug, "text", method=True)
                    lines = _clean(run(bug, release, command).stdout)
                    notes = fill(notes, f"watch-method-{side}",
                                 f"```text\n{shown_command(bug, release, command)}\n{lines}\n```")
                doc = fill(doc, f"realbugs: {bug.name}-{side}", shown_report(bug, release, text_report))
            if "--check" in argv:
                stale += [] if notes == notes_path.read_text(encoding="utf-8") else [str(notes_path.relative_to(ROOT))]
            else:
                notes_path.write_text(notes, encoding="utf-8")
    if "--check" in argv:
        stale += [] if doc == DOC.read_text(encoding="utf-8") else [str(DOC.relative_to(ROOT))]
        if stale:
            print(f"{', '.join(stale)}: outputs differ from real runs; run python -m realbugs.gen_docs", file=sys.stderr)
        return 1 if stale else 0
    DOC.write_text(doc, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
