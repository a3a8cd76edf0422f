"""tlm: time-aware T5 language models as temporal knowledge bases (Dhingra et al., 2022)."""
