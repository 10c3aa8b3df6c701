"""``servetune compare``: did a change help? Runs and sweeps, figure by figure, with
confidence intervals that respect how requests within a run depend on each other."""
