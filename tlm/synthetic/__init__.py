"""The embedded synthetic temporal world: a deterministic stand-in for CustomNews + Wikidata.

The paper trains on dated news (CustomNews, not public) and probes with time-scoped Wikidata facts
(TempLAMA, built from a Wikidata dump). This world gives the pipeline the same shapes to run on
without downloads: entities whose facts change over time at realistic rates, dated news that
states them, a KB in Wikidata's TSV form, future-relations query sets and two pre-training
corpora, all a pure function of (seed, scale). docs/reproduction.md, "The synthetic world".

The modules: `settings.py` (the numbers and their reasons), `records.py` (entities, facts,
random streams), `names.py`, `facts.py` (the change processes), `templates.py` and `news.py`
(the news), `forward.py` (forward-looking sentences, off by default), `pretrain.py` (the
pre-training corpora), `world.py` (the files, `build_world`).
"""

from tlm.synthetic.forward import ForwardSettings
from tlm.synthetic.settings import (
  FORWARD_SHARE,
  NEWS,
  QUERIES_PER_SET,
  VOCAB_PIECES,
  WORLD,
)
from tlm.synthetic.world import (
  TEMPLAMA_RELATIONS,
  WORLD_FILES,
  build_world,
  format_date,
  format_fact,
  future_queries,
  generate,
  pretraining_texts,
  templama_pairs,
  vocab_pieces,
)

__all__ = [
  "FORWARD_SHARE",
  "ForwardSettings",
  "NEWS",
  "QUERIES_PER_SET",
  "TEMPLAMA_RELATIONS",
  "VOCAB_PIECES",
  "WORLD",
  "WORLD_FILES",
  "build_world",
  "format_date",
  "format_fact",
  "future_queries",
  "generate",
  "pretraining_texts",
  "templama_pairs",
  "vocab_pieces",
]
