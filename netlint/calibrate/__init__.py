"""Calibration (`netlint calibrate`): micro-benchmarks on the user's own machine and runtime, fitted into a target
file's [cost] numbers and an observed [fusion] table. See docs/cost-model.md.

Modules: fit (pure fitting and the fusion test), bench (micro-models, runners, interleaved timing), suite (what is
measured), command (the CLI and the target file). Nothing is imported here, so `netlint --help` stays cheap; the
runtimes (onnxruntime, ai_edge_litert) are imported when a run starts.
"""
