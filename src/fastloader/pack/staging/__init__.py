"""The staging of one pack: its folder and lock (journal), the shard plan, the parts the shard
tasks write, the commit that checks them and publishes DST, and a URL DST's remote staging."""
