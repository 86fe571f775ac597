"""loss: training objectives, one file per kind. Loss nodes live under a spec's `objectives`;
they read the graph's nodes and the training targets, and the built model computes them in
model.loss(...), never in forward."""
