"""The content cache: reports survive JSON exactly, keys change with everything that changes a report, and a bad
entry is ignored and rewritten."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

import netlint.cache
from netlint.cache import CACHEDIR_TAG, Cache, FileDigests, cache_key, report_from_json, report_to_json
from netlint.config import FileConfig, Overrides, settings_for
from netlint.engine import lint_file
from netlint.ir.fingerprint import FindingKey
from netlint.pricing import Pricing
from netlint.results import (
    CostBreakdown,
    CostSummary,
    Kernel,
    ModelReport,
    PageData,
    Picture,
    PictureEdge,
    PictureNode,
    Suppressed,
)
from netlint.rule import Finding, FixRef, Impact, Skip
from netlint.source import Frame, Source
from netlint.testing import GraphBuilder

MODEL = "facenet_mtcnn_pnet.onnx"


def full_report() -> ModelReport:
    """A report with every field of every dataclass in it set to something other than its default."""
    finding = Finding(
        "FU004",
        "prelu-as-relu",
        "warning",
        "PRelu 'p' has slopes 0.25 … 0.3",
        ["p", "conv"],
        ["p_out"],
        FixRef("prelu-to-relu", "none", "the slope is not a constant"),
        "use Relu",
        {"slopes": [0.25, 0.3], "pair": (1, "a"), "nested": {"ok": True, "none": None}, "f32": np.float32(0.5)},
        Impact(
            "qualcomm-htp (a8, chip 8450)",
            1.25,
            0.75,
            "how the advised change was priced",
            False,
            Pricing("static-model", 0.3, 0.25, "netlint's model of the runtime", "the target's rates"),
        ),
        _source("p"),
        [_source("conv")],
        reference="Qualcomm AI Engine Direct HTP guide — https://docs.qualcomm.com/",
    )
    cost = CostSummary(
        "qualcomm-htp (a8, chip 8450)",
        "a8",
        1.25,
        123456789,
        98765,
        0.875,
        {"Conv": {"count": 3, "macs": 1000.0, "bytes": 10.0, "latency_ms": 0.5}},
        2,
        3,
        ["ddr_gbps"],
        Pricing("measured-runtime-graph", 0.08, 0.12, "onnxruntime 1.32.0 optimizer", "calibrated rates"),
    )
    return ModelReport(
        "models/m.onnx",
        "onnx",
        "qualcomm-htp",
        "a8",
        "8450",
        [finding],
        ["internal error in rule XX001"],
        [Skip("FU004", "p", "needs weight values")],
        ["shape inference failed"],
        [FindingKey("main", "FU004:0123456789abcdef0123")],
        cost,
        0.25,
        [
            Suppressed(
                Finding("FU006", "batchnorm-after-conv", "warning", "bn", ["bn"], ["t"]),
                "inSource",
                "netlint: ignore (doc_string of node 'bn')",
                FindingKey("main", "FU006:0123456789abcdef0123"),
            )
        ],
        _page(),
    )


def _page() -> PageData:
    """The HTML page's data (Settings.page_data), every field set."""
    breakdown = CostBreakdown(
        12.5,
        4096,
        "42 of 43 nodes priced",
        "the target's rates",
        ["ddr_gbps"],
        Pricing("static-model", 0.3, 0.25, "netlint's model of the runtime", "the target's rates"),
        {"Conv": 10.0, "PRelu": 2.5},
        {"Conv": 4000, "PRelu": 96},
        96,
        2.5,
        [Kernel(["Conv", "PRelu"], "conv", 12.5)],
        {"p": "conv"},
        {"conv": 12.5},
    )
    nodes = [PictureNode("p", "PRelu", "p_out", "1x4x8x8"), PictureNode("conv", "Conv", "c_out", "?x4x8x8")]
    picture = Picture(["p", "conv"], nodes, ["p"], [PictureEdge("conv", "p", "c_out", "?x4x8x8")], 1)
    return PageData(2, {"Conv": 3, "PRelu": 1}, [picture], breakdown, "the cost model failed")


def _source(node: str) -> Source:
    frames = [Frame("/home/me/proj/net.py", 62, "forward", "x = self.stem(x)"), Frame("/lib/torch/act.py", 9, "f")]
    return Source(
        node,
        "stem.act",
        "torch.nn.SiLU",
        "net.Block",
        "stem_act_1",
        "/home/me/proj/net.py",
        13,
        "Block.forward",
        "return self.act(x)",
        frames,
        "net.py",
    )


