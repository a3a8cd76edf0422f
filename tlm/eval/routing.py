"""Routing of a query to a Yearly expert (paper §2.3, "Yearly" baseline).

"When provided with a test input, this approach routes it to the appropriate yearly expert based
on its timestamp. If the timestamp falls outside 2010-18, we use the closest yearly expert (e.g.
2018 for all test inputs >= 2018)."
"""

from collections.abc import Sequence


def route_to_expert(year: int, expert_years: Sequence[int]) -> int:
  """Returns the expert year for a query of `year`: its own, else the closest one.

  Ties (a year exactly between two experts, possible only when the experts have gaps) go to the
  earlier expert, which has not seen the future.
  """
  if not expert_years:
    raise ValueError("no yearly experts to route to")
  return min(sorted(expert_years), key=lambda e: (abs(e - year), e))
