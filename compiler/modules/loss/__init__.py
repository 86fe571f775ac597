"""loss (torch): one file per kind; computed by model.loss(...), never by forward."""