def test_the_sample_sets_every_field():
    """Fails when a field is added to a report dataclass: add it to full_report so the round-trip covers it."""
    report = full_report()
    finding = report.findings[0]
    frame = finding.source.frames[0]
    instances = (report, finding, report.cost, finding.impact, finding.fix, finding.source, frame)
    page = report.page
    assert page is not None and page.cost is not None
    picture = page.pictures[0]
    more = (page, page.cost, page.cost.top_kernels[0], picture, picture.nodes[0], picture.edges[0])
    for instance in (*instances, report.suppressed[0], *more):
        for field in dataclasses.fields(instance):
            value = getattr(instance, field.name)
            default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
            assert value != default and value is not None, f"{type(instance).__name__}.{field.name}"


def test_report_round_trips_exactly_through_json():
    report = full_report()
    rebuilt = report_from_json(json.loads(json.dumps(report_to_json(report))))
    assert rebuilt == report
    finding = rebuilt.findings[0]
    assert isinstance(finding.fix, FixRef) and isinstance(finding.impact, Impact)
    assert finding.impact.saving_ms == pytest.approx(0.5)
    assert isinstance(finding.data["pair"], tuple) and isinstance(finding.data["slopes"], list)
    assert isinstance(rebuilt.skipped[0], Skip) and isinstance(rebuilt.keys[0], FindingKey)
    assert isinstance(finding.source, Source) and isinstance(finding.source.frames[1], Frame)
    assert finding.source.frames[1].code is None and finding.other_sources == [_source("conv")]
    assert isinstance(rebuilt.cost, CostSummary) and rebuilt.cost.by_op_type == report.cost.by_op_type
    assert type(rebuilt.cost.by_op_type["Conv"]["count"]) is int  # printed as stored: 3, not 3.0


def test_stacks_are_stored_once_and_shared_when_rebuilt():
    """Every instance of a block has the same stack: the entry holds it once, and the rebuilt sources share it."""
    report = full_report()
    (finding,) = report.findings
    finding.other_sources = [dataclasses.replace(_source("conv")), dataclasses.replace(_source("x"), frames=[])]
    document = report_to_json(report)
    assert len(document[1]) == 2  # the full stack (used by three sources) and the empty one
    rebuilt = report_from_json(json.loads(json.dumps(document)))
    assert rebuilt == report
    sources = [rebuilt.findings[0].source, *rebuilt.findings[0].other_sources]
    assert sources[0].frames is sources[1].frames and sources[2].frames == []


@pytest.mark.parametrize("index", [2, -1, True, "0", None])
def test_a_stack_index_outside_the_table_is_refused(index):
    document = json.loads(json.dumps(report_to_json(full_report())))
    findings = _field(document[0], ModelReport, "findings")
    # the sources' column: each row's length (-1: none) and the sources by columns ([count, one column per field])
    lengths, sources = findings[1 + [field.name for field in dataclasses.fields(Finding)].index("source")]
    assert lengths == [1]
    sources[1 + [field.name for field in dataclasses.fields(Source)].index("frames")][0] = index
    with pytest.raises((TypeError, ValueError)):
        report_from_json(document)


@pytest.mark.parametrize(
    ("field", "column"),
    [
        ("source", [[2], [0, *[[]] * 11]]),  # a length other than -1 or 1
        ("source", [[1], [0, *[[]] * 11]]),  # a source the lengths name but the rows lack
        ("source", [[-1, 1], [0, *[[]] * 11]]),  # more lengths than findings
        ("source", [[1], [1, *[[None]] * 11]]),  # a source with a null node
        ("other_sources", [[2], [1, *[["x"]] * 11]]),  # lengths adding up to more than the sources
        ("other_sources", [[-2], [0, *[[]] * 11]]),
        ("other_sources", [[True], [0, *[[]] * 11]]),
        ("other_sources", [[0]]),
    ],
)
def test_a_malformed_column_of_sources_is_refused(field, column):
    document = json.loads(json.dumps(report_to_json(full_report())))
    findings = _field(document[0], ModelReport, "findings")
    findings[1 + [f.name for f in dataclasses.fields(Finding)].index(field)] = column
    with pytest.raises((TypeError, ValueError)):
        report_from_json(document)


