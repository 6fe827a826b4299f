"""Turning micro-benchmark timings into the cost model's numbers (pure functions: no runtime, no clock).

Every family of micro-models varies one amount of work (MACs, elements, bytes, kernels) and keeps everything else
fixed, so the time is `intercept + work / rate`: a least-squares line through (work, time), weighted to minimise
relative errors, gives the rate as the inverse slope, and the intercept absorbs what does not scale (the runtime's
per-call cost, one kernel launch). Slopes are what the cost model needs; intercepts are reported, not used.

Activations: each activation op alone on the same tensor as a Relu, interleaved. Its time relative to Relu's is the
median over rounds of (T_op - c) / (T_Relu - c), c the runtime's per-call cost (a ratio of two times of the same
round: a shared machine's load mostly cancels); its ops per element, the number the cost model charges at the
vector rate, is that ratio times Relu's own: (T_Relu - c) x vector rate / elements.

Layout reorders (ORT CPU's com.microsoft.nchwc ReorderInput / ReorderOutput, netlint.cost.layout): chains of
ReorderInput -> ReorderOutput round trips of two depths on the same tensor, timed in the same round; the difference
per reorder is the time of one copy with its launch (the per-call cost and the graph output's copy cancel). A copy
runs ~3x faster while the tensor fits the cache than from DRAM, so `fit_reorder` fits one rate, or two with the
tensor size between them, whichever the samples support.

Fusion (nn-Meter's fusion tester, Zhang et al., MobiSys 2021, arXiv:2105.13914 / github.com/microsoft/nn-Meter):
two ops run as one kernel iff T1 + T2 - T12 > 0.5 * min(T1, T2), T1 and T2 the ops alone, T12 the pair.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from netlint.cost.latency import gemm_blocked

FUSION_THRESHOLD = 0.5
CONSISTENCY_SLACK = 1.5
BALANCE = 0.2

# Families of micro-benchmarks and what their `work` counts.
CONV = "conv"  # dense Conv MACs
DEPTHWISE = "depthwise"  # depthwise Conv MACs
MEMORY = "memory"  # bytes read + written by a memory-bound Add
ELTWISE = "eltwise"  # elementwise ops (one per output element), with the bytes they move
OVERHEAD = "overhead"  # kernels in a chain of tiny ops
ACTIVATION = "activation"  # one activation alone on one tensor shape, timed against Relu on the same shape
REORDER = "reorder"  # bytes one NCHW <-> NCHWc reorder reads + writes (`bytes`: the tensor's size), time per reorder
WEIGHTS = "weights"  # weight bytes of a 1x1 conv on one pixel (a fully connected layer): a kernel bound by its weights
CACHE_STEP = 1.5  # two reorder rates only when the cache-resident one is at least this many times the larger ones'
SPLIT_GAIN = 2.0  # ... and the split divides the fit's squared log error at least by this


@dataclass(frozen=True)
class Sample:
    """One micro-model's median time. `work` is what the family varies; `ops` and `bytes` are what the cost model
    counts for it (used by the elementwise fit, which must respect the memory roofline)."""

    family: str
    name: str
    work: float
    time_us: float
    ops: float = 0.0
    bytes: float = 0.0
    # a dense conv's (input channels, output channels, kernel taps): its MACs and outputs padded to a GEMM's blocks
    dense: tuple[int, int, int] | None = None


@dataclass(frozen=True)
class Line:
    """time_us = intercept_us + work * slope_us (slope: microseconds per unit of work)."""

    slope_us: float
    intercept_us: float
    points: int

    @property
    def rate_per_us(self) -> float:
        return 1.0 / self.slope_us


def fused(t1: float, t2: float, t12: float, threshold: float = FUSION_THRESHOLD) -> bool:
    """nn-Meter's rule: the pair runs as one kernel iff running it together saves more than `threshold` of the
    shorter op's time (T1 + T2 - T12 > threshold * min(T1, T2)). Times must already exclude per-call overhead."""
    return t1 + t2 - t12 > threshold * min(t1, t2)


def consistent(t1: float, t2: float, t12: float, slack: float = CONSISTENCY_SLACK, balance: float = BALANCE) -> bool:
    """netlint's guards on the fusion test. Fusing can at most hide the cheaper op, so a pair that saves more than
    `slack` times min(T1, T2) is not explained by fusion; and when one op is over 1/`balance` times slower than the
    other, a few percent of its run-to-run (or data-dependent) variation exceed half the cheaper op, the threshold
    (PRelu on ONNX Runtime: ~10x a 1x1 conv, and slower alone than after a conv). Either way the verdict is
    inconclusive and no fusion is recorded."""
    shorter, longer = min(t1, t2), max(t1, t2)
    return t1 + t2 - t12 <= slack * shorter and shorter >= balance * longer


