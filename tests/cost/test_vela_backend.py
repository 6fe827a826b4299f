"""The Ethos-U backend: Vela compiles the model (and each finding's window before and after its fix) and its
estimate is the price; without Vela, the static model fitted to it prices, and says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from netlint.cli import main
from netlint.cost import backends
from netlint.cost.backends import store
from netlint.io import load_model
from netlint.targets import load_target

pytest.importorskip("ethosu.vela", reason="ethos-u-vela is not installed (pip install 'netlint-nn[ethos-u]')")

DATA = Path(__file__).resolve().parents[1] / "data"
INT8 = DATA / "keras_mobilenet_v2_a035_int8.tflite"
V3 = DATA / "keras_mobilenet_v3_small_int8.tflite"


@pytest.fixture(autouse=True)
def _fresh():
    backends.reset()
    store.clear_memory()
    yield
    backends.reset()


def test_the_whole_model_is_priced_by_vela(capsys) -> None:
    assert main(["cost", str(INT8), "--target", "ethos-u55", "--chip", "ethos-u55-128", "--format", "json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["pricing"]["basis"] == "vendor-estimator"
    assert "Vela" in found["pricing"]["graph"] and "ethos-u55-128" in found["pricing"]["graph"]
    # Vela's own estimate of this model with its default system config, plus one command stream's start
    assert found["latency_us"] == pytest.approx(7379, rel=0.01)
    assert found["fallback"]["nodes"] == []


def test_a_float_model_runs_on_the_cpu(tmp_path: Path) -> None:
    import numpy as np

    from netlint.testing.tflite_builder import TfliteBuilder

    b = TfliteBuilder("float")
    x = b.input("x", [1, 8, 8, 8])
    b.output(b.relu(b.conv_2d(x, np.ones((8, 3, 3, 8), np.float32), np.zeros(8, np.float32))))
    path = tmp_path / "f32.tflite"
    path.write_bytes(b.build())
    cost = backends.cost(load_model(path).graph, load_target("ethos-u55"))
    assert cost.pricing.basis == "vendor-estimator"
    assert cost.fallback_nodes and all(cost.node(n).fallback for n in cost.fallback_nodes)
    assert any("runs on the CPU" in note for note in cost.notes)


def _float_model(tmp_path: Path, activation: str) -> Path:
    import numpy as np

    from netlint.testing.tflite_builder import TfliteBuilder

    b = TfliteBuilder("float")
    x = b.input("x", [1, 8, 8, 8])
    y = b.conv_2d(x, np.ones((8, 3, 3, 8), np.float32), np.zeros(8, np.float32))
    b.output(b.hard_swish(y) if activation == "hard_swish" else b.relu(y))
    path = tmp_path / f"f32_{activation}.tflite"
    path.write_bytes(b.build())
    return path


def test_a_float_model_is_on_the_cpu_whether_vela_or_the_static_model_prices_it(tmp_path: Path, monkeypatch) -> None:
    """Vela places a float model's operators on the CPU; the static model does the same ([ops].data_types), with the
    same fallback cost; a float model Vela 5.2 refuses (HARD_SWISH: "IFM has to be 8bit") is priced by the static
    model, on the CPU, and says Vela's reason."""
    target = load_target("ethos-u55")
    relu = load_model(_float_model(tmp_path, "relu")).graph
    by_vela = backends.cost(relu, target)
    monkeypatch.setenv("NETLINT_VELA", "0")
    backends.reset()
    static = backends.cost(relu, target)
    assert (by_vela.pricing.basis, static.pricing.basis) == ("vendor-estimator", "static-model")
    assert sorted(static.fallback_nodes) == sorted(by_vela.fallback_nodes) == sorted(n.id for n in relu.nodes)
    assert static.latency_us == pytest.approx(by_vela.latency_us, rel=0.01)
    monkeypatch.delenv("NETLINT_VELA")
    backends.reset()
    swish = load_model(_float_model(tmp_path, "hard_swish")).graph
    refused = backends.cost(swish, target)
    assert refused.pricing.basis == "static-model"
    assert "vela failed" in refused.pricing.graph and "IFM has to be 8bit" in refused.pricing.graph
    assert sorted(refused.fallback_nodes) == sorted(n.id for n in swish.nodes)


def test_each_finding_is_priced_from_its_window_compiled_before_and_after(capsys) -> None:
    code = main(["check", str(V3), "--target", "ethos-u55", "--chip", "ethos-u55-128", "--select", "FU003",
                 "--format", "json", "--no-cache"])  # fmt: skip
    assert code == 1
    [model] = json.loads(capsys.readouterr().out)["models"]
    priced = [f["impact"] for f in model["findings"] if f["impact"] is not None]
    assert priced and all(p["pricing"]["basis"] == "vendor-estimator" for p in priced)
    # Vela's own cycles, window by window: a Relu fuses into the conv where the HARD_SWISH (a lookup table) ran
    # alone, which saves most after the larger dense convs and almost nothing after the depthwise ones
    savings = [p["saving_ms"] for p in priced]
    assert all(saving >= 0 for saving in savings) and max(savings) > 10 * min(savings)


def test_without_vela_the_static_model_fitted_to_it_prices(monkeypatch) -> None:
    monkeypatch.setenv("NETLINT_VELA", "0")
    backends.reset()
    cost = backends.cost(load_model(INT8).graph, load_target("ethos-u55", None, "ethos-u55-128"))
    assert cost.pricing.basis == "static-model" and "model of Vela" in cost.pricing.graph
    assert cost.latency_us == pytest.approx(7379, rel=0.1)  # docs/cost-model.md: within 4% on this chip
