"""Generating tokens with a built decoder-only spec: `generate(model, input_ids, ...)`
(search.py; driver.py), Hugging Face's arguments and return value, with a key/value cache (cache.py)
handed to the model's decode graph as an argument (decode_graph.py),
Hugging Face's sampling (sampling.py), logits processors and stopping criteria (processors.py),
beam search (beam.py) and text through a tokenizer (tokenizer.py); every argument and the memory the call holds checked
before anything is allocated (arguments.py)."""

from .arguments import guarded
from .driver import CAN_GENERATE, Decoder, decoder_of
from .search import GenerateOutput
from .search import generate as _unchecked

generate = guarded(_unchecked)  # its arguments and memory checked first (arguments.py)

__all__ = ["CAN_GENERATE", "Decoder", "GenerateOutput", "decoder_of", "generate"]
