"""`netlint fix` for TFLite: an edit over the flatbuffer's object tree (netlint.io.tflite_writer), the fix loop,
LiteRT verification, and one module per pass (registered under the fix name the rules declare)."""
