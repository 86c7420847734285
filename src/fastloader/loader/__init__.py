"""The pipelines: FastLoader's face and its three loaders (packed, drop-in, DALI), with the
producer, batch ring, sampler, autotuner and counters they share."""
