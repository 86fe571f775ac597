"""Backends: what a lowered model becomes (torch.export program, ONNX, TensorRT engine,
standalone source) and the `archspec build` command that writes them."""
