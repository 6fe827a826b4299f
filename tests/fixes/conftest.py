"""Helpers for the fix tests: fix an in-memory model with the same engine as `netlint fix`, run models with
onnxruntime on seeded inputs, and give onnx's light models random weights (their own are one constant)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from netlint.config import FileConfig, Overrides, settings_for
from netlint.fixes import verify
from netlint.fixes.engine import FixResult, fix_model
from netlint.testing import codes, findings_of

TARGETS = Path(__file__).parents[1] / "data" / "targets"
# Test targets without a cost model (no price skips a fix): every common activation fuses into a lone-consumer conv
# (FU001's duplicate-conv applies), or only Relu and clips do (FU003's substitute-activation has a substitute).
FUSES_ALL = str(TARGETS / "fuses-all.toml")
RELU_ONLY = str(TARGETS / "relu-only.toml")


def run_fix(
    model: onnx.ModelProto,
    select: list[str] | None = None,
    unsafe: bool = False,
    check: bool = True,
    target: str | None = None,
) -> FixResult:
    settings = settings_for(FileConfig(), Overrides(select=select, target=target))
    result = fix_model(model, "<memory>.onnx", Path("."), settings, unsafe=unsafe)
    if check:
        onnx.checker.check_model(result.fixed, full_check=True)
    return result


def outputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return verify.run(model, Path("."), verify.random_inputs(model))


def assert_equivalent(before: onnx.ModelProto, after: onnx.ModelProto, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    expected, got = outputs(before), outputs(after)
    assert set(expected) == set(got)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=rtol, atol=atol, err_msg=name)


def rechecked(model: onnx.ModelProto, code: str, target: str | None = None) -> list[str]:
    """Codes of `code` findings on the fixed model (what `netlint check` would say)."""
    return codes(findings_of(model, [code], target))


def randomized(path: Path, seed: int = 0) -> onnx.ModelProto:
    """A light model with each ConstantOfShape weight replaced by a random initializer (variances positive) and the
    logits before each Softmax made an output, so the outputs depend on every weight: the light models' own weights
    are all one value, which hides wrong folds."""
    model = onnx.load(str(path))
    rng = np.random.default_rng(seed)
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    kept = []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape":
            kept.append(node)
            continue
        shape = tuple(int(d) for d in shapes[node.input[0]])
        variance = "_riv_" in node.output[0] or "var" in node.output[0]
        values = rng.uniform(0.5, 1.5, shape) if variance else rng.standard_normal(shape) * 0.2
        tensor = numpy_helper.from_array(values.astype(np.float32), node.output[0])
        model.graph.initializer.append(tensor)
        model.graph.input.append(helper.make_tensor_value_info(node.output[0], tensor.data_type, list(shape)))
    del model.graph.node[:]
    model.graph.node.extend(kept)
    for node in kept:  # random weights saturate a softmax: compare the logits too
        if node.op_type == "Softmax":
            model.graph.output.append(helper.make_tensor_value_info(node.input[0], onnx.TensorProto.FLOAT, [1, None]))
    onnx.checker.check_model(model)
    return model


@pytest.fixture
def fix():
    return run_fix
