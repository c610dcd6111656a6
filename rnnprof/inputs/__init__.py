"""What an analysis needs from the paths a user gave: events, graphs and manifest (read), a sweep's traced runs
(explained), critical-path's graph inputs and arrows (dependencies), roofline's inputs by kind, TensorFlow's kernel
list (kernels). Above the analyzers: these modules may run an analysis to build an input."""
