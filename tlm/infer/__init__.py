"""Inference: a trained model queried as the paper queries it, below the evaluations.

`predictor` (text in, text and log-likelihoods out, batched for jit on the mesh),
`conditioned` (the time conditioning of each variant, the Yearly experts' routing),
`trained_models` (where a trained model lives and how it is loaded) and `dry_run` (the
Predictor's programs sized on the configured mesh, nothing allocated). It imports models,
data, sharding and configs; never train or eval.
"""
