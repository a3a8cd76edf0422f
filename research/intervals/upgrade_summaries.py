"""Adds the t-intervals, the seeds-only labelling and M2's reframing to committed summaries.

  python -m research.intervals.upgrade_summaries docs/results \
      docs/results/preregistered/reproduce_seed0 ...

The per-query files of the committed runs (`per_query.json`) are not in the repository, so
`--mode=combine_seeds` cannot re-derive them; every added field is a function of numbers the
committed summary.json already holds (`tlm.miniature.claim_summary.upgrade` says which), so
each DIR's summary.json is rewritten with them and its claims.md regenerated from it. Nothing
else changes: the existing fields are kept as they are, bit for bit.
"""

import json
import os
import sys

from tlm.files import atomic_output_file, write_json
from tlm.miniature import claim_summary


def main(dirs: list[str]) -> None:
  for d in dirs:
    path = os.path.join(d, "summary.json")
    with open(path) as f:
      summary = claim_summary.upgrade(json.load(f))
    write_json(path, summary)
    with atomic_output_file(os.path.join(d, "claims.md")) as f:
      f.write(claim_summary.claims_table(summary))
    print(f"upgraded {path} and its claims.md")


if __name__ == "__main__":
  main(sys.argv[1:])
