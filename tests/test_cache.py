"""The content cache: reports survive JSON exactly, keys change with everything that changes a report, and a bad
entry is ignored and rewritten."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

import netlint.cache
from netlint.cache import CACHEDIR_TAG, Cache, FileDigests, cache_key, decode_entry, encode_entry
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


def _round_trip(report: ModelReport) -> ModelReport:
    return decode_entry(encode_entry("k", report), "k")


def test_report_round_trips_exactly_through_json():
    report = full_report()
    rebuilt = _round_trip(report)
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
    assert isinstance(rebuilt.suppressed[0].finding, Finding) and isinstance(rebuilt.cost.pricing, Pricing)


def test_stacks_are_stored_once_and_shared_when_rebuilt():
    """Every instance of a block has the same stack: the entry holds it once, and the rebuilt sources share it."""
    report = full_report()
    (finding,) = report.findings
    finding.other_sources = [dataclasses.replace(_source("conv")), dataclasses.replace(_source("x"), frames=[])]
    document = json.loads(encode_entry("k", report))
    assert len(document["stacks"]) == 2  # the full stack (used by three sources) and the empty one
    assert document["source_stacks"] == [0, 0, 1]
    rebuilt = _round_trip(report)
    assert rebuilt == report
    sources = [rebuilt.findings[0].source, *rebuilt.findings[0].other_sources]
    assert sources[0].frames is sources[1].frames and sources[2].frames == []


def test_data_with_tuples_comes_back_with_them_and_other_data_as_parsed():
    """JSON has only arrays: the data of a finding that holds a tuple is stored tagged beside the report; other
    data is kept as parsed (a dict shaped like a tag in it stays a dict: only netlint's own tags are read)."""
    report = full_report()
    plain = dataclasses.replace(report.findings[0], data={"slopes": [0.25], "nested": {"__tuple__": [1]}})
    report.findings = [plain, report.findings[0], dataclasses.replace(plain, data={})]
    document = json.loads(encode_entry("k", report))
    assert list(document["tuples"]) == ["1"] and document["report"]["findings"][1]["data"] == {}
    rebuilt = _round_trip(report)
    assert rebuilt == report
    assert rebuilt.findings[0].data["nested"] == {"__tuple__": [1]} and rebuilt.findings[1].data["pair"] == (1, "a")


def test_a_report_without_optional_parts_round_trips():
    report = ModelReport("m.onnx", None, "generic", errors=["empty file (0 bytes)"])
    assert _round_trip(report) == report


def _document(change) -> bytes:
    """The full report's entry, as JSON values changed by `change` (a function of the document), as bytes."""
    document = json.loads(encode_entry("k", full_report()))
    change(document)
    return json.dumps(document).encode()


def _finding(document):
    return document["report"]["findings"][0]


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda d: d.update(report=["m.onnx"]), "$.report"),  # an array where an object is expected
        (lambda d: d["report"].pop("path"), "$.report"),  # a required field missing
        (lambda d: d.update(extra=1), "extra"),  # a field nobody knows
        (lambda d: d.pop("stacks"), "stacks"),
        (lambda d: d["report"].update(findings="no"), "$.report.findings"),
        (lambda d: _finding(d).update(code=7), "$.report.findings[0].code"),  # str
        (lambda d: _finding(d).update(help=["not", "a", "string"]), "$.report.findings[0].help"),  # str or null
        (lambda d: _finding(d).update(severity="fatal"), "$.report.findings[0].severity"),  # a Literal
        (lambda d: _finding(d).update(nodes=["a", 1]), "$.report.findings[0].nodes[1]"),  # a list of strings
        (lambda d: _finding(d).update(nodes=None), "$.report.findings[0].nodes"),
        (lambda d: _finding(d).update(data=[]), "$.report.findings[0].data"),  # an object
        (lambda d: _finding(d)["fix"].pop("name"), "$.report.findings[0].fix"),  # a dataclass missing a field
        (lambda d: _finding(d)["impact"].update(latency_ms_after="slow"), "latency_ms_after"),
        (lambda d: d["report"]["cost"].update(macs="many"), "$.report.cost.macs"),  # a number
        (lambda d: d["report"]["cost"].update(macs=True), "$.report.cost.macs"),  # a bool is not a number
        (
            lambda d: d["report"]["cost"].update(by_op_type={"Conv": {"count": "two"}}),
            "$.report.cost.by_op_type[...][...]",
        ),
        (lambda d: d["report"]["cost"].update(by_op_type=[]), "$.report.cost.by_op_type"),
        (lambda d: d["stacks"][0][0].update(line="62"), "$.stacks[0][0].line"),
        (lambda d: d.update(source_stacks=[0, True]), "$.source_stacks[1]"),
    ],
)
def test_a_malformed_entry_is_refused_with_the_field_named(change, where):
    with pytest.raises(ValueError, match=re.escape(where)):
        decode_entry(_document(change), "k")


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(source_stacks=[0]),  # fewer indices than sources
        lambda d: d.update(source_stacks=[0, 0, 0]),  # more
        lambda d: d.update(source_stacks=[0, 1]),  # past the table
        lambda d: d.update(source_stacks=[0, -1]),
        lambda d: _finding(d)["source"].update(frames=d["stacks"][0]),  # a stack in place and in the table
        lambda d: d["tuples"].update({"2": {}}),  # data for a finding past the report's
        lambda d: d["tuples"].update({"1": {}}),  # the suppressed finding's: its data is in the report already
    ],
)
def test_an_entry_whose_parts_do_not_add_up_is_refused(change):
    def suppressed_data(document):
        document["report"]["suppressed"][0]["finding"]["data"] = {"x": 1}

    with pytest.raises(ValueError):
        decode_entry(_document(lambda d: (suppressed_data(d), change(d))), "k")


