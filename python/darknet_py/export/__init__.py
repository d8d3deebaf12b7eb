"""Exporting a network to ONNX (opset 13): the entry point (onnx_model), the graph builder
(onnx_graph), one exporter per Darknet layer type (onnx_layers), the activations, and the optional
box decoding and NMS appended at the end (onnx_postprocess)."""
