"""A whole job's rank files analysed rank by rank, in worker processes or on a Dask cluster."""
