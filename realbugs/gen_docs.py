"""Regenerate docs/real-bugs.md's table and outputs, and each bug's NOTES.md outputs, from real runs.

    python -m realbugs.gen_docs           # after .ci/setup-realbugs.sh; about 5 minutes on 2 cores
    python -m realbugs.gen_docs --table   # only the table (bugs.toml), no runs

The table comes from realbugs/bugs.toml alone (tests/test_realbugs.py checks that the doc has it).
The outputs are real: every release's ``confirm.py`` and ``leakscope watch`` run with its overlay,
exactly as the tests run them; each lands between ``<!-- NAME -->`` and ``<!-- /NAME -->``
markers. Machine-specific parts are made relative: the repository's path is left out, and the
first line of a text report (leakscope, torch and Python versions) too.
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
            f"| `{_cell(bug.holder)}` | {bug.kind} | {_cell(bug.confirmed)} |"
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
    text = text.replace(str(ROOT) + "/", "")
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


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


def watch_block(bug: Bug, release: Release) -> tuple[str, str]:
    """(the whole text report with its command line, the one-line verdict of the result)."""
    command = watch_command(bug, "text")
    proc = run(bug, release, command)
    lines = _clean(proc.stdout).splitlines()
    if lines and lines[0].startswith("leakscope "):
        lines = lines[1:]
    while lines and not lines[0]:
        lines.pop(0)
    verdict = next((line.strip() for line in lines if line.startswith(bug.method)), "(no result line)")
    return f"{shown_command(bug, release, command)}\n" + "\n".join(lines), verdict


def fill(text: str, block_id: str, body: str) -> str:
    pattern = re.compile(_BLOCK.format(id=re.escape(block_id)), re.S)
    if not pattern.search(text):
        raise SystemExit(f"no <!-- {block_id} --> block to fill")
    return pattern.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(3), text)


def main(argv: list[str]) -> int:
    bugs = load()
    doc = fill(DOC.read_text(encoding="utf-8"), "table", table(bugs))
    doc = fill(doc, "wrong", wrong(bugs))
    if "--table" not in argv:
        for bug in bugs:
            notes_path = bug.folder / "NOTES.md"
            notes = notes_path.read_text(encoding="utf-8")
            for side in SIDES:
                release = bug.release(side)
                confirm = confirm_block(bug, release)
                report, verdict = watch_block(bug, release)
                print(f"{bug.name} {side}: {verdict}", file=sys.stderr)
                notes = fill(notes, f"confirm-{side}", f"```text\n{confirm}\n```")
                notes = fill(notes, f"watch-{side}", f"```text\n{report}\n```")
                if side == "buggy" or not verdict.endswith("CLEAN"):
                    shown = f"```text\n{report}\n```"
                else:
                    shown = f"```text\n{report.splitlines()[0]}\n{verdict}\n```"
                doc = fill(doc, f"{bug.name}-{side}", shown)
            notes_path.write_text(notes, encoding="utf-8")
    DOC.write_text(doc, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
