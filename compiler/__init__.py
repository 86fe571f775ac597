"""archspec.compiler: what turns a checked spec into something that runs (installed as the
subpackage `archspec.compiler`; the folder is compiler/ at the top of the repository).

Floor 4, torch: modules/ (the torch side of each primitive and kind: its nn.Module and its
lowering, registered against the primitive's op object), lower.py (IR -> torch.fx), and
weights/ (reference namings and mapping files). Floor 5: backends/ (torch.export, ONNX,
TensorRT, the standalone model.py)."""
