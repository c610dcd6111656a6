"""Training workloads in PyTorch (eager ``nn.Module``s); importing a module here imports torch."""
