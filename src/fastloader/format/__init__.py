"""Packed dataset format: manifest, index arrays, LMDB/HDF5 shards and the dataset reader."""