def verdict(t1: float, t2: float, t12: float) -> str:
    """'fused', 'not fused' or 'inconclusive' (see `consistent`)."""
    if not consistent(t1, t2, t12):
        return "inconclusive"
    return "fused" if fused(t1, t2, t12) else "not fused"


def fit_line(work: Sequence[float], times_us: Sequence[float]) -> Line:
    """Least-squares line through (work, time), minimising relative errors (sizes span 100x, and a cache-missing
    largest case would otherwise set the rate for all). A non-positive slope (noise swamped the work) falls back to the
    slope through the origin of the largest case, so a rate is always positive and finite."""
    x = np.asarray(work, dtype=float)
    y = np.asarray(times_us, dtype=float)
    if x.size == 0 or x.size != y.size:
        raise ValueError("fit_line needs as many times as work amounts, at least one")
    if x.size >= 2 and np.ptp(x) > 0:
        weight = 1.0 / np.maximum(y, 1e-9)  # relative errors: the largest case must not set the rate alone
        design = np.column_stack([x, np.ones_like(x)]) * weight[:, None]
        (slope, intercept), *_ = np.linalg.lstsq(design, y * weight, rcond=None)
        if slope > 0:
            return Line(float(slope), float(intercept), int(x.size))
    biggest = int(np.argmax(x))
    return Line(float(max(y[biggest], 1e-9) / max(x[biggest], 1e-9)), 0.0, int(x.size))


def fit_vector_rate(samples: Iterable[Sample], memory_gb_per_s: float, intercept_us: float) -> float:
    """The elementwise op rate (1e9 ops/s) that best explains the elementwise samples under the cost model's
    roofline, time = intercept + max(ops / rate, bytes / bandwidth): a 1-D search minimising squared log error
    (a rate above every sample's memory bound changes nothing, so the smallest such rate wins ties)."""
    rows = [s for s in samples if s.ops > 0]
    if not rows:
        raise ValueError("no elementwise samples")
    ops = np.array([s.ops for s in rows])
    traffic_us = np.array([s.bytes for s in rows]) / (memory_gb_per_s * 1e3)
    measured = np.maximum(np.array([s.time_us for s in rows]) - intercept_us, 1e-3)
    best_rate, best_error = 0.0, np.inf
    for rate in np.geomspace(0.01, 1000.0, 2001):  # 1e9 ops/s, 0.5% steps
        predicted = np.maximum(ops / (rate * 1e3), traffic_us)
        error = float(np.sum(np.log(predicted / measured) ** 2))
        if error < best_error - 1e-12:
            best_rate, best_error = float(rate), error
    return best_rate


@dataclass(frozen=True)
class Fitted:
    """The cost model's numbers (units in the names) plus the fitted intercepts, for the report."""

    conv_gmacs_per_s: float
    depthwise_gmacs_per_s: float
    vector_gops_per_s: float
    memory_gb_per_s: float
    kernel_overhead_us: float
    call_overhead_us: float  # the per-run intercept of the kernel chain: the runtime's own cost per call
    reorder: Reorder | None = None  # NCHW <-> NCHWc copy rates (onnxruntime only)
    mac_output_gelements_per_s: float | None = None  # a MAC kernel's per-output-element cost (fit_mac_kernels)
    mac_block_channels: int | None = None  # output channels a dense conv computes at once (fit_mac_kernels)
    mac_block_depth: int | None = None  # input channels per kernel tap it reads at once
    weight_gb_per_s: float | None = None  # weight bytes a kernel streams per second (1e9), when WEIGHTS were timed

    def numbers(self) -> dict[str, float]:
        numbers = {
            "conv_gmacs_per_s": self.conv_gmacs_per_s,
            "depthwise_gmacs_per_s": self.depthwise_gmacs_per_s,
            "vector_gops_per_s": self.vector_gops_per_s,
            "memory_gb_per_s": self.memory_gb_per_s,
            "kernel_overhead_us": self.kernel_overhead_us,
        }
        if self.mac_output_gelements_per_s is not None:
            numbers["mac_output_gelements_per_s"] = self.mac_output_gelements_per_s
        for key in ("mac_block_channels", "mac_block_depth"):
            if getattr(self, key) not in (None, 1):
                numbers[key] = getattr(self, key)
        if self.weight_gb_per_s is not None:
            numbers["weight_gb_per_s"] = self.weight_gb_per_s
        if self.reorder is not None:
            numbers.update(self.reorder.numbers())
        return numbers


