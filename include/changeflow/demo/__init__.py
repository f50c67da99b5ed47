"""The demo: an HR source database in snapshots, and the check that targets match it."""
