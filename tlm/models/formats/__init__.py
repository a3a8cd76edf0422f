"""Checkpoint file formats, each read (and where needed written) as a flat {name: np.ndarray}.

- `safetensors`: HF `model.safetensors` (read and write; numpy + ml_dtypes).
- `torch_pickle`: HF `pytorch_model.bin`, zip and legacy `torch.save` formats, without torch.
- `flax_msgpack`: HF `flax_model.msgpack`, names joined with ".".
- `tensorbundle`: TensorFlow / Mesh-TF checkpoints (`.index` + `.data-*`), without TensorFlow.
- `orbax_params`: tlm's own params pytree (orbax), restored to numpy or onto shardings.
- `crc32c`: TensorFlow's CRC32C, for the TensorBundle checksums.
- `sstable`, `protowire`: the TensorBundle index's container (LevelDB's table format) and
  the protobuf wire format of its entries.
- `guards`: what the readers share against hostile files (bounded JSON, confined file names,
  file strings quoted for one-line messages).

The readers of foreign formats (all but tlm's own orbax params) treat their files as hostile:
what they allocate is bounded by the bytes the file holds, and any problem is one
`CheckpointError` naming the file. These modules know file layouts only; which names map to
which parameters, and how kernels are transposed, is decided by tlm/models/param_map.py.
"""
