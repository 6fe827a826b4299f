"""Findings' sources read from what exporters record: PyTorch dynamo metadata_props (module path, classes, the
stack that created the op), TorchScript scope names, Keras layer names in TFLite tensor names and tf2onnx node names.
The models are built here in the exporters' exact formats (netlint.testing.exports copies them from a real torch 2.13
export); nothing here needs torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from netlint.io.provenance import parse_stack_trace
from netlint.source import Frame, Source
from netlint.testing import GraphBuilder, TfliteBuilder, load
from netlint.testing import lint as _lint
from netlint.testing.exports import (
    CONV_FRAME,
    SEQUENTIAL_FRAME,
    SILU_FRAME,
    convbnact_net,
    dynamo_metadata,
    set_metadata,
    stack_trace,
)

NET = "/home/alice/proj/models/net.py"
PACKAGES = "/opt/conda/lib/python3.11/site-packages"
# a target that fuses only Relu into a conv, so each SiLU after a conv is a finding of its own (without a target they
# are summarised as one finding per kind)
NPU = str(Path(__file__).parents[1] / "data" / "targets" / "npu-relu.toml")


def lint(model, select=None):
    return _lint(model, select, target=NPU)


def _by_code(report, code: str) -> list:
    return [finding for finding in report.findings if finding.code == code]


# --- PyTorch dynamo exports ------------------------------------------------------------------------------------------
def test_a_dynamo_export_names_module_class_owner_and_the_creating_line() -> None:
    report = lint(convbnact_net())
    fu003 = _by_code(report, "FU003")
    assert [f.source.module for f in fu003] == ["stem.act", "features.0.act", "features.1.act", "features.2.act"]
    source = fu003[0].source
    # FU003's advice is about the activation (the finding is anchored at the conv): its source is the SiLU's
    assert fu003[0].nodes[0] == "node_conv2d" and source.node == "node_silu"
    assert source.module_class == "torch.nn.SiLU"  # torch.nn.modules.activation.SiLU by its public name
    assert source.owner_class == "models.net.ConvBNAct"
    # the innermost frame of the model's own code, not torch's activation.py under it
    assert (source.file, source.line, source.code) == (NET, 13, "return self.act(self.bn(self.conv(x)))")
    assert source.function == "ConvBNAct.forward"  # Net.forward and ConvBNAct.forward pair with the two classes
    assert source.frames == [
        Frame(NET, 62, "forward", "x = self.stem(x)"),
        Frame(NET, 13, "forward", "return self.act(self.bn(self.conv(x)))"),
        Frame(*SILU_FRAME),
    ]
    assert source.path is None  # set later, against the repository (netlint.sources)
    # the finding's other node (the conv, which kept the folded batchnorm's metadata) is listed
    assert [(o.node, o.module, o.module_class) for o in fu003[0].other_sources] == [
        ("node_conv2d", "stem.bn", "torch.nn.BatchNorm2d")
    ]


def test_fu006_names_the_batchnorm_and_lists_the_conv() -> None:
    report = lint(convbnact_net(folded=False))
    (first, *_) = _by_code(report, "FU006")
    assert first.source.node == first.nodes[0] == "node_batch_norm"
    assert (first.source.module, first.source.module_class) == ("stem.bn", "torch.nn.BatchNorm2d")
    assert [o.module for o in first.other_sources] == ["stem.conv"]


def _efficientnet_like(frames: list, classes: list[tuple[str, str]]) -> onnx.ModelProto:
    """One Conv -> SiLU whose SiLU carries `classes` (module path) and `frames`, as torchvision's EfficientNet would."""
    b = GraphBuilder()
    y = b.conv(b.input("x", [1, 4, 8, 8]), 4, name="node_conv2d")
    y = b.mul(y, b.sigmoid(y, name="node_Sigmoid"), name="node_silu")
    b.output(y)
    model = b.build()
    meta = dynamo_metadata(classes, "silu", "aten.silu.default", frames)
    for node in model.graph.node:
        if node.name in ("node_Sigmoid", "node_silu"):
            set_metadata(node, meta)
    return model


