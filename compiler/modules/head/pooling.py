"""Pooling tokens to one vector (the classify and features heads)."""

from __future__ import annotations


def pool_tokens(x, pool: str, prefix: int):
    if pool == "cls":
        return x[:, 0]  # [B, N, C] -> [B, C]
    return x[:, prefix:].mean(dim=1)  # mean of the grid tokens -> [B, C]
