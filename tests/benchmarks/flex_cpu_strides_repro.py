"""A plain-torch reproducer of a silent error in inductor's CPU flex_attention (torch 2.14.1,
found through the PaliGemma trial): q and k rotated inside the compiled function (a pointwise
op over a transposed view) give other outputs than eager; made contiguous first, they agree.
archspec's kernel (compiler/modules/attention/kernel.py, `flexed`) hands flex_attention
contiguous tensors for this reason. Run: python tests/benchmarks/flex_cpu_strides_repro.py
Measured on the Intel Xeon (family 6, model 207) of stop 55: 1.3 off without, 3.0e-07 with."""

import torch
from torch.nn.attention.flex_attention import flex_attention

torch.manual_seed(0)
B, h, N, d = 2, 4, 20, 16
x, W = torch.randn(B, N, h * d), torch.randn(h * d, 3 * h * d) * 0.1
angles = torch.arange(N).float()[:, None] / 10000 ** (torch.arange(0, d, 2).float() / d)
angles = torch.cat((angles, angles), -1)  # [N, d]
cos, sin = angles.cos(), angles.sin()


def rotated(t):
    a, b = t.chunk(2, -1)
    return t * cos + torch.cat((-b, a), -1) * sin


def qkv(x):
    q, k, v = (x @ W).reshape(B, N, 3, h, d).permute(2, 0, 3, 1, 4)  # each [B, h, N, d], a view
    return rotated(q), rotated(k), v


def attention(x, contiguous):
    q, k, v = qkv(x)
    if contiguous:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    return flex_attention(q, k, v)


q, k, v = qkv(x)
eager = ((q @ k.transpose(-1, -2)) * d ** -0.5).softmax(-1) @ v
for contiguous in (False, True):
    torch._dynamo.reset()
    out = torch.compile(attention)(x, contiguous)
    print(f"contiguous={contiguous}: max |compiled - eager| = {(out - eager).abs().max().item():.3g}")