def test_a_report_without_optional_parts_round_trips():
    report = ModelReport("m.onnx", None, "generic", errors=["empty file (0 bytes)"])
    assert report_from_json(json.loads(json.dumps(report_to_json(report)))) == report


def _set(row, cls, fields):
    """Set fields by name in `row`, the JSON of a `cls` (a list of its fields, in order)."""
    names = [field.name for field in dataclasses.fields(cls)]
    for name, value in fields.items():
        row[names.index(name)] = value
    return row


def _report_with(**fields):
    document = report_to_json(full_report())
    _set(document[0], ModelReport, fields)  # [the report's fields, the table of stacks]
    return document


def _finding_with(**fields):
    """The full report's JSON with fields of its one finding replaced. Findings are stored by columns: [count, one
    column per field]; the fix's column is a table of distinct fixes and each finding's index in it (0: none), the
    data's is the values and the rows that hold a tuple."""
    document = report_to_json(full_report())
    findings = _field(document[0], ModelReport, "findings")
    names = [field.name for field in dataclasses.fields(Finding)]
    for name, value in fields.items():
        if name == "fix":
            findings[1 + names.index(name)] = [[], [0]] if value is None else [[value], [1]]
        elif name == "data":  # [the values, the rows that hold a tuple]
            findings[1 + names.index(name)][0][0] = value
        else:
            findings[1 + names.index(name)][0] = value
    return document


def _findings_with(**columns):
    """The full report's JSON with whole columns of its findings replaced (`count` for the first item)."""
    document = report_to_json(full_report())
    findings = _field(document[0], ModelReport, "findings")
    names = ["count", *(field.name for field in dataclasses.fields(Finding))]
    for name, value in columns.items():
        findings[names.index(name)] = value
    return document


def _cost_with(**fields):
    document = report_to_json(full_report())
    _set(_field(document[0], ModelReport, "cost"), CostSummary, fields)
    return document


def _field(row, cls, name):
    return row[[field.name for field in dataclasses.fields(cls)].index(name)]


@pytest.mark.parametrize(
    "document",
    [
        {"path": "m.onnx"},  # an object: a dataclass is stored as the list of its fields
        ["m.onnx"],  # fields missing
        [[*report_to_json(full_report())[0], 1], []],  # a field nobody knows
        [*report_to_json(full_report()), []],  # something after the table of stacks
        report_to_json(full_report())[0],  # no table of stacks
        [report_to_json(full_report())[0], {}],
        _report_with(findings=[["FU004"]]),
        _report_with(findings=[report_to_json(full_report())[0][5]]),  # findings as rows, not columns
        _findings_with(count=2),  # columns shorter than the count
        _findings_with(count=-1),
        _findings_with(count=True),
        _findings_with(code=["FU004", "FU005"]),  # a column longer than the count
        _findings_with(nodes="p"),
        _findings_with(fix=[[["a-pass", "safe"]], [2]]),  # an index past the table (0 is null)
        _findings_with(fix=[[["a-pass", "safe"]], [-1]]),
        _findings_with(fix=[[["a-pass", "safe"]], [True]]),
        _findings_with(fix=[[["a-pass", "safe"]], [1, 1]]),
        _findings_with(fix=[[["a-pass", "safe"]]]),
        _findings_with(fix=[{"a": 1}, [1]]),
        _findings_with(severity=[["warning"]]),  # unhashable where a Literal's value is expected
        _findings_with(data=[[{}], [1]]),  # a row with a tuple past the column
        _findings_with(data=[[{}], [-1]]),
        _findings_with(data=[[{}], ["0"]]),
        _findings_with(data=[[{}]]),
        _findings_with(data=[[[]], []]),  # a list where an object is expected, in a row without tuples
        _report_with(findings=[{"code": "FU004"}]),
        _report_with(findings="no"),
    ],
)
def test_a_malformed_document_is_refused(document):
    with pytest.raises((TypeError, KeyError, ValueError)):
        report_from_json(document)