@pytest.mark.parametrize(("field", "value"), [("format", 7), ("netlint_version", "0.0.1"), ("key", "other")])
def test_an_entry_of_another_format_version_or_key_is_none(field, value):
    assert decode_entry(_document(lambda d: d.update({field: value})), "k") is None


def test_a_null_where_the_annotation_allows_it_is_kept():
    def nulls(document):
        _finding(document).update(help=None, fix=None, impact=None)
        document["report"]["cost"]["latency_ms"] = None

    report = decode_entry(_document(nulls), "k")
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


@pytest.mark.parametrize(
    "spoil",
    [
        lambda finding: finding.data.update(weights=np.ones(3)),  # an array: JSON cannot carry it exactly
        lambda finding: finding.data.update(ops={"Conv"}),  # a set: it would come back a list
        lambda finding: finding.data.update({"3": 1, 3: 2}),  # a key that is not a string
        lambda finding: object.__setattr__(finding.impact, "latency_ms_after", 1),  # would come back 1.0
    ],
)
def test_a_report_that_would_not_come_back_as_it_was_is_not_stored(tmp_path, spoil):
    report = dataclasses.replace(full_report(), errors=[])
    spoil(report.findings[0])
    assert not Cache(tmp_path).put("ef" * 32, report)
    assert not list(tmp_path.rglob("*.json"))


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
    assert decode_entry(encode_entry("k", report), "k") == report
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


def test_an_entry_of_the_previous_format_is_a_miss_and_is_rewritten(tmp_path, data_dir):
    """An entry of format 7 (dataclasses as lists of their fields, lists of them by columns) is not read as the
    current one, whatever format it claims: one found where a current entry belongs is a miss, and the next put
    replaces it."""
    cache = Cache(tmp_path / "cache")
    settings = _settings()
    key = cache_key(data_dir / MODEL, settings)
    report = lint_file(data_dir / MODEL, settings)
    assert report.findings and cache.put(key, report)
    entry = cache._entry(key)
    report_row = [report.path, report.format, report.target, None, None, [len(report.findings), ["FU004"]]]
    old = {"format": 7, "netlint_version": netlint.__version__, "key": key, "report": [report_row, []]}
    entry.write_text(json.dumps(old))
    assert cache.get(key, "m.onnx") is None
    entry.write_text(json.dumps(dict(old, format=netlint.cache.CACHE_FORMAT)))  # the layout alone is refused too
    assert cache.get(key, "m.onnx") is None
    assert cache.put(key, report)
    assert cache.get(key, "m.onnx") == dataclasses.replace(report, path="m.onnx")