EFFICIENTNET = [
    ("", "torchvision.models.efficientnet.EfficientNet"),
    ("features", "torch.nn.modules.container.Sequential"),
    ("features.1", "torch.nn.modules.container.Sequential"),
    ("features.1.0", "torchvision.models.efficientnet.MBConv"),
    ("features.1.0.block", "torch.nn.modules.container.Sequential"),
    ("features.1.0.block.0", "torchvision.ops.misc.Conv2dNormActivation"),
    ("features.1.0.block.0.2", "torch.nn.modules.activation.SiLU"),
]
EFFICIENTNET_FRAMES = [
    (f"{PACKAGES}/torchvision/models/efficientnet.py", 343, "forward", "return self._forward_impl(x)"),
    (f"{PACKAGES}/torchvision/models/efficientnet.py", 333, "_forward_impl", "x = self.features(x)"),
    SEQUENTIAL_FRAME,
    SEQUENTIAL_FRAME,
    (f"{PACKAGES}/torchvision/models/efficientnet.py", 165, "forward", "result = self.block(input)"),
    SEQUENTIAL_FRAME,
    SEQUENTIAL_FRAME,
    SILU_FRAME,
]


def test_an_installed_package_frame_counts_where_the_module_class_lives() -> None:
    """torchvision's EfficientNet-B0: every frame is under site-packages; efficientnet.py holds MBConv, so its line
    165 is the model's code (the issue's example), and MBConv owns it (not Conv2dNormActivation, in ops/misc.py)."""
    (finding,) = _by_code(lint(_efficientnet_like(EFFICIENTNET_FRAMES, EFFICIENTNET)), "FU003")
    source = finding.source
    assert (source.module, source.module_class) == ("features.1.0.block.0.2", "torch.nn.SiLU")
    assert source.owner_class == "torchvision.models.efficientnet.MBConv"
    assert (source.file, source.line) == (f"{PACKAGES}/torchvision/models/efficientnet.py", 165)
    assert source.function == "MBConv.forward"
    assert len(source.frames) == len(EFFICIENTNET_FRAMES)


def test_an_installed_package_frame_without_the_module_class_is_library_code() -> None:
    """A helper in another installed package (no class of the module path lives there) is skipped for the nearest
    frame that is the model's own code; with none at all, the source has no file, only the module path."""
    helper_frame = (f"{PACKAGES}/timm/layers/activations.py", 12, "swish", "return x.mul_(x.sigmoid())")
    frames = [*EFFICIENTNET_FRAMES[:-1], helper_frame]
    (finding,) = _by_code(lint(_efficientnet_like(frames, EFFICIENTNET)), "FU003")
    assert (finding.source.file, finding.source.line) == (f"{PACKAGES}/torchvision/models/efficientnet.py", 165)
    only_library = [SEQUENTIAL_FRAME, helper_frame, SILU_FRAME]
    (finding,) = _by_code(lint(_efficientnet_like(only_library, EFFICIENTNET)), "FU003")
    assert finding.source.file is finding.source.line is finding.source.function is None
    assert finding.source.module == "features.1.0.block.0.2" and len(finding.source.frames) == 3
    assert finding.source.owner_class == "torchvision.ops.misc.Conv2dNormActivation"  # the nearest non-torch class


def test_the_function_is_not_qualified_when_its_class_is_uncertain() -> None:
    """A Sequential subclass (no forward of its own) in the same file: three classes of net.py on the path, two
    forward frames in it. Which class's forward is line 44 is not certain, so the function stays `forward`."""
    classes = [
        ("", "models.net.Net"),
        ("blocks", "torch.nn.modules.container.Sequential"),
        ("blocks.0", "models.net.MBConv"),
        ("blocks.0.block", "models.net.ConvNormAct"),
        ("blocks.0.block.2", "torch.nn.modules.activation.SiLU"),
    ]
    frames = [
        (NET, 70, "forward", "x = self.blocks(x)"),
        SEQUENTIAL_FRAME,
        (NET, 44, "forward", "y = self.block(x)"),
        SEQUENTIAL_FRAME,
        SILU_FRAME,
    ]
    (finding,) = _by_code(lint(_efficientnet_like(frames, classes)), "FU003")
    assert (finding.source.line, finding.source.function) == (44, "forward")