@pytest.mark.parametrize(
    "document",
    [
        _finding_with(code=7),  # str
        _finding_with(help=["not", "a", "string"]),  # str or null
        _finding_with(severity="fatal"),  # a Literal
        _finding_with(nodes=["a", 1]),  # a list of strings
        _finding_with(nodes=None),
        _finding_with(data=[]),  # an object
        _finding_with(fix=["x"]),  # a dataclass (or null) missing a field
        _finding_with(fix={"name": "x", "applicability": "safe"}),  # an object, not the list of its fields
        _finding_with(impact={"__tuple__": []}),
        _cost_with(macs="many"),  # a number
        _cost_with(macs=True),  # a bool is not a number
        _cost_with(latency_ms="slow"),  # a number or null
        _cost_with(by_op_type={"Conv": {"count": "two"}}),  # an object of numbers
        _cost_with(by_op_type={"Conv": [3]}),
        _cost_with(by_op_type=[]),
        _findings_with(impact=[["ort-cpu", 1.0, "slow", None]]),  # a dataclass or null, in a column
        _findings_with(impact=[5]),
    ],
)
def test_every_kind_of_field_is_checked(document):
    """The generated builders check each field as the annotation says, whether inline or by a converter."""
    with pytest.raises((TypeError, KeyError, ValueError)):
        report_from_json(document)


def test_a_null_where_the_annotation_allows_it_is_kept():
    document = _finding_with(help=None, fix=None, impact=None)
    _set(_field(document[0], ModelReport, "cost"), CostSummary, {"latency_ms": None})
    report = report_from_json(document)
    assert report.cost.latency_ms is None
    assert (report.findings[0].help, report.findings[0].fix, report.findings[0].impact) == (None, None, None)


def _settings(**overrides):
    return settings_for(FileConfig(), Overrides(**overrides))


def test_put_then_get_gives_the_report_for_the_path_asked(tmp_path):
    cache = Cache(tmp_path / "cache")
    report = dataclasses.replace(full_report(), errors=[])
    assert cache.put("ab" * 32, report)
    again = cache.get("ab" * 32, "elsewhere/copy.onnx")
    assert again == dataclasses.replace(report, path="elsewhere/copy.onnx")
    assert cache.hits == 1
    assert (tmp_path / "cache" / "CACHEDIR.TAG").read_text() == CACHEDIR_TAG
    assert (tmp_path / "cache" / ".gitignore").read_text().splitlines()[-1] == "*"


def test_reports_with_errors_are_not_stored(tmp_path):
    cache = Cache(tmp_path)
    assert not cache.put("cd" * 32, full_report())
    assert cache.get("cd" * 32, "m.onnx") is None


def test_a_report_that_would_not_come_back_equal_is_not_stored(tmp_path):
    report = dataclasses.replace(full_report(), errors=[])
    report.findings[0].data["weights"] = np.ones(3)  # an array: JSON cannot carry it exactly
    assert not Cache(tmp_path).put("ef" * 32, report)


@pytest.mark.parametrize("garbage", [b"", b"{not json", b"[]", b'{"format": 1}', b"\xff\xfe"])
def test_a_corrupt_entry_is_a_miss_and_is_rewritten(tmp_path, garbage):
    cache = Cache(tmp_path)
    report = dataclasses.replace(full_report(), errors=[])
    key = "12" * 32
    cache.put(key, report)
    entry = next(tmp_path.rglob(f"{key}.json"))
    entry.write_bytes(garbage)
    assert cache.get(key, report.path) is None
    assert cache.put(key, report)
    assert cache.get(key, report.path) == report


def test_a_foreign_entry_is_a_miss(tmp_path):
    """An entry copied under another key's name (or planted in a shipped cache folder) is not used."""
    cache = Cache(tmp_path)
    report = dataclasses.replace(full_report(), errors=[])
    cache.put("34" * 32, report)
    source = next(tmp_path.rglob(f"{'34' * 32}.json"))
    planted = source.parent.parent / "56" / f"{'56' * 32}.json"
    planted.parent.mkdir()
    shutil.copy(source, planted)
    assert cache.get("56" * 32, report.path) is None


