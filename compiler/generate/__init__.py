"""Generating tokens with a built decoder-only spec: `generate(model, input_ids, ...)`
(driver.py), Hugging Face's arguments and return value, with a key/value cache (cache.py) and
Hugging Face's sampling (sampling.py)."""

from .driver import CAN_GENERATE, Decoder, decoder_of, generate

__all__ = ["CAN_GENERATE", "Decoder", "decoder_of", "generate"]
