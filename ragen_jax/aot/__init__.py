"""Ahead of time for GPUs on a host without one: every program a run compiles (`programs`), lowered for CUDA or
compiled for an H100/H200 that is not there, with XLA's bytes, matmul FLOPs (`flops`) and the paper roofline (`gpu`)."""
