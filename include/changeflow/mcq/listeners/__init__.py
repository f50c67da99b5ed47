"""Listeners: the loop that consumes a listener's changes, and the shipped handlers.

* :mod:`.runner`: drain a listener's queue once (a batch run), or poll it (a
  real-time listener), acknowledging each change its handler took and putting back,
  with a growing hold, each one it could not;
* :mod:`.xml`: the generic XML listener (one XML document per change, for feeds);
* :mod:`.pg_import`: the import-table listener (seed Figure 6);
* :mod:`.handlers`: building a listener's handler from its configuration.
"""
