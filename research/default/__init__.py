"""The search for the miniature's default protocol on exploration seeds (`search`), and the
pre-registered verdict of the chosen default (research/protocol2800/PREREGISTRATION.md)."""
