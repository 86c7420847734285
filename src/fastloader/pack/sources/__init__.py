"""What each source lists and how one of its items is read and prepared: an ImageFolder tree
(local or at a URL), tables, file groups and .tar shards, COCO files, and the values of
samples' fields."""
