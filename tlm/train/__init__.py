"""Training (paper §2.3): configs -> mesh and sharded state -> the jit train loop -> checkpoints.

`partitioning` (mesh, logical-axis rules, batch assembly), `optim` (T5's Adafactor), `state`
(train state, shapes, shardings), `data` (config -> packed batches), `step` (loss, the jit step),
`loop` (the `Trainer`, Yearly runs; it calls the `evaluators` its caller builds, so train
imports nothing above it) with `records` (metrics.jsonl), `preemption` (SIGTERM) and
`data_state` (the data stream a checkpoint was trained on), `checkpointing` (orbax, init from
public checkpoints), `dry_run` (cost of a step), `preflight` (the workdir's layout and a memory
floor, checked before the data is built and the step compiled).
"""
