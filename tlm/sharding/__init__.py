"""Sharding: the device mesh, the logical-axis rules, placement, and what a program costs.

Below both training (`tlm.train`) and inference (`tlm.infer`), which place parameters and
batches the same way: `partitioning` (mesh, `AXIS_RULES`, `place_params`, batch assembly,
bytes per device) and `cost` (XLA's FLOPs and memory of a compiled program).
"""
