"""The torch side of the score parts (archspec/primitives/ops/attention/scores/): one module per
part, in one file each, registered against the part's object."""
