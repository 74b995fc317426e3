"""A timeout names the phase the check was in: the child's phase reports, read back by the parent."""

from __future__ import annotations

from typing import Any

import pytest

import leakscope
from leakscope.options import CheckOptions
from leakscope.phase import listening
from leakscope.runner.isolation import last_phase, timeout_message

pytestmark = pytest.mark.integration


def _records(target: str, **options: Any) -> list[dict[str, Any]]:
    """The phase records an isolated child writes, from a real check in this process."""
    events: list[dict[str, Any]] = []
    with listening(lambda event: events.append({"phase": dict(event)})):
        leakscope.check(target, CheckOptions(**options))
    return events


def _messages(records: list[dict[str, Any]]) -> list[str]:
    """The timeout message had the child been killed after each record, in order, without repeats."""
    out: list[str] = []
    for i in range(1, len(records) + 1):
        message = timeout_message(600, *last_phase(records[:i]))
        if not out or out[-1] != message:
            out.append(message)
    return out


WALKING = (
    "the check process was killed: leakscope's walk over what the engine keeps did not finish (it runs none of "
    "the engine's code: the engine keeps a very large structure); lower --max-objects or raise --timeout"
)
STEP = (
    "the check process was killed: the engine's step did not return; fix the hang (a blocking call, a wait "
    "on other ranks, an endless loop) or raise --timeout"
)
LEAKSCOPE = (
    "the check process was killed: the check did not finish in time; raise --timeout, and if it keeps happening, "
    "please report it with --debug output"
)
BUILD = (
    "the check process was killed: the engine's __init__ did not return; fix the hang (a blocking call, a "
    "wait on other ranks, an endless loop) or raise --timeout"
)


def test_every_phase_of_a_leaky_check_is_named_in_a_timeout() -> None:
    messages = _messages(
        _records("fixtures.verl_bug:Engine", modes=(leakscope.Mode.TRAIN,), micro_batches=2)
    )
    start = [
        "timed out after 600 s while importing the target; the check process was killed: importing the engine's "
        "module did not finish: a module-level statement blocks (a download, a wait on other ranks); guard it "
        "with `if __name__ == '__main__':` or raise --timeout",
        f"timed out after 600 s while setting up the check; {LEAKSCOPE}",
        f"timed out after 600 s while finding holders; {LEAKSCOPE}",
        f"timed out after 600 s while building the engine; {BUILD}",
        f"timed out after 600 s while walking the holders; {WALKING}",  # what the engine holds before its step
        f"timed out after 600 s while running the step; {STEP}",
        f"timed out after 600 s while walking the holders; {WALKING}",
    ]
    assert messages[: len(start)] == start
    assert (
        f"timed out after 600 s while walking the holders (confirming 1 of 2); {WALKING}"
        in messages
    )
    assert f"timed out after 600 s while measuring growth; {LEAKSCOPE}" in messages
    assert (
        f"timed out after 600 s while running micro-batch 2 of 2 (measuring growth); {STEP}"
        in messages
    )
    assert (
        f"timed out after 600 s while walking the holders (measuring growth); {WALKING}" in messages
    )
    assert (
        f"timed out after 600 s while running the step (tracing where each holder was stored); {STEP}"
        in messages
    )


def test_a_new_mode_starts_the_phase_over() -> None:
    records = [
        {"phase": {"target": "t", "phase": "importing the target"}},
        {"phase": {"mode": "train"}},
        {"phase": {"phase": "finding holders"}},
        {"phase": {"step": "walking"}},
        {"phase": {"mode": "forward-only"}},
        {"result": {}},
    ]
    assert last_phase(records[:4]) == ("finding holders", "walking")
    assert last_phase(records) == (None, None)
    assert (
        timeout_message(25, None, None)
        == f"timed out after 25 s while setting up the check; {LEAKSCOPE}"
    )
