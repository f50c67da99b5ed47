"""Observation of runs: the run records (:mod:`.runs`) and the lag histograms they hold
(:mod:`.lag`)."""
