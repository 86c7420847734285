"""Remote workers: batches decoded on Ray actors (FastLoader(path, remote=fastloader.Remote(...))),
the same bytes as the local producer's, in plan order, redone elsewhere when a worker is lost.

`options.py` the checked `Remote`; `cluster.py` Ray joined or started, actors placed and killed;
`worker.py` the actor; `dispatch.py` the window of batches in flight beside the local decode
(each worker's counters, which stats() reports, are kept on its cluster.Worker).
What an actor runs for a kind of records (and
how the trainer takes its result) comes from the loader: loader/packed/remote_images.py,
remote_views.py (views=) and loader/clips/remote_clips.py. See docs/remote-workers.md.
"""
