"""The torch side of the primitives: one file per primitive or kind, holding its nn.Module(s)
and its lowering rule, registered against the primitive's op object (lowering_rules.py). Every
module here is imported by discovery."""
