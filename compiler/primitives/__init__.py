"""The primitives. Importing this package registers each of them (one file per primitive)."""

from . import attention, embed, head, merge, mlp, norm, patchify  # noqa: F401  (registration)
