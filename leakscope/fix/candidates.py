"""Edits for a script's holders that no stored-at line explains, derived from the line that made them.

# NOTE [Edits from the line that made the graph]
# ``watch`` names where a holder's tensor was created even when no stored-at
# line is known (an evaluation loop's ``predictions.append(model(x))``, a
# carried ``out, hidden = rnn(chunk, hidden)``): the graph is made there, in the
# job's own loop. Two edits are derived from that line, and, like every edit,
# proven by re-running the job before one is called verified:
# - a line that reads a name it also assigns carries state from step to step
#   (an RNN's hidden state): the carried names are detached where the line
#   reads them (``rnn(chunk, hidden.detach())``), the carry that truncated
#   backpropagation through time cuts. Its proof compares the gradients as every
#   proof does: where backward ran through the carry, they change, and the edit
#   stays a suggestion with that said (a different training, to choose by hand);
# - any other simple statement runs under ``torch.no_grad()``
#   (``with torch.no_grad(): predictions.append(model(x))``, one line, so the
#   edit stays an edit of that line): right for an evaluation loop or an update
#   that belongs outside autograd, and refused by the proof anywhere a backward
#   needs the graph (the job fails, or a gradient changes).
# Only a file of the project that imports ``torch`` by a name is edited so.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from leakscope.errors import LeakscopeError
from leakscope.fix.files import read_source, source_lines
from leakscope.fix.loading import in_project
from leakscope.results import Edit, Finding, Report, Severity

#: the reason's addition when a carry's detach changes a gradient (NOTE [Edits from the line that
#: made the graph])
CARRY_NOTE = (
    "detaching a carried state truncates backpropagation through time, so the gradients change by"
    " design: apply it by hand if truncated backpropagation is the training you want"
)


def _torch_name(tree: ast.Module) -> str | None:
    """The name the module imports ``torch`` under at its top level (None: it does not)."""
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch":
                    return alias.asname or "torch"
    return None


def _carried(statement: ast.stmt) -> list[str]:
    """The names an assignment both reads and assigns (``out, hidden = rnn(chunk, hidden)``)."""
    if not isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        return []
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    assigned = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(statement, ast.AugAssign) or statement.value is None:
        return []  # a running sum is the stored-at line's edit (``+= x.detach()``)
    read = [
        n
        for n in ast.walk(statement.value)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in assigned
    ]
    return list(dict.fromkeys(n.id for n in read))


def _carry_detached(code: str, statement: ast.stmt, names: list[str]) -> str:
    """``code`` with every read of ``names`` in the assigned value detached (offsets in UTF-8)."""
    value = getattr(statement, "value", None)
    assert value is not None
    raw = code.encode("utf-8")
    reads = sorted(
        (n.col_offset, n.end_col_offset or n.col_offset, n.id)
        for n in ast.walk(value)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names
    )
    out, at = b"", 0
    for start, end, name in reads:
        out += raw[at:start] + f"{name}.detach()".encode()
        at = end
    return (out + raw[at:]).decode("utf-8")


def from_created_line(finding: Finding) -> tuple[Edit, bool] | None:
    """The edit of the line that created ``finding``'s tensor, and whether it detaches a carried state
    (NOTE [Edits from the line that made the graph]); None where none is derived."""
    source = finding.source
    if finding.edit is not None or source is None or finding.severity is not Severity.LEAK:
        return None
    if not in_project(source.file):
        return None
    try:
        text = read_source(Path(source.file))
    except (OSError, LeakscopeError):
        return None
    lines = source_lines(text)
    if not 1 <= source.line <= len(lines):
        return None
    body = lines[source.line - 1].rstrip("\r\n")
    code = body.strip()
    try:
        tree, line = ast.parse(text), ast.parse(code)
    except SyntaxError:
        return None  # one line of a statement that goes on, or a comment after it
    torch = _torch_name(tree)
    if torch is None or len(line.body) != 1 or "#" in code:
        return None
    statement = line.body[0]
    simple = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)
    if not isinstance(statement, simple) or ";" in code:
        return None
    column = len(body) - len(body.lstrip()) + 1
    carried = _carried(statement)
    if carried:
        after, carry = _carry_detached(code, statement, carried), True
    elif isinstance(statement, ast.AugAssign):
        return None
    else:
        after, carry = f"with {torch}.no_grad(): {code}", False
    return Edit(source.file, source.line, column, code, after), carry


def with_created_line_edits(report: Report) -> tuple[Report, set[Edit]]:
    """``report`` with an edit derived from the created-at line for each leak that has none, and the
    edits among them that detach a carried state."""
    carries: set[Edit] = set()
    results = []
    for result in report.results:
        findings = []
        for finding in result.findings:
            derived = from_created_line(finding)
            if derived is not None:
                edit, carry = derived
                finding = dataclasses.replace(finding, edit=edit)
                if carry:
                    carries.add(edit)
            findings.append(finding)
        results.append(dataclasses.replace(result, findings=tuple(findings)))
    return dataclasses.replace(report, results=tuple(results)), carries


def explain_carries(
    verdicts: dict[tuple[str, Edit], tuple[bool, str]], carries: set[Edit]
) -> dict[tuple[str, Edit], tuple[bool, str]]:
    """``verdicts`` with :data:`CARRY_NOTE` added where a carried state's detach changed a gradient."""
    return {
        key: (ok, f"{why}; {CARRY_NOTE}" if key[1] in carries and "changes the" in why else why)
        for key, (ok, why) in verdicts.items()
    }


__all__ = ["CARRY_NOTE", "explain_carries", "from_created_line", "with_created_line_edits"]
