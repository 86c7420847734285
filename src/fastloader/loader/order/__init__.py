"""Epoch order and resume: which samples each rank reads in an epoch, in what order, and where a
checkpoint resumes (samplers, the shard-aware shuffle, a mix's order, duration batches, passes).
Pure functions of seeds and sizes; imports no other part of loader/."""
