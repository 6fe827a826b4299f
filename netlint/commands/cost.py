"""`netlint cost MODEL --target T`: the cost model's breakdown of one model on one target.

Text (default) or JSON: the predicted latency (and its range where ops are data dependent), MACs, bytes, the
coverage line, the numbers nobody sourced, the slowest kernels with the nodes fused into them, the cost per op type,
the share of the data movers (Transpose, Reshape, Concat, Split, Gather, ...: the MOVER and VIEW op classes), and the
CPU fallback partitions. A target without a [cost] section (generic) gets the counts and a line saying that latency
needs one. Exit codes: 0 printed, 2 an unreadable model or a bad target (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from netlint.cost import backends
from netlint.cost.model import ModelCost, NodeCost
from netlint.cost.ops import MOVER, VIEW
from netlint.errors import EXIT_CLEAN, ModelLoadError
from netlint.io import load_model
from netlint.targets import Target, load_target
from netlint.terminal import safe

DEFAULT_TOP = 10


def run_cost(args: argparse.Namespace) -> int:
    """The `cost` command; NetlintError (unreadable model, unknown target or precision) propagates to the CLI."""
    target = load_target(args.target, args.precision, args.chip)
    try:
        model = load_model(args.path)
    except ModelLoadError as exc:
        raise ModelLoadError(f"{args.path}: {exc}") from None
    cost = backends.cost(model.graph, target)
    summary = summarize(cost, target, str(args.path), args.top)
    if getattr(args, "measure", False):
        from netlint.calibrate.measure import measure, render_measured

        summary["measured"] = measure(model, target, str(args.path), runs=args.runs)
    text = json.dumps(summary, indent=2) if args.format == "json" else render_text(summary)
    if getattr(args, "measure", False) and args.format != "json":
        text += "\n\n" + render_measured(summary["measured"])
    print(text)
    return EXIT_CLEAN


def summarize(cost: ModelCost, target: Target, path: str, top: int = DEFAULT_TOP) -> dict[str, Any]:
    """Everything the command prints, as plain data (the JSON output)."""
    rates = cost.rates
    latency = cost.latency_us
    movers = [entry for entry in cost.nodes if entry.cost is not None and entry.cost.op_class in (MOVER, VIEW)]
    mover_bytes = sum(entry.cost.bytes for entry in movers if entry.cost is not None)
    mover_time = sum(entry.latency_us or 0.0 for entry in movers) if latency is not None else None
    by_op = sorted(cost.by_op_type.items(), key=lambda item: (-item[1].latency_us, -item[1].bytes, item[0]))
    fallback = [cost.node(node_id) for node_id in cost.fallback_nodes]
    fallback_time = sum(entry.latency_us or 0.0 for entry in fallback) if latency is not None else None
    return {
        "path": path,
        "target": target.name,
        "label": cost.target,
        "precision": target.precision,
        "chip": target.chip,
        "latency_us": latency,
        "latency_range_us": list(cost.latency_range_us) if cost.latency_range_us is not None else None,
        "macs": cost.macs,
        "ops": cost.ops,
        "bytes": cost.bytes,
        "param_bytes": cost.param_bytes,
        "nodes": len(cost.nodes),
        "kernels": cost.kernels,
        "coverage": cost.coverage,
        "coverage_line": cost.coverage_line(),
        "gaps": {entry.id: entry.gap for entry in cost.gaps},
        "rates_origin": rates.origin if rates is not None else cost.pricing.summary,
        "pricing": {
            "basis": cost.pricing.basis,
            "band": cost.pricing.model_band,
            "graph": cost.pricing.graph,
            "by": cost.pricing.summary,
        },
        "assumed": list(rates.assumed) if rates is not None else [],
        "notes": list(cost.notes),
        "top_kernels": [_kernel(members, latency) for members in cost.top_kernels(top)],
        "by_op_type": {
            op: {
                "count": row.count,
                "macs": row.macs,
                "ops": row.ops,
                "bytes": row.bytes,
                "gaps": row.gaps,
                "latency_us": row.latency_us if latency is not None else None,
                "share": row.latency_us / latency if latency else None,
            }
            for op, row in by_op
        },
        "data_movers": {
            "nodes": len(movers),
            "ops": dict(sorted(_count(entry.op for entry in movers).items(), key=lambda kv: (-kv[1], kv[0]))),
            "bytes": mover_bytes,
            "bytes_share": mover_bytes / cost.bytes if cost.bytes else None,
            "latency_us": mover_time,
            "latency_share": mover_time / latency if latency and mover_time is not None else None,
        },
        "fallback": {
            "partitions": cost.partitions,
            "nodes": cost.fallback_nodes,
            "ops": _count(entry.op for entry in fallback),
            "latency_us": fallback_time,
            "transfers": cost.transfers,
            "transfer_us": cost.transfer_us if latency is not None else None,
        },
    }


def _kernel(members: list[NodeCost], total: float | None) -> dict[str, Any]:
    head = members[0]
    return {
        "kernel": head.id,
        "op": head.op,
        "latency_us": head.latency_us,
        "latency_range_us": [head.latency_us_low, head.latency_us_high],
        "share": (head.latency_us or 0.0) / total if total else None,
        "fallback": head.fallback,
        "members": [
            {"node": m.id, "op": m.op, "how": m.fusion or ("extra pass" if m.extra_pass else None)} for m in members[1:]
        ],
    }


def _count(ops: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for op in ops:
        counts[op] = counts.get(op, 0) + 1
    return counts


# --- text ----------------------------------------------------------------------------------------------------------
def render_text(summary: dict[str, Any]) -> str:
    lines = [f"{safe(summary['path'])} on {summary['label']}"]
    latency = summary["latency_us"]
    if latency is None:
        lines.append(
            f"predicted latency: not available: target '{summary['target']}' has no [cost] section "
            "(latency needs a target with a [cost] section, e.g. --target ort-cpu; `netlint targets` lists them)"
        )
    else:
        low, high = summary["latency_range_us"]
        spread = f" (range {_time(low)} to {_time(high)}: data-dependent ops)" if high > low * 1.0001 else ""
        lines.append(f"predicted latency: {_time(latency)}{spread}, {summary['kernels']} kernels")
    lines.append(
        f"work: {_amount(summary['macs'])} MACs, {_amount(summary['ops'])} other ops, {_bytes(summary['bytes'])} moved "
        f"({_bytes(summary['param_bytes'])} parameters), {summary['nodes']} nodes"
    )
    lines.append(summary["coverage_line"])
    pricing = summary["pricing"]
    band = f"±{pricing['band'] * 100:.0f}%" if pricing["band"] is not None else "no measured error band"
    lines.append(f"graph: {pricing['graph']}; basis: {pricing['basis']} ({band})")
    if summary["rates_origin"]:
        assumed = ", ".join(summary["assumed"]) or "none"
        lines.append(f"numbers: {summary['rates_origin']}; assumed (not sourced): {assumed}")
    lines.extend(f"note: {note}" for note in summary["notes"])

    if summary["top_kernels"]:
        lines += ["", f"top {len(summary['top_kernels'])} kernels:"]
        for rank, kernel in enumerate(summary["top_kernels"], 1):
            members = ", ".join(f"{m['op']} '{safe(m['node'])}' [{m['how']}]" for m in kernel["members"])
            where = " [CPU fallback]" if kernel["fallback"] else ""
            lines.append(
                f"  {rank:>2}. {_time(kernel['latency_us']):>10} {kernel['share']:6.1%}  {kernel['op']} "
                f"'{safe(kernel['kernel'])}'{where}" + (f" + {members}" if members else "")
            )

    lines += ["", "per op type:"]
    header = f"  {'op':<24} {'count':>6} {'MACs':>10} {'bytes':>10}"
    lines.append(header + (f" {'latency':>10} {'share':>6}" if latency is not None else ""))
    free: list[str] = []
    for op, row in summary["by_op_type"].items():
        if not (row["macs"] or row["bytes"] or row["gaps"] or row["latency_us"]):
            free.append(f"{row['count']} {op}")
            continue
        line = f"  {op:<24} {row['count']:>6} {_amount(row['macs']):>10} {_bytes(row['bytes']):>10}"
        if latency is not None:
            line += f" {_time(row['latency_us']):>10} {row['share']:6.1%}"
        if row["gaps"]:
            line += f"  ({row['gaps']} not costed)"
        lines.append(line)

    if free:
        lines.append(f"  free (folded at load time, aliased or removed): {', '.join(free)}")

    movers = summary["data_movers"]
    if movers["nodes"]:
        listed = ", ".join(f"{count} {op}" for op, count in movers["ops"].items())
        share = f"{movers['bytes_share']:.1%} of the bytes" if movers["bytes_share"] is not None else "no bytes"
        time = f", {movers['latency_share']:.1%} of the predicted time" if movers["latency_share"] is not None else ""
        lines += ["", f"data movers: {share}{time} ({listed})"]
    else:
        lines += ["", "data movers: none"]

    fallback = summary["fallback"]
    if fallback["nodes"]:
        ops = ", ".join(f"{count} {op}" for op, count in fallback["ops"].items())
        time = ""
        if fallback["latency_us"] is not None:
            time = (
                f"; {_time(fallback['latency_us'])} on the CPU, {fallback['transfers']} transfers "
                f"{_time(fallback['transfer_us'])}"
            )
        lines.append(
            f"fallback: {len(fallback['nodes'])} nodes run on the CPU ({ops}), "
            f"{fallback['partitions']} accelerator partitions{time}"
        )
    elif fallback["partitions"]:
        lines.append(f"fallback: none: the target runs every node ({fallback['partitions']} partition)")
    else:
        lines.append("fallback: not modelled (the target states no supported ops)")
    return "\n".join(lines)


def _time(us: float | None) -> str:
    if us is None:
        return "-"
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} us"


def _amount(value: float) -> str:
    for scale, name in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.2f} {name}"
    return f"{value:.0f}"


def _bytes(value: float) -> str:
    for scale, name in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if value >= scale:
            return f"{value / scale:.1f} {name}"
    return f"{value:.0f} B"
