"""cancel-transposes and merge-reshapes on TFLite: exact (LiteRT outputs identical), guarded by other readers."""

from __future__ import annotations

from itertools import count

import numpy as np
from tflite_helpers import assert_equivalent, fix, ops, rechecked

from netlint.testing.tflite_builder import TfliteBuilder

_ids = count()


def transpose(b: TfliteBuilder, x: int, perm: list[int], shape: list[int]) -> int:
    n = next(_ids)
    out = b.tensor(f"t{n}", shape)
    b.op("TRANSPOSE", [x, b.const(f"perm{n}", np.array(perm, np.int32))], [out])
    return out


def reshape(b: TfliteBuilder, x: int, shape: list[int]) -> int:
    n = next(_ids)
    out = b.tensor(f"r{n}", shape)
    b.op("RESHAPE", [x, b.const(f"s{n}", np.array(shape, np.int32))], [out], {"new_shape": shape})
    return out


def test_cancelling_and_identity_transposes_are_removed():
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 6, 2])
    t = transpose(b, transpose(b, x, [0, 2, 3, 1], [1, 6, 2, 4]), [0, 3, 1, 2], [1, 4, 6, 2])
    t = transpose(b, t, [0, 1, 2, 3], [1, 4, 6, 2])
    b.output(b.relu(t))
    data = b.build()
    result = fix(data, select=["DM002"])
    assert ops(result.fixed) == {"RELU": 1}
    assert_equivalent(data, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "DM002") == []


def test_consecutive_transposes_merge_into_one():
    b = TfliteBuilder()
    x = b.input("x", [2, 3, 4])
    b.output(transpose(b, transpose(b, x, [1, 0, 2], [3, 2, 4]), [0, 2, 1], [3, 4, 2]))
    data = b.build()
    result = fix(data, select=["DM002"])
    assert ops(result.fixed) == {"TRANSPOSE": 1}
    assert_equivalent(data, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "DM002") == []


def test_a_transpose_with_another_reader_stays():
    b = TfliteBuilder()
    x = b.input("x", [2, 3, 4])
    first = transpose(b, x, [1, 0, 2], [3, 2, 4])
    b.output(transpose(b, first, [0, 2, 1], [3, 4, 2]))
    b.output(b.relu(first))
    data = b.build()
    result = fix(data, select=["DM002"])
    assert ops(result.fixed)["TRANSPOSE"] == 2
    assert_equivalent(data, result.fixed)


def test_reshape_chain_merges_and_a_noop_chain_disappears():
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 6, 2])
    y = reshape(b, reshape(b, reshape(b, x, [4, 12]), [2, 24]), [48])
    z = reshape(b, reshape(b, b.relu(y), [6, 8]), [48])  # back to its input shape: does nothing
    b.output(b.logistic(z))
    data = b.build()
    result = fix(data, select=["DM003"])
    assert ops(result.fixed) == {"RESHAPE": 1, "RELU": 1, "LOGISTIC": 1}
    assert_equivalent(data, result.fixed, rtol=0, atol=0)
    assert rechecked(result.fixed, "DM003") == []


def test_reshape_chain_with_a_shared_middle_stays():
    b = TfliteBuilder()
    x = b.input("x", [1, 4, 6, 2])
    middle = reshape(b, x, [4, 12])
    b.output(reshape(b, middle, [2, 24]))
    b.output(b.relu(middle))
    data = b.build()
    result = fix(data, select=["DM003"])
    assert ops(result.fixed)["RESHAPE"] == 2
