"""`kit map`: the replication map of one study from many hosts (issue 42, item 2).

Each input (a run directory or a bundle) is loaded and checked (:mod:`kit.replication.inputs`), given a host class
from its provenance alone (:mod:`kit.replication.hostclass`), and the claims' verdicts are laid out claim by host
class with a random-effects pooled ratio across classes (:mod:`kit.replication.meta`, :mod:`kit.replication.build`),
then written as HTML, LaTeX and JSON (:mod:`kit.replication.render`).
"""
