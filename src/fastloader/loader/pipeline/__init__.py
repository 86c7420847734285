"""The one batch producer every packed loader runs, and what it needs: the batch ring, the
autotuner, its threads, the live counters and on_error's skip budget. Imports no other part of
loader/."""
