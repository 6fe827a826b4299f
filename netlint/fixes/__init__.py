"""`netlint fix`: rewrite a model (ONNX or TFLite) so that findings with a fix are gone, exactly (safe) or on
request (unsafe).

Modules: `registry` (the pass interface, the registry by the fix names rules declare, and the precheck that makes
each finding advertise what its fix will do), `engine` (the lint → fix → re-lint loop on the IR, written once),
`verify` and `litert` (onnxruntime / LiteRT comparison, optional), `output` (atomic writing that keeps external data
external), `command` (the CLI command), and one module per pass, named like it (fold_batchnorm, duplicate_conv, ...),
each written once against the IR for both formats (`_common` holds what several share).
"""
