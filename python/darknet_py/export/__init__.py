"""Exporting a network. ONNX (opset 13): the entry point (onnx_model), the graph builder (onnx_graph), one
exporter per Darknet layer type (onnx_layers), the activations, and the optional box decoding and NMS
appended at the end (onnx_postprocess). Core ML (an object detector, .mlpackage): the entry point
(coreml_model), the layers as MIL operations (coreml_layers), and the decode and NMS around them
(coreml_pipeline). What both compute the same way (layer descriptions, batchnorm folding, padding
arithmetic, decode constants) is in layer_common."""