def test_concurrent_writers_leave_a_whole_entry(tmp_path):
    cache = Cache(tmp_path)
    report = dataclasses.replace(full_report(), errors=[])
    key = "78" * 32
    threads = [threading.Thread(target=lambda: [cache.put(key, report) for _ in range(25)]) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.get(key, report.path) == report
    assert not list(tmp_path.rglob("*.tmp"))


def test_an_unwritable_cache_folder_disables_the_cache_with_a_warning(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    cache = Cache(tmp_path / "file" / "cache")
    assert not cache.put("9a" * 32, dataclasses.replace(full_report(), errors=[]))
    assert cache.warning and "cannot write" in cache.warning
    assert cache.get("9a" * 32, "m.onnx") is None


# --- keys --------------------------------------------------------------------------------------------------------
def test_key_follows_content_not_name(tmp_path, data_dir):
    settings = _settings()
    shutil.copy(data_dir / MODEL, tmp_path / "a.onnx")
    shutil.copy(data_dir / MODEL, tmp_path / "b.onnx")
    assert cache_key(tmp_path / "a.onnx", settings) == cache_key(tmp_path / "b.onnx", settings)
    with (tmp_path / "b.onnx").open("ab") as handle:
        handle.write(b"\0")
    assert cache_key(tmp_path / "a.onnx", settings) != cache_key(tmp_path / "b.onnx", settings)


def test_unreadable_files_have_no_key(tmp_path):
    assert cache_key(tmp_path / "missing.onnx", _settings()) is None
    assert cache_key(tmp_path, _settings()) is None


@pytest.mark.parametrize(
    "changed",
    [
        {"select": ["FU"]},
        {"ignore": ["FU004"]},
        {"target": "qualcomm-htp"},
        {"target": "qualcomm-htp", "precision": "a16"},
        {"target": "qualcomm-htp", "chip": "8650"},
    ],
)
def test_key_changes_with_the_settings(data_dir, changed):
    path = data_dir / MODEL
    assert cache_key(path, _settings()) != cache_key(path, _settings(**changed))


@pytest.mark.parametrize(
    "config",
    [
        {"severity": {"FU004": "error"}},
        {"rule-options": {"FU004": {"atol": 1e-3}}},
        {"per-node-ignores": {"/prelu1/*": ["FU004"]}},
    ],
)
def test_key_changes_with_the_configuration(data_dir, config):
    path = data_dir / MODEL
    configured = settings_for(FileConfig(Path("netlint.toml"), config), Overrides())
    assert cache_key(path, _settings()) != cache_key(path, configured)


def test_key_changes_when_fingerprints_are_wanted(data_dir):
    wanted = _settings()
    wanted.fingerprints = True
    assert cache_key(data_dir / MODEL, _settings()) != cache_key(data_dir / MODEL, wanted)


def test_key_changes_with_the_target_file_content(tmp_path, data_dir):
    from netlint.targets import _builtin_files

    source = _builtin_files()["generic"].read_text(encoding="utf-8")
    (tmp_path / "board.toml").write_text(source, encoding="utf-8")
    before = cache_key(data_dir / MODEL, _settings(target=str(tmp_path / "board.toml")))
    (tmp_path / "board.toml").write_text(source.replace("[target]", "[target]\nkind = 'cpu'", 1), encoding="utf-8")
    after = cache_key(data_dir / MODEL, _settings(target=str(tmp_path / "board.toml")))
    assert before != after


def test_key_follows_external_data_files(tmp_path):
    """External weights enter the key by size and mtime (not bytes); a missing file is part of the key too."""
    builder = GraphBuilder()
    builder.output(builder.conv(builder.input("x", [1, 4, 8, 8]), 4))
    model = builder.build()
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0)
    settings = _settings()
    present = cache_key(tmp_path / "m.onnx", settings)
    data = tmp_path / "m.data"
    data.write_bytes(data.read_bytes() + b"\0" * 16)
    grown = cache_key(tmp_path / "m.onnx", settings)
    data.unlink()
    absent = cache_key(tmp_path / "m.onnx", settings)
    assert len({present, grown, absent}) == 3


def test_linting_twice_through_the_cache_gives_the_same_report(tmp_path, data_dir):
    settings = _settings()
    path = data_dir / MODEL
    report = lint_file(path, settings)
    cache = Cache(tmp_path)
    key = cache_key(path, settings)
    assert key is not None and cache.put(key, report)
    assert Cache(tmp_path).get(key, str(path)) == report


def test_a_real_report_with_cost_and_impacts_round_trips(tmp_path, data_dir):
    settings = _settings(target="qualcomm-htp")
    settings.fingerprints = True
    path = data_dir / "tv_mobilenet_v2_bn_unfolded_noweights.onnx"
    report = lint_file(path, settings)
    assert report.cost is not None and report.keys and any(f.impact for f in report.findings)
    assert report_from_json(json.loads(json.dumps(report_to_json(report)))) == report
    key = cache_key(path, settings)
    assert Cache(tmp_path).put(key, report)
    assert Cache(tmp_path).get(key, str(path)) == report


# --- content hashes remembered by stat -------------------------------------------------------------------------------
@pytest.fixture
def later(monkeypatch):
    """The clock 10 s ahead: files written by the test are past the racy window, without sleeping."""
    now = time.time_ns()
    monkeypatch.setattr(netlint.cache.time, "time_ns", lambda: now + 10_000_000_000)


def _model(tmp_path: Path, data_dir: Path) -> Path:
    path = tmp_path / "m.onnx"
    shutil.copy(data_dir / MODEL, path)
    return path


def test_a_remembered_hash_serves_an_unchanged_file_without_reading_it(tmp_path, data_dir, later, monkeypatch):
    path = _model(tmp_path, data_dir)
    settings = _settings()
    memo_file = tmp_path / "digests.json"
    memo = FileDigests(memo_file)
    assert cache_key(path, settings, digests=memo) == cache_key(path, settings)
    memo.save()
    monkeypatch.setattr(netlint.cache, "_hash_file", lambda *a: pytest.fail("hashed a file with a known stat"))
    assert cache_key(path, settings, digests=FileDigests(memo_file)) == cache_key(path, settings, digests=memo)


def test_a_file_changed_just_now_is_not_remembered(tmp_path, data_dir):
    """Racy: a second write in the same timestamp tick would leave its stat unchanged."""
    memo = FileDigests(tmp_path / "digests.json")
    memo.digest(_model(tmp_path, data_dir))
    assert not memo.changed and memo.known == {}


def test_a_rewrite_with_its_mtime_set_back_is_hashed_again(tmp_path, data_dir, later):
    path = _model(tmp_path, data_dir)
    memo = FileDigests(tmp_path / "digests.json")
    before = memo.digest(path)
    assert memo.changed
    info = path.stat()
    time.sleep(0.05)  # past the kernel's timestamp tick: the rewrite gets another ctime
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))  # same size
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))  # and the old mtime, as `cp -p` or `touch -d` could
    assert memo.digest(path) != before
    assert memo.digest(path)[0] == hashlib.sha256(bytes(data)).hexdigest()


