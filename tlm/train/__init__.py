"""Training (paper §2.3): configs -> mesh and sharded state -> the jit train loop -> checkpoints.

`partitioning` (mesh, logical-axis rules, batch assembly), `optim` (T5's Adafactor), `state`
(train state, shapes, shardings), `data` (config -> packed batches), `loop` (loss, step, loop,
Yearly runs), `checkpointing` (orbax, init from public checkpoints), `dry_run` (cost of a step).
"""
