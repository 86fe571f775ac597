"""The torch side of the primitives: one file per primitive holding its nn.Module(s) and its
lowering. Importing this package registers every lowering."""

from . import attention, embed, head, merge, mlp, norm, patchify  # noqa: F401  (registration)
from .common import LOWERINGS

__all__ = ["LOWERINGS"]
