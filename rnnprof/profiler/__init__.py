"""Everything that touches a training run or its files, in the order data flows:

* ``run/``: training on N devices (runner, variable updates, all-reduce, the timing protocol, sweeps);
* ``capture/``: recording a run (FULL_TRACE and tf.profiler sessions, scripts, attach, the API, NVTX);
* ``rundir/``: the run directory: its layout, the manifest, the Chrome-trace and XSpace writers;
* ``loaders/``: reading any supported trace or graph back into an ``rnnprof.events.EventTable``.
"""
