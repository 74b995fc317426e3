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

# NOTE [Updates that belong under no_grad]
# A target network's Polyak update (``target.copy_(tau * p + (1 - tau) * target)``)
# or an average kept with ``ema.mul_(d).add_(p, alpha=1 - d)`` is an in-place update
# of a tensor that autograd records: the updated tensor joins the step's graph and
# keeps it, step after step. The judge's edit detaches the names the line reads;
# the edit a person writes runs the statement under ``torch.no_grad()``, and that is
# the one offered (:func:`under_no_grad`), over two lines
# (``with torch.no_grad():`` and the statement one level in), proven like every
# edit: the holder gone and every gradient unchanged.
"""

from __future__ import annotations

import ast
import dataclasses
import re
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
    if finding.path.grad_slot():
        return None  # its line is the backward (NOTE [A gradient that keeps a graph])
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
        after, carry = no_grad_wrapped(torch, code), False
    return Edit(source.file, source.line, column, code, after), carry


def no_grad_wrapped(torch: str, code: str) -> str:
    """``code`` (one statement) run under ``torch.no_grad()``: an edit's ``after`` of two lines, the
    statement one level in (NOTE [An edit applies only to the line it was derived from])."""
    return f"with {torch}.no_grad():\n    {code}"


#: an in-place tensor update (``t.copy_(...)``, ``ema.mul_(d).add_(p)``): a method named like ``x_``
_IN_PLACE = re.compile(r"[a-z][a-z0-9_]*[a-z0-9]_")


def _in_place_update(code: str) -> bool:
    """Whether ``code`` is one statement that only updates a tensor in place: a call of an in-place
    tensor method, its result unused (a target network's ``target.copy_(tau * p + ...)``)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return False
    call = tree.body[0].value
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and _IN_PLACE.fullmatch(call.func.attr) is not None
    )


def under_no_grad(finding: Finding) -> Edit | None:
    """For a leak whose edit rewrites an in-place update of a tensor (NOTE [Updates that belong under
    no_grad]), the edit that runs the statement under ``torch.no_grad()`` instead; None otherwise."""
    edit = finding.edit
    if edit is None or finding.severity is not Severity.LEAK or not in_project(edit.file):
        return None
    code = edit.before.split("#", 1)[0].rstrip() if "#" in edit.before else edit.before
    if ";" in code or not _in_place_update(code):
        return None
    try:
        torch = _torch_name(ast.parse(read_source(Path(edit.file))))
    except (OSError, SyntaxError, LeakscopeError):
        return None
    if torch is None:
        return None
    return dataclasses.replace(edit, after=no_grad_wrapped(torch, edit.before))


def with_no_grad_updates(report: Report) -> Report:
    """``report`` with :func:`under_no_grad`'s edit in place of the judge's for each in-place update."""
    results = []
    for result in report.results:
        findings = []
        for finding in result.findings:
            wrapped = under_no_grad(finding)
            findings.append(
                finding if wrapped is None else dataclasses.replace(finding, edit=wrapped)
            )
        results.append(dataclasses.replace(result, findings=tuple(findings)))
    return dataclasses.replace(report, results=tuple(results))


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


__all__ = [
    "CARRY_NOTE",
    "explain_carries",
    "from_created_line",
    "no_grad_wrapped",
    "under_no_grad",
    "with_created_line_edits",
    "with_no_grad_updates",
]
