"""Recording a run into a run directory: FULL_TRACE and tf.profiler sessions after the timed window
(``session``), the built-in workload's capture sequence (``workload``), a user's script (``script``),
a running job (``attach``), the in-code API (``api``), NVTX ranges (``nvtx``) and SIGTERM ending a capture
like Ctrl-C (``interrupt``)."""
