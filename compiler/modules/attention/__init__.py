"""attention (torch): one file per kind. The sequence kinds (global, causal, sliding, alibi,
cross, class) are sequence.py's projections around kernel.py's attention kernel, which holds no
parameter: a kind's file gives its mask rule (causal.py's CausalMask, ...) and its lowering. The
kernel computes through F.scaled_dot_product_attention (masks and biases as one additive
attn_mask; the plain causal mask as SDPA's is_causal), flex_attention under torch.compile, or with
the products and the softmax written out where a score part changes the scores or the aoti
target's CPU export asks for it (form.py). The window, pooled, spatial-reduction, latent and
outlook kinds have modules of their own. Buffers that depend only on shapes are built once, at
lowering."""
