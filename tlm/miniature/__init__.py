"""The miniature: the paper's protocol end to end on a CPU, its claims and their statistics.

`reproduce` (the pipeline, one `seed=S/` per seed; `parallel` its worker pool; `starts` the
pre-trained starting points), `measurements` (one seed's per-query numbers, per_query.json),
the claims (`claims` the registry; `table_claims`, `figure_claims`, `mechanism` one function
per claim; `claim_parts` what they share; `year_tracking` M2's rates), `stats` (the paired
cluster bootstrap), `claim_summary` (summary.json) and `over_seeds` (Table 2 and the figures
over seeds). Above the paper's evaluations (`tlm.eval`), which it runs.
"""
