"""Which fix keeps the gradients: decided from what was observed, before a fix is worded.

# NOTE [Fixes that never break training]
# "Detach it" is right for a tensor kept only to be looked at later (a logged
# metric, a returned output the caller stores), and wrong for two others:
# - a tensor backward runs through while it is held: a framework that keeps the
#   loss for its own backward (Lightning's closure result), a loop that sums the
#   micro-batches' losses and calls backward once. Detached before that backward,
#   it trains nothing; the fix is to release it once backward has run (``x = None``,
#   ``.clear()`` after the update), or to call backward per micro-batch;
# - a tensor the step's loss is computed from: detaching it before the loss is
#   computed cuts the gradient through it; after, it changes nothing.
# The harness says what it saw of each held graph (backward already ran through
# it; the step's loss graph reaches it; who runs backward: leakscope on the
# returned loss in ``check``, the framework in an adapter that runs backward
# itself, the job in ``watch``), and the plan follows. A detach is offered only
# where it cannot change a gradient; a fix that names a tensor with no graph is
# never offered (the stored-at line's rewrite detaches the expression the holder
# was stored from, read from the line, not a guess).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leakscope.harness.observe import Held


class Backward(str, enum.Enum):
    """Who runs backward on the step's loss."""

    #: ``check``'s own protocol: leakscope calls ``loss.backward()`` on the loss the step returned
    CALLER = "caller"
    #: an adapter whose framework runs backward inside the step (Lightning, transformers.Trainer)
    FRAMEWORK = "framework"
    #: ``watch``: the job itself
    JOB = "job"


class Plan(str, enum.Enum):
    """The fix that stops the holder keeping the graph without changing a gradient."""

    #: store a detached copy (or a number) where it is stored
    DETACH = "detach"
    #: the step's loss is computed from it: detach it only once the loss is computed
    DETACH_AFTER_LOSS = "detach-after-loss"
    #: backward runs through it while it is held: release it once backward has run
    RELEASE_AFTER_BACKWARD = "release-after-backward"


def plan_for(
    held: Held, backward: Backward, *, backward_done: bool | None = None, promptly: bool = True
) -> Plan:
    """NOTE [Fixes that never break training]. ``backward_done``: whether backward had already
    run through the tensor when the stored-at line stored it (None: not known). ``promptly``:
    backward ran through the container's newest entry within the step that stored it."""
    if (
        held.backward_ran
        and backward is not Backward.CALLER
        and held.path.root != "output"
        and not backward_done
    ):
        # Backward ran through what it holds, not through a loss leakscope holds, and not before
        # it was stored. A list that gets each step's loss appended and backward run on the step's
        # own loss, within the step (Lightning's ``training_step_outputs``), can keep a detached
        # copy: a backward through an older entry again would fail on its freed graph. A single
        # slot may be what the framework runs backward on (Lightning's ``_minimize``), and a list
        # whose entries backward runs through later (losses summed over micro-batches) feeds it.
        if held.accumulating and promptly:
            return Plan.DETACH
        return Plan.RELEASE_AFTER_BACKWARD
    if held.feeds_loss and held.path.root != "output":
        return Plan.DETACH_AFTER_LOSS
    return Plan.DETACH


__all__ = ["Backward", "Plan", "plan_for"]
