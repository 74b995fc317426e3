"""Diagnosis depth: cause classes, source lines, projection, explain, device handling."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import leakscope
from leakscope.cli import app
from leakscope.diagnose.projection import evaluate, parse_at, parse_bytes
from leakscope.errors import UsageError
from leakscope.harness.source import is_internal
from leakscope.options import CheckOptions
from leakscope.probe.cost import node_cost
from leakscope.probe.view import build_view
from leakscope.render.dot import render as render_dot
from leakscope.render.tree import render as render_tree
from leakscope.results import Mode

pytestmark = pytest.mark.integration

runner = CliRunner()
TRAIN_ONLY = CheckOptions(modes=(Mode.TRAIN,), micro_batches=1)


def _findings(target: str, options: CheckOptions = TRAIN_ONLY) -> dict[str, object]:
    (result,) = leakscope.check(target, options).results
    return {str(f.path): f for f in result.findings}


def test_cause_classes_on_their_fixtures() -> None:
    verl = _findings("fixtures.verl_bug:Engine")
    assert verl["output.model_output.log_probs"].cause == "leaf+grad"  # type: ignore[attr-defined]
    assert verl["output.model_output.entropy"].cause == "activations"  # type: ignore[attr-defined]
    assert _findings("fixtures.ctx_function:Engine")["output.scaled"].cause == "ctx"  # type: ignore[attr-defined]
    nodes = _findings("fixtures.nodes_only:Engine")["engine.scaled[0]"]
    assert nodes.cause == "nodes-only" and nodes.graph_nodes > 0  # type: ignore[attr-defined]
    # NOTE [One accounting]: a graph backward has freed is its nodes, never "0 B".
    per_node = node_cost().bytes_per_node
    assert nodes.retained_bytes == nodes.graph_nodes * per_node > 0  # type: ignore[attr-defined]
    assert nodes.bytes_by_cause == {"nodes-only": nodes.retained_bytes}  # type: ignore[attr-defined]
    cycle = _findings("fixtures.cycle_until_gc:Engine")["<reference cycle>"]
    assert cycle.cause == "until-gc" and cycle.severity == "warning" and cycle.retained_bytes > 0  # type: ignore[attr-defined]


def test_bytes_by_cause_add_up_and_exclude_parameters() -> None:
    f = _findings("fixtures.verl_bug:Engine")["output.model_output.entropy"]
    assert sum(f.bytes_by_cause.values()) == f.retained_bytes  # type: ignore[attr-defined]
    # leaf + grad: 2 x [B=2, S=8, H=32] fp32; side branch: 2 x [2, 8, V=64] fp32; the graph's nodes.
    nodes = f.graph_nodes * node_cost().bytes_per_node  # type: ignore[attr-defined]
    assert f.bytes_by_cause == {  # type: ignore[attr-defined]
        "activations": 2 * 2 * 8 * 64 * 4,
        "leaf+grad": 2 * 2 * 8 * 32 * 4,
        "nodes-only": nodes,
    }


def test_source_points_at_the_engine_line() -> None:
    findings = _findings("fixtures.verl_bug:Engine")
    src = findings["output.model_output.log_probs"].source  # type: ignore[attr-defined]
    assert (src.file, src.function) == ("fixtures/verl_bug.py", "forward_step")
    line = open("fixtures/verl_bug.py").read().splitlines()[src.line - 1]
    assert '"log_probs": log_probs_of(' in line


def test_every_fixture_source_is_user_code() -> None:
    for target in (
        "fixtures.output_containers:Engine",
        "fixtures.model_state:Engine",
        "fixtures.ctx_function:Engine",
    ):
        for f in _findings(target).values():
            assert f.source is not None and not is_internal(f.source.file), f  # type: ignore[attr-defined]


def test_projection_reproduces_verl_6698_within_10_percent() -> None:
    scale = parse_at("hidden=4096,tokens=17700,dtype=bf16,micro-batches=16,gpu-memory=80GiB")
    (result,) = leakscope.check(
        "leakscope.models.engines:LeakyFSDPEngine",
        CheckOptions(modes=(Mode.TRAIN,), at=scale, confirm=False),
    ).results
    measured_upstream = 0.27 * 2**30
    assert (
        abs(result.projection.bytes_per_micro_batch - measured_upstream) / measured_upstream < 0.10
    )
    assert result.projection.bytes_per_update == 16 * result.projection.bytes_per_micro_batch
    assert result.projection.oom_micro_batch is None  # 16 x 0.27 GiB fits in 80 GiB


def test_projection_arithmetic_and_oom_micro_batch() -> None:
    # fitted fp32 bytes: 8 per token x hidden (leaf+grad), 512 per token x vocab (a side branch)
    coeffs = (8.0, 512.0, 0.0, 0.0, 0.0, 0.0)
    assert evaluate(coeffs, 1000, 4096, 1, 2) == 8 * 4096 * 1000 + 512 * 1000
    assert evaluate(coeffs, 1, 1, 128, 2) == 8 + 512 * 128
    assert parse_bytes("80GiB") == 80 * 2**30 and parse_bytes("1.5GB") == 1_500_000_000
    scale = parse_at("hidden=8,tokens=4,vocab=16,layers=3,batch=2")
    assert (scale.vocab, scale.layers, scale.batch) == (16, 3, 2)
    assert scale.given == ("hidden", "tokens", "vocab", "layers", "batch")


@pytest.mark.parametrize(
    "bad",
    [
        "hidden=4096",
        "tokens=1,hidden=x",
        "hidden=1,tokens=1,dtype=int3",
        "hidden=1,tokens=1,color=red",
    ],
)
def test_bad_scale_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_at(bad)
    result = runner.invoke(
        app, ["estimate", "fixtures.verl_bug:Engine", "--at", bad, "--format", "json"]
    )
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"].startswith("--at")


def test_estimate_cli_prints_projection() -> None:
    result = runner.invoke(
        app,
        [
            "estimate",
            "leakscope.models.engines:LeakyFSDPEngine",
            "--format",
            "json",
            "--at",
            "hidden=4096,tokens=17700,dtype=bf16,micro-batches=16,gpu-memory=4GiB",
        ],
    )
    assert result.exit_code == 1
    (res,) = json.loads(result.stdout)["results"]
    proj = res["projection"]
    assert proj["oom_micro_batch"] == 4 * 2**30 // proj["bytes_per_micro_batch"] + 1
    assert proj["samples"] and proj["dtype"] == "bf16"


def test_explain_draws_the_leaky_reference_graph(tmp_path) -> None:  # type: ignore[no-untyped-def]
    dot = tmp_path / "g.dot"
    result = runner.invoke(
        app,
        [
            "explain",
            "leakscope.models.engines:LeakyFSDPEngine",
            "--path",
            "output.model_output.entropy",
            "--dot",
            str(dot),
        ],
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith(
        "leakscope.models.engines:LeakyFSDPEngine [train] output.model_output.entropy:"
    )
    assert "MulBackward0 [saved other float32[2x8x64] 4.0 KiB]" in out
    assert (
        "AccumulateGrad [leaf float32[2x8x32] 2.0 KiB] [leaf.grad float32[2x8x32] 2.0 KiB]" in out
    )
    text = dot.read_text()
    assert text.startswith("digraph retained {") and text.rstrip().endswith("}")
    assert "LogSoftmaxBackward0" in text


def test_explain_unknown_path_and_clean_engine() -> None:
    bad = runner.invoke(
        app, ["explain", "leakscope.models.engines:LeakyFSDPEngine", "--path", "output.nope"]
    )
    assert bad.exit_code == 2
    assert "no finding at 'output.nope'" in bad.output
    clean = runner.invoke(app, ["explain", "leakscope.models.engines:FSDPEngine"])
    assert clean.exit_code == 0
    assert clean.stdout == "leakscope.models.engines:FSDPEngine [train]: no retained graph\n"


def test_explain_handles_deep_graphs_without_recursion() -> None:
    x = torch.ones(2, requires_grad=True)
    y = x
    for _ in range(300_000):
        y = y * 1.0
    view = build_view(y.grad_fn, target="t", mode="train", path="p", max_nodes=1000)
    assert view.total_nodes == 300_001 and view.truncated and len(view.nodes) == 1000
    tree = render_tree(view, max_lines=50)
    assert "more nodes" in tree and len(tree.splitlines()) == 51
    assert render_dot(view).count("->") == 999
    holder = [y]
    del y
    free_deep_graph(holder)


def free_deep_graph(holder: list[torch.Tensor]) -> None:
    """Free a very deep graph root-first.

    NOTE: once Python has walked ``next_functions`` of a deep chain, torch 2.13
    frees the chain recursively in C++ and overflows the stack at ~60k nodes.
    Holding a wrapper for every node and dropping them from the root down frees
    one node at a time.
    """
    import collections

    wrappers: collections.deque[object] = collections.deque()
    node = holder[0].grad_fn
    while node is not None:
        wrappers.append(node)
        nxt = node.next_functions
        node = nxt[0][0] if nxt else None
    holder.clear()
    while wrappers:
        wrappers.popleft()


def test_device_cuda_without_gpu_is_a_usage_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = runner.invoke(
        app, ["check", "fixtures.verl_fix:Engine", "--device", "cuda", "--format", "json"]
    )
    assert result.exit_code == 2
    assert "no CUDA device" in json.loads(result.stdout)["error"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_growth_reports_allocated_memory() -> None:
    (result,) = leakscope.check(
        "leakscope.models.engines:LeakyFSDPEngine",
        CheckOptions(modes=(Mode.TRAIN,), device="cuda", confirm=False),
    ).results
    assert result.verdict.value == "leak"
    alloc = result.growth.cuda_allocated
    assert alloc is not None and alloc[-1] > alloc[0]
