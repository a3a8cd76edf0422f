"""T5 in Flax (Linen): layers, the encoder-decoder, decoding/scoring, and checkpoint I/O.

- `layers`: primitives (dense, embedding, RMS norm, relative position biases, attention, MLP).
- `t5`: `T5Config`, size presets, `Transformer`.
- `decoding`: greedy and beam search with a KV cache, `score`, `rank_candidates`.
- `checkpoints`: HF / Mesh-TF / tlm checkpoint name maps, `load_checkpoint`, `save_hf`,
  `save_tlm`.
- `formats/`: the file formats those read and write (`hf_config`: HF `config.json`).
"""
