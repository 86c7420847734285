"""Work on packed datasets: append, merge, info, verify."""
