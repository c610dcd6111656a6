"""Every analysis of a whole job's rank files, run rank by rank in worker processes or on a Dask cluster.

``ranks`` is the layer they share (a function of one rank mapped over the job, the parts a later round needs kept
in a scratch folder, a function of one step mapped over them); ``workers`` runs the tasks and ``scratch`` keeps the
parts. One module per job-wide analysis gives the layer its functions and its reduce: ``comm``, ``count_ops``,
``critical_path``, ``whatif``.
"""