@dataclass(frozen=True)
class Reorder:
    """Copy rate of one NCHW <-> NCHWc reorder (bytes read + written per second, 1e9) for tensors up to
    `cache_mb` (MB, 1e6 bytes), and `dram_gb_per_s` for larger ones; one rate for all sizes when `cache_mb` is None."""

    gb_per_s: float
    dram_gb_per_s: float | None = None
    cache_mb: float | None = None

    def numbers(self) -> dict[str, float]:
        numbers = {"reorder_gb_per_s": self.gb_per_s}
        if self.cache_mb is not None and self.dram_gb_per_s is not None:
            numbers |= {"reorder_dram_gb_per_s": self.dram_gb_per_s, "reorder_cache_mb": self.cache_mb}
        return numbers


def fit_reorder(samples: Iterable[Sample], kernel_overhead_us: float) -> Reorder:
    """Reorder rates from per-reorder times (launch included): each sample's rate is its bytes over its time less
    the kernel overhead; one rate is the median of them. Sorted by tensor size, every split with two samples or more
    on each side is tried (each side its median rate); the best split is kept when the small tensors' rate is at
    least CACHE_STEP times the large ones' and it divides the squared log error of the one-rate fit by SPLIT_GAIN
    (a cache step, not noise), its threshold the geometric mean of the two sizes around it."""
    rows = sorted((s for s in samples if s.work > 0), key=lambda s: s.bytes or s.work)
    if not rows:
        raise ValueError("no reorder samples")
    rates = np.array([s.work / max(s.time_us - kernel_overhead_us, 1e-3) / 1e3 for s in rows])  # 1e9 bytes/s

    def error(predicted: np.ndarray) -> float:
        return float(np.sum(np.log(predicted / rates) ** 2))

    single = float(np.median(rates))
    best = Reorder(single)
    best_error = single_error = error(np.full_like(rates, single))
    for split in range(2, len(rows) - 1):
        small, large = float(np.median(rates[:split])), float(np.median(rates[split:]))
        split_error = error(np.concatenate([np.full(split, small), np.full(len(rows) - split, large)]))
        below, above = (rows[split - 1].bytes or rows[split - 1].work), (rows[split].bytes or rows[split].work)
        if small < CACHE_STEP * large or below == above or split_error * SPLIT_GAIN > single_error:
            continue
        if split_error < best_error:
            best, best_error = Reorder(small, large, round(float(np.sqrt(below * above)) / 1e6, 3)), split_error
    return best


def fit_cost(samples: Sequence[Sample]) -> Fitted:
    """Fit every number from the samples of each family (see the module docstring); raises ValueError when a family
    is missing."""

    def family(name: str) -> list[Sample]:
        rows = [s for s in samples if s.family == name]
        if not rows:
            raise ValueError(f"no {name} samples")
        return rows

    def line(name: str) -> Line:
        rows = family(name)
        return fit_line([s.work for s in rows], [s.time_us for s in rows])

    overhead = line(OVERHEAD)
    memory = line(MEMORY)
    kernel_overhead_us = max(overhead.slope_us, 0.0)
    reorders = [s for s in samples if s.family == REORDER]
    weights = [s for s in samples if s.family == WEIGHTS]
    memory_gb_per_s = memory.rate_per_us / 1e3  # bytes per microsecond -> 1e9 bytes per second
    return Fitted(
        conv_gmacs_per_s=line(CONV).rate_per_us / 1e3,
        depthwise_gmacs_per_s=line(DEPTHWISE).rate_per_us / 1e3,
        vector_gops_per_s=fit_vector_rate(family(ELTWISE), memory_gb_per_s, memory.intercept_us),
        memory_gb_per_s=memory_gb_per_s,
        kernel_overhead_us=kernel_overhead_us,
        call_overhead_us=max(overhead.intercept_us, 0.0),
        reorder=fit_reorder(reorders, kernel_overhead_us) if reorders else None,
        weight_gb_per_s=fit_line([s.work for s in weights], [s.time_us for s in weights]).rate_per_us / 1e3
        if weights
        else None,
    )


BLOCKS = (1, 4, 8, 16, 32, 64)  # the GEMM blocks tried (XNNPACK's int8 kernels: 16 channels, or 64 with AMX)
BLOCK_GAIN = 2.0  # blocks other than 1 are kept only when they divide the fit's squared relative error by this


@dataclass(frozen=True)
class MacFit:
    """The rates of convs priced per MAC and per output element, their channels padded to the GEMM's blocks:
    time = conv MACs / conv rate + depthwise MACs / depthwise rate + outputs / output rate (1e9 per second)."""

    conv_gmacs_per_s: float
    depthwise_gmacs_per_s: float
    mac_output_gelements_per_s: float
    block_channels: int = 1
    block_depth: int = 1
    error: float = 0.0  # the fit's squared relative error, summed over the samples


