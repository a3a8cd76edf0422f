"""T5 in Flax (Linen): layers, the encoder-decoder, decoding/scoring, and checkpoint I/O.

- `layers`: embedding, RMS norm, MLP, and the namespace t5.py uses for every layer, re-exporting
  `dense` (`DenseGeneral` and its CPU-only custom-VJP matmul), `relative_position`,
  `attention` (multi-head attention with a KV cache) and `masks`.
- `t5`: `T5Config`, size presets, `Transformer`.
- `decoding`: greedy and beam search with a KV cache, `score`, `rank_candidates`.
- `param_map`: the HF / Mesh-TF <-> tlm name maps (`PARAM_MAP`, `FORMATS`, `HOOKS`);
  `param_convert`: their strict application to parameter trees (`params_from_hf`, ...).
- `checkpoints`: checkpoint directories: `load_checkpoint` (layout detection), `save_hf`,
  `save_tlm`; re-exports `param_convert`'s functions.
- `formats/`: the file formats those read and write (`hf_config`: HF `config.json`).
"""
