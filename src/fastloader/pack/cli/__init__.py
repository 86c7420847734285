"""The packdata command line (fastloader.pack.cli.main.main)."""
