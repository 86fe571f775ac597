"""attention (torch): one file per kind, all computing through
F.scaled_dot_product_attention (masks and biases go in as one additive attn_mask; the causal
mask is SDPA's is_causal), or with the products and the softmax written out where a score part
changes the scores or the aoti target's CPU export asks for it (form.py). Buffers that depend
only on shapes are built once, at lowering."""
