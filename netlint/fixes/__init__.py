"""`netlint fix`: rewrite an ONNX model so that findings with a fix are gone, exactly (safe) or on request (unsafe).

Modules: `registry` (passes by the fix name rules declare), `edit` (the transactional edit of the ModelProto),
`engine` (the lint → fix → re-lint loop), `verify` (onnxruntime comparison, optional), `output` (atomic writing
that keeps external data external), and one module per pass: fold_batchnorm, remove_dead_code, prelu_to_relu.
"""