def fit_mac_kernels(
    samples: Sequence[Sample], call_overhead_us: float, blocks: Sequence[int] = BLOCKS
) -> MacFit | None:
    """Conv and depthwise MAC rates and a per-output-element rate, fitted together by least squares on relative
    error over the CONV and DEPTHWISE samples (`work` MACs, `ops` output elements), less the runtime's per-call cost.
    The per-output term is the loop around the MACs: TFLite's reference kernels (LiteRT's int16x8) requantize, check
    bounds and add an int64 bias per output; XNNPACK's int8 GEMM accumulates, requantizes and clamps whole output tiles
    (16 channels, 64 on a CPU with AMX: a conv of 8 output channels costs as one of 64). Each pair of `blocks` (output
    channels, input channels per tap) pads the dense convs' (`dense`) MACs and outputs; the best fit is kept, blocks
    other than 1 only when they divide the error by BLOCK_GAIN. None when the MACs per output element do not vary, no
    depthwise sample is given or no fit has positive coefficients (the per-family lines stand)."""
    rows = [s for s in samples if s.family in (CONV, DEPTHWISE) and s.ops > 0]
    if len({round(s.work / s.ops, 3) for s in rows}) < 3 or not any(s.family == DEPTHWISE for s in rows):
        return None
    times = np.array([max(s.time_us - call_overhead_us, 1e-3) for s in rows])
    fits = [_mac_fit(rows, times, out, depth) for out in blocks for depth in blocks]
    plain = next((f for f in fits if f is not None and f.block_channels == f.block_depth == 1), None)
    padded = min((f for f in fits if f is not None and f is not plain), key=lambda f: f.error, default=None)
    if padded is not None and (plain is None or padded.error * BLOCK_GAIN < plain.error):
        return padded
    return plain


def _mac_fit(rows: list[Sample], times: np.ndarray, block_channels: int, block_depth: int) -> MacFit | None:
    design = []
    for s in rows:
        macs, outputs = s.work, s.ops
        if s.family == CONV and s.dense is not None:
            macs, outputs = gemm_blocked(*s.dense, s.ops, block_channels, block_depth)
        design.append([macs if s.family == CONV else 0.0, macs if s.family == DEPTHWISE else 0.0, outputs])
    scaled = np.array(design) / times[:, None]
    (conv, depthwise, output), *_ = np.linalg.lstsq(scaled, np.ones_like(times), rcond=None)
    if min(conv, depthwise, output) <= 0:
        return None
    error = float(np.sum((scaled @ np.array([conv, depthwise, output]) - 1.0) ** 2))
    # us per unit -> 1e9 per second
    rates = [float(1 / coefficient / 1e3) for coefficient in (conv, depthwise, output)]
    return MacFit(*rates, block_channels, block_depth, error)


def observed_fusions(pairs: dict[str, tuple[float, float, float]], baseline_us: float = 0.0) -> list[str]:
    """Activation kinds whose (T_conv, T_act, T_pair) timings pass the fusion test and the consistency guard once
    `baseline_us` (the runtime's per-call cost, present in each of the three runs) is taken off each."""
    return sorted(kind for kind, times in pairs.items() if verdict(*(t - baseline_us for t in times)) == "fused")


def relu_equivalents(op_us: Sequence[float], relu_us: Sequence[float], call_overhead_us: float) -> float:
    """An activation's ops per element in Relu-equivalents: the median over rounds of (T_op - c) / (T_Relu - c), the
    two timed in the same round on the same tensor, c the runtime's per-call cost (so a ratio of two small times is
    not pulled towards 1). Rounded to 2 decimals, at least 0.01 (the table's numbers must be positive)."""
    if not op_us or len(op_us) != len(relu_us):
        raise ValueError("relu_equivalents needs as many activation as Relu times, at least one")
    ratios = [
        max(t - call_overhead_us, 1e-3) / max(r - call_overhead_us, 1e-3) for t, r in zip(op_us, relu_us, strict=True)
    ]
    return max(round(float(np.median(ratios)), 2), 0.01)


def relu_ops_per_element(relu_us: float, call_overhead_us: float, elements: int, vector_gops_per_s: float) -> float:
    """Relu's time per element expressed in vector ops: (T_Relu - c) x rate / elements. The cost model charges an
    activation's ops at `vector_gops_per_s`, so an activation's ops per element are its ratio to Relu times this."""
    return max(relu_us - call_overhead_us, 1e-3) * vector_gops_per_s * 1e3 / elements
