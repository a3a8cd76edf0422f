"""Claim C5 (Temporal's gain on the future years 2019-20), pre-registered in research/c5/:
explanation (a), the year tokens' embeddings (`year_embeddings`), and explanations (b) and (c),
Uniform and Temporal retrained with one thing changed (`explanations`)."""