def test_namespace_stands_in_for_missing_name_scopes() -> None:
    model = _efficientnet_like(EFFICIENTNET_FRAMES, EFFICIENTNET)
    for node in model.graph.node:
        kept = [
            p
            for p in node.metadata_props
            if p.key not in ("pkg.torch.onnx.name_scopes", "pkg.torch.onnx.class_hierarchy")
        ]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)
    (finding,) = _by_code(lint(model), "FU003")
    assert (finding.source.module, finding.source.module_class) == ("features.1.0.block.0.2", "torch.nn.SiLU")
    assert finding.source.line == 165


@pytest.mark.parametrize(
    "scopes",
    [
        "[" * 300 + "]" * 300,  # nested beyond the parser's limit
        "['a', 1]",  # not strings only
        "[__import__('os').system('echo pwned')]",  # code: never run
        "__import__('os')",
        "['" + "x" * 70_000 + "']",  # beyond the size parsed
        "",
    ],
)
def test_hostile_metadata_gives_no_module_and_no_error(scopes: str) -> None:
    model = _efficientnet_like(EFFICIENTNET_FRAMES, EFFICIENTNET)
    for node in model.graph.node:
        for prop in node.metadata_props:
            if prop.key == "pkg.torch.onnx.name_scopes":
                prop.value = scopes
            if prop.key == "pkg.torch.onnx.stack_trace":
                prop.value = "File \x00\n" * 3 + "garbage"
    report = lint(model)
    assert not report.errors and not report.notes
    (finding,) = _by_code(report, "FU003")
    source = finding.source
    assert source is None or (source.module is None and source.file is None)


def test_hostile_stack_traces_are_read_as_text() -> None:
    """Control characters and absurd line numbers stay data: the frame is read, nothing fails."""
    trace = 'File "/p/\x1b[31mevil.py", line 99999999999999999999, in f\x07\n    x = 1\x1b]0;t\x07'
    model = _efficientnet_like(EFFICIENTNET_FRAMES, [("", "evil.Net"), ("act", "torch.nn.modules.activation.SiLU")])
    for node in model.graph.node:
        for prop in node.metadata_props:
            if prop.key == "pkg.torch.onnx.stack_trace":
                prop.value = trace
    (finding,) = _by_code(lint(model), "FU003")
    assert (finding.source.file, finding.source.line) == ("/p/\x1b[31mevil.py", 99999999999999999999)


def test_a_model_without_metadata_has_no_sources() -> None:
    b = GraphBuilder()  # producer "netlint", node names without scopes
    y = b.conv(b.input("x", [1, 4, 8, 8]), 4)
    b.output(b.silu(y))
    report = lint(b.build())
    assert report.findings and all(f.source is None and f.other_sources is None for f in report.findings)


def test_stack_traces_and_class_lists_are_shared_between_nodes() -> None:
    """A dynamo export repeats each block's class path and stack on every instance: the IR keeps one copy."""
    graph = load(convbnact_net(blocks=3)).graph
    features = [graph.node(f"node_silu_{i}") for i in (1, 2, 3)]
    assert all(node.meta is not None for node in features)
    assert features[1].meta is features[2].meta  # same (class_hierarchy, stack_trace): one tuple
    assert features[1].scopes != features[2].scopes  # each node's own module path
    conv, sigmoid, silu = graph.node("node_conv2d_1"), graph.node("node_Sigmoid_1"), graph.node("node_silu_1")
    assert sigmoid.meta is silu.meta and conv.meta != silu.meta
    assert graph.node("node_conv2d_2").meta is conv.meta  # the folded batchnorm's, in every block


def test_a_marker_in_dynamo_metadata_still_suppresses() -> None:
    model = convbnact_net()
    for node in model.graph.node:
        if node.name == "node_conv2d_1":
            node.metadata_props.add(key="netlint", value="ignore[FU003]")
    codes = [(f.code, f.nodes[0]) for f in lint(model).findings]
    assert ("FU003", "node_conv2d") in codes and ("FU003", "node_conv2d_1") not in codes


