"""Images' filler for the producer (records read, crops planned, decoded into a ring slot,
batch_transform) and the fields that travel with a batch (collation, boxes, masks, further
images). May import loader/pipeline/."""
