"""The compiler: IR, passes (expand, infer, cost), the primitive registry, lowering to
torch.fx, backends and weight import. Modules up to `cost` import no torch."""