def test_parse_stack_trace_reads_every_frame_and_skips_caret_lines() -> None:
    text = stack_trace([(NET, 62, "forward", "x = self.stem(x)"), CONV_FRAME])
    text += '\n  File "<frozen runpy>", line 3, in <module>\n  File "/a/b.py", line 7, in f\n    y = g(x)\n    ^^^^'
    frames = parse_stack_trace(text)
    assert frames == [
        Frame(NET, 62, "forward", "x = self.stem(x)"),
        Frame(*CONV_FRAME),
        Frame("<frozen runpy>", 3, "<module>", None),
        Frame("/a/b.py", 7, "f", "y = g(x)"),
    ]
    assert parse_stack_trace("") == [] and parse_stack_trace("Traceback: nothing here") == []


# --- names alone -----------------------------------------------------------------------------------------------------
def test_torchscript_scope_names_give_the_module_path() -> None:
    """'/features/features.0/features.0.0/Conv': a container's children repeat its name, so each such scope replaces
    the one before; an attribute scope (conv_dw) is appended."""
    b = GraphBuilder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, name="/features/features.0/features.0.0/Conv")
    gate = b.sigmoid(y, name="/features/features.0/features.0.1/Sigmoid")
    y = b.mul(y, gate, name="/features/features.0/features.0.1/Mul")
    y = b.conv(y, 4, name="/blocks/blocks.0/blocks.0.0/conv_dw/Conv")
    b.output(b.prelu(y, [0.1, 0.2, 0.3, 0.4], name="/Flatten/PRelu_root"))
    model = b.build()
    model.producer_name = "pytorch"

    def sources() -> dict[str, Source]:
        found = [s for f in lint(model).findings for s in (f.source, *(f.other_sources or ())) if s is not None]
        return {source.node: source for source in found}

    named = sources()
    assert named["/features/features.0/features.0.1/Mul"] == Source(
        "/features/features.0/features.0.1/Mul", module="features.0.1"
    )
    assert named["/features/features.0/features.0.0/Conv"].module == "features.0.0"
    assert named["/blocks/blocks.0/blocks.0.0/conv_dw/Conv"].module == "blocks.0.0.conv_dw"
    assert named["/Flatten/PRelu_root"].module == "Flatten"
    model.producer_name = "some-other-tool"  # the same names from a tool that does not mean module scopes by them
    assert sources() == {}


def test_keras_layer_names_in_tflite_tensor_names() -> None:
    rng = np.random.default_rng(0)
    b = TfliteBuilder()
    x = b.input("serving_default_input:0", [1, 8, 8, 3])
    conv_name = "mobilenetv2_1/Conv1_1/convolution;mobilenetv2_1/bn_Conv1_1/batchnorm/add_1"  # a fused op: ';'
    y = b.conv_2d(x, rng.standard_normal((4, 3, 3, 3)).astype(np.float32), np.zeros(4, np.float32), name=conv_name)
    b.output(b.hard_swish(y, name="mobilenetv2_1/Conv1_hswish_1/HardSwish"))
    (finding,) = _by_code(lint(b.build()), "FU003")
    assert finding.source == Source(finding.source.node, layer="Conv1_hswish_1")
    assert [other.layer for other in finding.other_sources] == ["Conv1_1;bn_Conv1_1"]


def test_tf2onnx_node_names_give_the_layer() -> None:
    b = GraphBuilder()
    y = b.conv(b.input("x", [1, 4, 8, 8]), 4, name="StatefulPartitionedCall/model/conv2d/Conv2D")
    gate = b.sigmoid(y, name="StatefulPartitionedCall/model/activation/Sigmoid")
    b.output(b.mul(y, gate, name="StatefulPartitionedCall/model/activation/mul"))
    model = b.build()
    model.producer_name = "tf2onnx"
    (finding,) = _by_code(lint(model), "FU003")
    assert finding.source.layer == "activation"
    assert [other.layer for other in finding.other_sources] == ["conv2d"]
