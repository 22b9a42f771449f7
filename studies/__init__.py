"""Studies: scientific reproductions on canaries (models whose members are known), each printing JSON lines.

Run from the repository root as modules: ``python -m studies.NAME --json``.
"""