@pytest.mark.parametrize("garbage", [b"", b"{not json", b"[]", b'{"format": 1, "files": []}', b"\xff"])
def test_a_corrupt_digest_memo_is_ignored(tmp_path, data_dir, garbage):
    path = _model(tmp_path, data_dir)
    (tmp_path / "digests.json").write_bytes(garbage)
    assert cache_key(path, _settings(), digests=FileDigests(tmp_path / "digests.json")) == cache_key(path, _settings())


def test_a_foreign_digest_memo_entry_is_ignored(tmp_path, data_dir):
    """An entry for another file's stat (a memo copied from elsewhere, or the file replaced) is not used."""
    path = _model(tmp_path, data_dir)
    info = path.stat()
    stale = [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino + 1, info.st_dev, "0" * 64, []]
    memo_file = tmp_path / "digests.json"
    memo_file.write_text(json.dumps({"format": 1, "files": {os.path.abspath(path): stale}}))
    assert FileDigests(memo_file).digest(path)[0] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_cache_stores_its_digest_memo_with_its_entries(tmp_path, data_dir, later):
    path = _model(tmp_path, data_dir)
    cache = Cache(tmp_path / "cache")
    cache_key(path, _settings(), digests=cache.digests)
    cache.save_digests()
    memo = json.loads((tmp_path / "cache" / f"v{netlint.cache.CACHE_FORMAT}" / "digests.json").read_text())
    assert list(memo["files"]) == [os.path.abspath(path)]
    assert (tmp_path / "cache" / "CACHEDIR.TAG").is_file()


