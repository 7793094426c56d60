"""GPU idleness probe: the dmon parser, the SSH runner and the prober."""
