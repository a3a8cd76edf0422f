"""The claims' intervals: their coverage over three seeds on simulated clustered data
(`coverage`), and how much wider they are with the cluster bootstrap than with single items
on a seed's results (`cluster_se`)."""