def test_a_keyword_only_field_is_rebuilt_by_name():
    """Builders pass fields positionally (cheaper), except the ones __init__ takes only by keyword."""

    @dataclasses.dataclass
    class Mixed:
        first: int
        named: str = dataclasses.field(default="x", kw_only=True)
        last: float = 1.0

    assert netlint.cache._build(Mixed, [1, "y", 2.5]) == Mixed(1, 2.5, named="y")
    assert netlint.cache._encode(Mixed(1, 2.5, named="y")) == [1, "y", 2.5]
    with pytest.raises(TypeError):
        netlint.cache._build(Mixed, [1, 2, 2.5])


def test_equal_frozen_string_values_are_shared_and_others_are_not():
    """A rebuilt report shares one FixRef between findings with the same fix (immutable: sharing cannot leak a
    change); a mutable dataclass, or a frozen one with numbers (Impact), is built anew each time."""
    report = full_report()
    report.findings = [dataclasses.replace(report.findings[0]) for _ in range(3)]
    rebuilt = report_from_json(json.loads(json.dumps(report_to_json(report))))
    assert rebuilt == report
    fixes = [finding.fix for finding in rebuilt.findings]
    assert fixes[0] is not None and all(fix is fixes[0] for fix in fixes)
    assert len({id(finding) for finding in rebuilt.findings}) == 3
    impacts = [finding.impact for finding in rebuilt.findings]
    assert impacts[0] is not None and impacts[0] is not impacts[1]
    other = netlint.cache._build(FixRef, ["other-pass", "safe", ""])
    assert other == FixRef("other-pass", "safe") and other is not fixes[0]


@dataclasses.dataclass
class _Chain:
    name: str
    rest: _Chain | None = None


def test_a_dataclass_that_refers_to_itself_is_rebuilt():
    chain = _Chain("a", _Chain("b", _Chain("c")))
    assert netlint.cache._build(_Chain, ["a", ["b", ["c", None]]]) == chain
    assert netlint.cache._encode(chain) == ["a", ["b", ["c", None]]]
    with pytest.raises(TypeError):
        netlint.cache._build(_Chain, ["a", ["b", [3, None]]])


def test_only_the_rows_that_hold_a_tuple_are_walked():
    """Finding.data is stored with the rows that hold a tuple: those get their tuples back, the others are kept as
    parsed (a dict shaped like a tagged tuple in an untagged row stays a dict: only netlint's own tags are read)."""
    report = full_report()
    plain = dataclasses.replace(report.findings[0], data={"slopes": [0.25], "nested": {"deep": [{"x": 1}]}})
    report.findings = [plain, report.findings[0], dataclasses.replace(plain, data={})]
    document = report_to_json(report)
    values, tagged = _field(document[0], ModelReport, "findings")[
        1 + [f.name for f in dataclasses.fields(Finding)].index("data")
    ]
    assert tagged == [1]
    assert report_from_json(json.loads(json.dumps(document))) == report
    values[0]["nested"] = {"__tuple__": [1]}
    assert report_from_json(json.loads(json.dumps(document))).findings[0].data["nested"] == {"__tuple__": [1]}


def test_an_entry_of_the_previous_format_is_a_miss_and_is_rewritten(tmp_path, data_dir):
    """Entries of format 2 (each finding as the list of its fields) are not read as format 3 (findings by columns):
    one found where a current entry belongs is a miss, and the next put replaces it."""
    cache = Cache(tmp_path / "cache")
    settings = _settings()
    key = cache_key(data_dir / MODEL, settings)
    report = lint_file(data_dir / MODEL, settings)
    assert report.findings and cache.put(key, report)
    entry = cache._entry(key)
    document = json.loads(entry.read_text())
    old_report = list(document["report"][0])  # format 3 had no table of stacks, nor sources
    old_report[5] = [  # the previous layout: rows
        netlint.cache._encode(dataclasses.replace(finding, source=None, other_sources=None))
        for finding in report.findings
    ]
    old = dict(document, format=2, report=old_report)
    entry.write_text(json.dumps(old))
    assert cache.get(key, "m.onnx") is None
    entry.write_text(json.dumps(dict(old, format=netlint.cache.CACHE_FORMAT)))  # the layout alone is refused too
    assert cache.get(key, "m.onnx") is None
    assert cache.put(key, report)
    assert cache.get(key, "m.onnx") == dataclasses.replace(report, path="m.onnx")
