"""Who runs the shard tasks: this machine's processes, or a Ray cluster."""
