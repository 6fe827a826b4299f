"""Expected finding counts on real models, each one also derived independently from the raw onnx / tflite structures
by a simpler method than the IR's (so a regression in the linter and in the literal numbers is caught separately)."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import onnx
import pytest
import tflite

from netlint.testing import GraphBuilder, TfliteBuilder, lint

CONV_LIKE = {"Conv", "ConvTranspose", "Gemm", "MatMul", "ConvInteger", "QLinearConv", "MatMulInteger", "QLinearMatMul"}
FOLDABLE = {"Conv", "ConvTranspose", "Gemm"}
PASS_THROUGH = {"Identity", "Cast", "QuantizeLinear", "DequantizeLinear"}
ONNX_ACTIVATIONS = {
    "Relu",
    "Clip",
    "LeakyRelu",
    "PRelu",
    "Sigmoid",
    "Tanh",
    "HardSigmoid",
    "HardSwish",
    "Elu",
    "Selu",
    "Celu",
    "Gelu",
    "Softplus",
    "Softsign",
    "Mish",
    "ThresholdedRelu",
}
TFLITE_CONVS = {"CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED"}
TFLITE_ACTIVATIONS = {
    "RELU",
    "RELU6",
    "RELU_N1_TO_1",
    "RELU_0_TO_1",
    "LOGISTIC",
    "TANH",
    "HARD_SWISH",
    "PRELU",
    "LEAKY_RELU",
    "ELU",
    "GELU",
}


# --- independent counts from raw onnx ---------------------------------------------------------------------------------


class _OnnxView:
    def __init__(self, path: Path) -> None:
        self.graph = onnx.load(str(path), load_external_data=False).graph
        self.readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        self.producer: dict[str, onnx.NodeProto] = {}
        for node in self.graph.node:
            for name in dict.fromkeys(node.input):
                if name:
                    self.readers[name].append(node)
            for name in node.output:
                self.producer[name] = node
        self.outputs = {o.name for o in self.graph.output}

    def real_readers(self, name: str) -> tuple[list[onnx.NodeProto], bool]:
        """Readers of `name` seen through pass-through ops, and whether the data reaches a graph output."""
        found: list[onnx.NodeProto] = []
        reaches = name in self.outputs
        for node in self.readers[name]:
            if node.op_type in PASS_THROUGH and node.input[0] == name:
                more, out = self.real_readers(node.output[0])
                found += more
                reaches = reaches or out
            else:
                found.append(node)
        return found, reaches

    def fu006(self) -> int:
        """BNs whose input is produced by Conv/ConvTranspose/Gemm read by nothing else and not a graph output, or by a
        Concat (along axis 1) of such convs (issue 21, item 7: a backward fold, one slice each)."""
        count = 0
        for node in self.graph.node:
            if node.op_type != "BatchNormalization":
                continue
            if self._lone_conv(node.input[0]):
                count += 1
                continue
            concat = self.producer.get(node.input[0])
            if concat is None or concat.op_type != "Concat" or not self._lone(node.input[0]):
                continue
            axis = next((a.i for a in concat.attribute if a.name == "axis"), None)
            if axis in (1, -3) and all(self._lone_conv(name) for name in concat.input):
                count += 1
        return count

    def _lone(self, name: str) -> bool:
        return len(self.readers[name]) == 1 and name not in self.outputs

    def _lone_conv(self, name: str) -> bool:
        conv = self.producer.get(name)
        return conv is not None and conv.op_type in FOLDABLE and self._lone(name)

    def fu001(self) -> int:
        """Convs whose output is read by an activation and by something else (SiLU's Sigmoid + Mul counting once)."""
        count = 0
        for node in self.graph.node:
            if node.op_type not in CONV_LIKE:
                continue
            readers, reaches = self.real_readers(node.output[0])
            sigmoid_outs = {r.output[0] for r in readers if r.op_type == "Sigmoid"}
            readers = [r for r in readers if not (r.op_type == "Mul" and sigmoid_outs & set(r.input))]
            if any(r.op_type in ONNX_ACTIVATIONS for r in readers) and len(readers) + reaches >= 2:
                count += 1
        return count

    def fu004(self) -> int:
        return sum(node.op_type == "PRelu" for node in self.graph.node)


LIGHT = {
    # model: (FU001, FU004, FU006)
    "light_bvlc_alexnet.onnx": (0, 0, 0),
    "light_densenet121.onnx": (0, 0, 59),
    "light_inception_v1.onnx": (0, 0, 0),
    "light_inception_v2.onnx": (0, 0, 69),
    "light_resnet50.onnx": (0, 0, 53),
    "light_shufflenet.onnx": (0, 0, 49),
    "light_squeezenet.onnx": (0, 0, 0),
    "light_vgg19.onnx": (0, 0, 0),
    "light_zfnet512.onnx": (0, 0, 0),
}


def _counts(path: Path) -> tuple[tuple[int, int, int], object]:
    """FU001, FU004 and FU006 counts (the other rules have their own real-model tests in tests/rules/), on ONNX
    Runtime CPU: there each of them is reported per node (Relu fuses only into a lone-consumer conv, PRelu does not)."""
    report = lint(path, select=["FU001", "FU004", "FU006"], target="ort-cpu")
    found = Counter(f.code for f in report.findings)
    return (found["FU001"], found["FU004"], found["FU006"]), report


@pytest.mark.parametrize("name", sorted(LIGHT))
def test_onnx_light_models(light_dir: Path, name: str) -> None:
    path = light_dir / name
    counts, report = _counts(path)
    assert report.errors == []
    assert counts == LIGHT[name]
    view = _OnnxView(path)
    assert (view.fu001(), 0, view.fu006()) == LIGHT[name]
    assert view.fu004() == 0  # no PRelu at all in these models


def test_densenet_batchnorms_after_concat_are_not_counted(light_dir: Path) -> None:
    view = _OnnxView(light_dir / "light_densenet121.onnx")
    before = Counter(view.producer[n.input[0]].op_type for n in view.graph.node if n.op_type == "BatchNormalization")
    assert before == {"Conv": 59, "Concat": 58, "AveragePool": 3, "MaxPool": 1}
    report = lint(light_dir / "light_densenet121.onnx", select=["FU006"])
    conv_names = {n.name for n in view.graph.node if n.op_type == "Conv"}
    assert all(f.nodes[1] in conv_names for f in report.findings)


CORPUS_ONNX = {
    # model: (FU001, FU004, FU006)
    "facenet_mtcnn_pnet.onnx": (0, 3, 0),
    "timm_mixnet_s_noweights.onnx": (0, 0, 34),  # every BN follows a Concat of the mixed convs
    "torch_transformer_encoder_6l_noweights.onnx": (0, 0, 0),
    "tv_mobilenet_v2_bn_unfolded_noweights.onnx": (0, 0, 52),
    "tv_squeezenet1_1_qdq_int8.onnx": (0, 0, 0),
}


@pytest.mark.parametrize("name", sorted(CORPUS_ONNX))
def test_onnx_corpus_models(data_dir: Path, name: str) -> None:
    path = data_dir / name
    counts, report = _counts(path)
    assert report.errors == []
    assert counts == CORPUS_ONNX[name]
    view = _OnnxView(path)
    assert (view.fu001(), view.fu004(), view.fu006()) == CORPUS_ONNX[name]


def test_mixnet_batchnorms_all_follow_concat(data_dir: Path) -> None:
    view = _OnnxView(data_dir / "timm_mixnet_s_noweights.onnx")
    bns = [n for n in view.graph.node if n.op_type == "BatchNormalization"]
    assert len(bns) == 34
    assert {view.producer[n.input[0]].op_type for n in bns} == {"Concat"}
    # and its SiLUs follow convs directly: without collapsing Sigmoid + Mul, FU001 would fire on them
    silu_convs = 0
    for node in view.graph.node:
        if node.op_type in CONV_LIKE:
            ops = sorted(r.op_type for r in view.readers[node.output[0]])
            silu_convs += ops == ["Mul", "Sigmoid"]
    assert silu_convs > 0


# --- independent counts from raw tflite ------------------------------------------------------------------------------


def _tflite_fu001(path: Path) -> tuple[int, Counter]:
    """Convs with no fused activation whose output is read by an activation op and by something else (a swish's
    LOGISTIC + MUL counting once); also the op names in the file."""
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    names = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        custom = code.CustomCode()
        names.append(custom.decode() if custom else tflite.opcode2name(builtin))
    options = {
        "CONV_2D": tflite.Conv2DOptions,
        "DEPTHWISE_CONV_2D": tflite.DepthwiseConv2DOptions,
        "FULLY_CONNECTED": tflite.FullyConnectedOptions,
        "TRANSPOSE_CONV": tflite.TransposeConvOptions,
    }
    flagged = 0
    ops_seen: Counter = Counter()
    for s in range(model.SubgraphsLength()):
        sg = model.Subgraphs(s)
        ops = [sg.Operators(j) for j in range(sg.OperatorsLength())]
        outputs = set(sg.OutputsAsNumpy().tolist())
        readers: dict[int, list[int]] = defaultdict(list)
        for j, op in enumerate(ops):
            ops_seen[names[op.OpcodeIndex()]] += 1
            for t in set(op.InputsAsNumpy().tolist()):
                readers[t].append(j)
        for op in ops:
            name = names[op.OpcodeIndex()]
            if name not in TFLITE_CONVS:
                continue
            table = op.BuiltinOptions()
            opts = options[name]()
            opts.Init(table.Bytes, table.Pos)
            fused = opts.FusedActivationFunction() if hasattr(opts, "FusedActivationFunction") else 0
            if fused != tflite.ActivationFunctionType.NONE:
                continue
            out = int(op.Outputs(0))
            kinds = [names[ops[j].OpcodeIndex()] for j in readers[out]]
            logistic_outs = {int(ops[j].Outputs(0)) for j in readers[out] if names[ops[j].OpcodeIndex()] == "LOGISTIC"}
            kinds = [
                k
                for k, j in zip(kinds, readers[out], strict=True)
                if not (k == "MUL" and logistic_outs & set(ops[j].InputsAsNumpy().tolist()))
            ]
            if any(k in TFLITE_ACTIVATIONS for k in kinds) and len(kinds) + (out in outputs) >= 2:
                flagged += 1
    return flagged, ops_seen


@pytest.mark.parametrize("name", ["keras_mobilenet_v2_a035_int8.tflite", "keras_mobilenet_v3_small_int8.tflite"])
def test_tflite_corpus_models(data_dir: Path, name: str) -> None:
    path = data_dir / name
    counts, report = _counts(path)
    assert report.errors == []
    assert report.format == "tflite"
    assert counts == (0, 0, 0)
    flagged, ops = _tflite_fu001(path)
    assert flagged == 0
    assert sum(ops[k] for k in TFLITE_CONVS) > 30  # the check above really looked at convs
    assert ops["PRELU"] == 0
    assert not any(k.startswith("FlexFusedBatchNorm") for k in ops)


# --- the independent counters agree with netlint on small models that do have findings --------------------------------


def test_independent_onnx_counters_see_positives(tmp_path: Path) -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4)
    h = b.add(b.relu(y), y)  # FU001
    z = b.batchnorm(b.conv(h, 4))  # FU006
    s = b.conv(z, 4)
    b.output(b.silu(s), b.prelu(z, [0.1, 0.2, 0.3, 0.4]))  # a lone SiLU: no FU001; a PRelu: FU004
    path = b.save(tmp_path / "m.onnx")
    view = _OnnxView(path)
    counts, _ = _counts(path)
    assert counts == (view.fu001(), view.fu004(), view.fu006()) == (1, 1, 1)


def test_independent_tflite_counter_sees_positives(tmp_path: Path) -> None:
    tb = TfliteBuilder()
    x = tb.input("x", [1, 8, 8, 4])
    w = np.ones((4, 3, 3, 4), np.float32)
    y = tb.conv_2d(x, w, np.zeros(4, np.float32))
    h = tb.add(tb.relu(y), y)  # flagged
    z = tb.conv_2d(h, w, np.zeros(4, np.float32), activation="RELU")
    h2 = tb.add(tb.relu(z), z)  # fused activation: not flagged
    d = tb.depthwise_conv_2d(h2, np.ones((1, 3, 3, 4), np.float32), None)
    tb.output(tb.mul(d, tb.logistic(d)))  # swish alone: not flagged
    tb.save(tmp_path / "m.tflite")
    flagged, _ = _tflite_fu001(tmp_path / "m.tflite")
    counts, _ = _counts(tmp_path / "m.tflite")
    assert counts == (flagged, 0, 0) == (1, 0, 0)
